"""``python -m accuracy mutate KERNEL``: mutation testing of your own kernel.

KERNEL is ``package.module:function`` (as ``--backend`` takes it) or ``path/to/file.py:function``.
Each single-point edit of the function's body (``cases.mutation.mutator``) is compiled into a copy
of its module's namespace and judged by the operator's gate at the cases, smallest first; the
unmutated kernel first. Markdown to stdout (``--json OUT``: the same as JSON), progress on stderr.
Exit 0 when the score is computed, 2 with one line when an input is refused.

    python -m accuracy mutate operators.swiglu_backward.kernels.plain:plain --limit 20
    python -m accuracy mutate my_kernel.py:backward --cases M2-K96-N200-unit-s0,M1025-K96-N200-seed-s0
"""
from __future__ import annotations

import argparse
import sys

import operators
from cases.mutation.report import markdown, write_json
from cases.mutation.score import by_size, score_kernel, small_cases
from cases.mutation.source import KernelSourceError, read_kernel
from cases.spec import CaseSpec
from contract.operator import Operator
from contract.records import parse
from runs.output_paths import OutputPathError, output_file


class CasesError(ValueError):
    """A --cases value that is neither ``quick`` nor case ids of the operator."""


def chosen_cases(operator: Operator, text: str) -> list[CaseSpec]:
    if text == "quick":
        return by_size(small_cases(operator))
    cases = []
    for case_id in (t.strip() for t in text.split(",") if t.strip()):
        parsed = parse(case_id)
        example = small_cases(operator)[0].id
        if parsed is None or list(parsed[0]) != list(operator.dims) or parsed[1] not in operator.scales:
            raise CasesError(f"--cases {case_id!r}: expected 'quick' or case ids of operator {operator.name!r} "
                             f"(its dimensions {', '.join(operator.dims)}, a scale of {', '.join(operator.scales)} "
                             f"and a seed), e.g. {example}")
        sizes, scale, seed = parsed
        cases.append(CaseSpec(*sizes.values(), scale, seed, operator=operator))
    if not cases:
        raise CasesError("--cases: no case given")
    return by_size(dict.fromkeys(cases))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m accuracy mutate", description=__doc__.split("\n")[0])
    parser.add_argument("kernel", metavar="KERNEL", help="package.module:function or path/to/file.py:function")
    parser.add_argument("--operator", default=operators.DEFAULT, help="the operator it computes (default %(default)s)")
    parser.add_argument("--cases", default="quick",
                        help="'quick' (the quick profile's cases at the smallest shape, M below 100000) or case ids, "
                             "comma-separated (e.g. M2-K96-N200-unit-s0)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N mutants")
    parser.add_argument("--json", metavar="OUT", help="write the score and every mutant's verdict as JSON")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="seconds of kernel calls a mutant may take over all cases (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        operator = operators.get(args.operator)
        cases = chosen_cases(operator, args.cases)
        read_kernel(args.kernel)
        if args.limit is not None and args.limit < 1 or args.timeout <= 0:
            raise CasesError("--limit and --timeout must be positive")
        if args.json:
            output_file(args.json, "--json")     # refused before any mutant runs, never over a run
    except (operators.OperatorNotFound, KernelSourceError, CasesError, OutputPathError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)     # one line
        return 2
    result = score_kernel(args.kernel, operator, cases, limit=args.limit, timeout=args.timeout)
    print(markdown(result))
    if args.json:
        write_json(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
