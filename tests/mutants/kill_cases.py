"""Where each wrong kernel is caught: the cheapest quick-profile case that catches it (seed 0),
the outputs that fail there (exactly: an output the bug does not touch must still pass) and
where its worst element must lie. Shared by the kill-matrix and faithfulness tests; the case
outcomes are computed once per process, with every backend of a case in one call (one golden pass)."""
from __future__ import annotations

import functools

from cases.evaluate import CaseOutcome, evaluate_case
from cases.matrix import quick_cases
from cases.spec import CaseSpec
from operators.swiglu_backward.kernels.mutants import CORRECT, MUTANTS
from kernels.registry import Backend, resolve
from operators.swiglu_backward import OPERATOR as SWIGLU

ALL = {"dg", "dfc", "db_g", "db_fc", "dw_g", "dw_fc", "dx"}
DB, DW = {"db_g", "db_fc"}, {"dw_g", "dw_fc"}
FP32_MIN_NORMAL = 2.0 ** -126

M2_UNIT = CaseSpec(2, 96, 200, "unit", 0)            # two rows: one partial tile in every kernel
M2049_UNIT = CaseSpec(2049, 96, 200, "unit", 0)      # b/x: 2 full tiles + 1-row tail; w: 1 full + 1-row tail
M2048_TINY = CaseSpec(2048, 96, 200, "tiny", 0)      # dg/dfc among the FP32 subnormals
M1_SATURATING = CaseSpec(1, 96, 200, "saturating", 0)  # g up to ~240: exp(g) overflows
M1025_SEED = CaseSpec(1025, 96, 200, "seed", 0)      # the article's input scale

# where the bug lives, as a predicate on the worst element's row, per output (row outputs only)
TAIL_ROWS = {o: (lambda row: row >= 2048) for o in ("dg", "dfc", "dx")}
LAST_ROW = {o: (lambda row: row == 2048) for o in ("dg", "dfc", "dx")}

# mutant -> (case, outputs that fail there, {output: row predicate})
KILLS = {
    "all_zero": (M2_UNIT, ALL, {}),
    "tail_dropped": (M2049_UNIT, ALL, TAIL_ROWS),
    "tail_valid_off_by_one": (M2049_UNIT, ALL, LAST_ROW),
    "tail_padding_leak": (M2049_UNIT, DB | DW, {}),       # stores are masked: dg, dfc, dx stay right
    "db_last_tile_only": (M2049_UNIT, DB, {}),
    "out_not_zeroed": (M2_UNIT, DB | DW, {}),
    "dx_swapped_weights": (M2_UNIT, {"dx"}, {}),
    "silu_grad_missing_factor": (M2_UNIT, {"dg", "db_g", "dw_g", "dx"}, {}),   # dfc does not use silu'
    # FP16 flushes the tiny profile's dg/dfc (~1e-38) to zero; db sums the unrounded FP32 values and is
    # right (only the w and x kernels read the store), so it passes once dg's error is not blamed on it
    "fp16_store": (M2048_TINY, ALL - DB, {}),
    "dw_x_not_transposed": (M2_UNIT, DW, {}),
    "subnormals_flushed": (M2048_TINY, ALL, {}),
    "sigmoid_exp_ratio": (M1_SATURATING, ALL, {}),
}
# a kernel right at the seed scale and wrong at large |g|: it must pass here
PASSES_AT = {"sigmoid_exp_ratio": M1025_SEED}

CASES = list(dict.fromkeys([c for c, _, _ in KILLS.values()] + list(PASSES_AT.values())))
CORRECT_NAMES = ("torch-eager", *CORRECT)


def backends_of(spec: CaseSpec) -> list[Backend]:
    names = [n for n, (c, _, _) in KILLS.items() if c == spec] + [n for n, c in PASSES_AT.items() if c == spec]
    return ([resolve(SWIGLU, "torch-eager")] + [Backend(n, f) for n, f in CORRECT.items()]
            + [Backend(n, MUTANTS[n]) for n in names])


@functools.cache
def outcome(spec: CaseSpec) -> CaseOutcome:
    return evaluate_case(spec, backends_of(spec))


def quick_small_ids() -> set[str]:
    return {c.id for c in quick_cases(SWIGLU)}
