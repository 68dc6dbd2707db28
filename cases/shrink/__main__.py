"""``python -m accuracy shrink RESULTS CELL``: the smallest case that still fails a cell's way.

RESULTS is a results directory, a run folder or a results file; CELL is ``CASE_ID:BACKEND``, or
``CASE_ID`` where one backend failed there. The cell's case is judged again here, then shrunk
(``cases.shrink.search``: M, the other dimensions, the scale profile, the seed) to the smallest
case whose same output fails by the same first test (``cases.shrink.failure``), which is judged
once more at the end. Progress on stderr (``step i, case, verdict, time``); the result and the
command that reruns it on stdout. Exit 0 when shrunk or when nothing smaller fails, 1 when the
cell's failure does not reproduce here, 2 with one line for a RESULTS or CELL that is refused.

    python -m accuracy shrink results M220000-K512-N1024-seed-s0:article-schedule-emulated
    python -m accuracy shrink results/runs/<run> M4097-K96-N200-seed-s0 --budget 120
"""
from __future__ import annotations

import argparse
import shlex
import sys

import operators
from cases.shrink.cell import CellError, failing_cell
from cases.shrink.search import Shrunk, shrink
from cases.spec import CaseSpec
from kernels.registry import BackendNotFound, resolve


def rerun_command(spec: CaseSpec, backend: str) -> str:
    """The matrix's command for this case and backend alone (its inputs regenerate from the case id)."""
    args = ["pytest", "cases/", "-p", "no:xdist", "--profile", "none",
            "--case", ",".join(map(str, (*spec.sizes, spec.scale, spec.seed))), "--backend", backend]
    if spec.operator != operators.DEFAULT:
        args += ["--operator", spec.operator]
    return " ".join(shlex.quote(a) for a in args)


def report(result: Shrunk) -> str:
    cell, failure = result.cell, result.cell.failure
    lines = [f"cell: {cell.id} fails {failure.describe()}"]
    if not result.smaller and result.cut:
        lines.append(f"shrunk: no smaller case failed {failure.output} by {failure.first} in the "
                     f"{result.evaluations} evaluation{'s' if result.evaluations != 1 else ''} the budget allowed; "
                     f"{cell.spec.id} is the smallest case found")
    elif not result.smaller:
        lines.append(f"shrunk: nothing smaller fails {failure.output} by {failure.first}; {cell.spec.id} is the "
                     f"smallest case found")
    else:
        lines.append(f"shrunk: {result.smallest.id} fails {result.verified.failure.describe()}")
    if result.cut:
        lines.append("search cut: the --budget ran out; this is the smallest failing case found so far")
    lines.append(f"search: {result.evaluations} evaluations in {result.seconds:.1f} s")
    lines.append(f"rerun: {rerun_command(result.smallest, cell.backend)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m accuracy shrink", description=__doc__.split("\n")[0])
    parser.add_argument("results", metavar="RESULTS", help="a results directory, run folder or results file")
    parser.add_argument("cell", metavar="CELL", help="CASE_ID:BACKEND, or CASE_ID where one backend failed there")
    parser.add_argument("--output", default=None, metavar="NAME",
                        help="the failing output to shrink for (default: the cell's first failing output)")
    parser.add_argument("--budget", type=float, default=300.0, metavar="SECONDS",
                        help="time for the whole search (default %(default)s); the smallest case found so far "
                             "when it runs out")
    parser.add_argument("--case-timeout", type=float, default=300.0, metavar="S",
                        help="longest one backend call may take before its process is killed (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        if args.budget <= 0 or args.case_timeout <= 0:
            raise CellError("--budget and --case-timeout must be positive")
        cell = failing_cell(args.results, args.cell, args.output)
        backend = resolve(cell.spec.declaration, cell.backend)
    except (CellError, BackendNotFound) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)     # one line
        return 2
    result = shrink(cell, backend, budget=args.budget, case_timeout=args.case_timeout)
    if not result.reproduced:
        print(f"cell: {cell.id} fails {cell.failure.describe()} in {args.results}\n"
              f"not reproduced here: {result.original.describe(cell.failure)}; the failure is flaky or "
              f"depends on the platform it ran on (device, CPU, library versions)")
        return 1
    if result.verified is not None and not result.verified.reproduces(cell.failure):
        print(f"cell: {cell.id} fails {cell.failure.describe()}\n"
              f"re-verification of {result.smallest.id} failed: {result.verified.describe(cell.failure)}; "
              f"the failure is flaky at that case\nsearch: {result.evaluations} evaluations in {result.seconds:.1f} s")
        return 1
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
