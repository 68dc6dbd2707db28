"""The gate's mutation score: how many single-point edits of a plain correct kernel it catches.

The engine is the framework's (``cases.mutation``, the same as ``python -m accuracy mutate``); this
benchmark fixes its target, its edits and its definition of equivalent. An AST mutator edits
``benchmarks/mutation_score/target.py`` at one point each: arithmetic
swapped (+ -, * /), constants moved (0 -> 1, 1 -> 0 or 2), casts dropped, values staged through FP16 or rounded to BF16
(``.float()``, ``.to(bfloat16)``), products as BF16 GEMMs, a transpose dropped, same-shape tensors swapped (dy/g/fc,
dg/dfc, the weights, the returned outputs), reductions changed (sum -> mean), slice bounds moved,
an operand dropped or two swapped, a value negated or squared, and the sigmoid replaced by other forms (``0.5 (1 + tanh(g/2))``, ``exp(g) / (1 + exp(g))``).
Each mutant runs through the case matrix's own evaluation (``cases.evaluate.evaluate_case``, in
process, no dual verdict) at the quick profile's cases of the small shape (K=96, N=200; M below
100000), range cases included, and then, for the mutants that survived them (neither killed nor
equivalent), at the article's case (M=220000, K=512, N=1024): the quick profile's last case, one
golden pass for those few and the unmutated kernel (``--small-only`` leaves it out).
A systematic bias of a fraction of a BF16 rounding shows there and not at M <= 4097: the fitted
scale's noise band narrows about as the square root of the element count (220000 x 1024 against
4097 x 200: about 16x). A mutant is

* **killed by the contract** when it raises or returns the wrong names, dtypes or shapes;
* **killed by the gate** when any output fails at any case;
* **equivalent** when its outputs are bit-identical to the unmutated kernel's at every case
  (nothing to catch), or when the edit is one of the operator's declared legitimate choices
  (``LEGITIMATE``, each with its reason) or legitimate in this target (``LEGITIMATE_HERE``);
* **survived** otherwise: listed with the edit and its largest difference from the unmutated
  kernel in BF16 ULPs, for a person to triage (a legitimate path, or a real miss).

The cases run in the matrix's order and an FP64-or-better rewrite is not counted equivalent (the
command's default triage): the score stays comparable with the one measured before the engine
moved.

The score is killed / (all - equivalent).

    python -m benchmarks.mutation_score                     # markdown summary and survivors
    python -m benchmarks.mutation_score --json out.json --limit 50 --small-only
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cases.matrix import acceptance_case             # noqa: E402
from cases.mutation.mutator import MutationPlan     # noqa: E402
from cases.mutation.report import write_json        # noqa: E402
from cases.mutation.score import MutationScore, score_kernel, small_cases   # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU   # noqa: E402

TARGET = Path(__file__).with_name("target.py")

PLAN = MutationPlan(
    # same-shape names the kernel's author could confuse
    swaps=(("dyf", "gf", "fcf"), ("dy", "g", "fc"), ("w_g", "w_fc"), ("dg", "dfc"), ("dgf", "dfcf"),
           ("s", "silu", "dsilu"), ("db_g", "db_fc"), ("dw_g", "dw_fc")),
    # FP32 values of the kernel a store could round to BF16 (some such stores are legitimate: they
    # survive as equivalent or are triaged by hand)
    float_intermediates=("dyf", "gf", "fcf", "s", "silu", "dsilu", "dgf", "dfcf", "xf"),
    bf16_names=("dy", "g", "fc", "x", "w_g", "w_fc", "dg", "dfc"),
    returned_pairs=(("dg", "dfc"), ("db_g", "db_fc"), ("dw_g", "dw_fc")),
)


# Legitimate in this target only: every product's operands are BF16 values (the stored dg/dfc, x, the
# weights), so a BF16 GEMM loses nothing before its FP32 accumulation and is PyTorch autograd's own
# dw and dx (for dx, its two products stored before their sum). Where the platform's BF16 GEMM
# flushes subnormals (``bf16_gemm_keeps_subnormals = false``) such a mutant fails the tiny profile,
# as torch-eager does there (a platform-conditioned known failure): counted as a kill it would make
# the score depend on the CPU.
LEGITIMATE_HERE = {
    "@ as a BF16 GEMM, rounded to BF16": "a BF16 GEMM of BF16 values, stored once in BF16: PyTorch autograd's dw and dx",
}


def score(limit: int | None = None, timeout: float = 600.0, small_only: bool = False) -> MutationScore:
    return score_kernel(f"{TARGET}:kernel", SWIGLU, small_cases(SWIGLU), plan=PLAN, limit=limit, timeout=timeout,
                        fp64_or_better=False, legitimate_here=LEGITIMATE_HERE,
                        survivors_at=() if small_only else (acceptance_case(SWIGLU),))


def markdown(result: MutationScore) -> str:
    c = result.counts
    lines = [f"{len(result.mutants)} mutants of benchmarks/mutation_score/target.py over {len(result.cases)} cases "
             f"({', '.join(result.cases)}); {result.seconds:.0f} s",
             "", "| killed by the contract | killed by the gate | equivalent | survived | score |", "|---|---|---|---|---|",
             f"| {c['contract']} | {c['gate']} | {c['equivalent']} | {c['survived']} | "
             f"{100 * result.score:.2f}% |", "", "Survivors:", "", "| line | edit | difference |", "|---|---|---|"]
    lines += [f"| {m.line} | {m.edit} | p99 {m.ulp_from_baseline:.3g} BF16 ULP from the unmutated kernel |"
              for m in result.mutants if m.verdict == "survived"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mutation_score", description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N mutants")
    parser.add_argument("--json", metavar="FILE", help="write every mutant's verdict as JSON")
    parser.add_argument("--small-only", action="store_true",
                        help="the small cases alone, without the article's case for their survivors")
    args = parser.parse_args(argv)
    result = score(args.limit, small_only=args.small_only)
    print(markdown(result))
    if args.json:
        write_json(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
