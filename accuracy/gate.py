"""The accuracy gate: turns metrics into verdicts, and raises with a readable message.

``verdict`` is pure (the report calls it too); ``assert_accurate`` is the only
function in ``accuracy/`` that raises on numbers. Messages follow
``torch.testing.assert_close`` ("Mismatched elements: k / N (p%)", "Greatest
absolute difference: d at index (i, j) (up to t allowed)") and add the case,
backend, output and golden layer, the attribution of the error, and whether the
article's own gate would have noticed.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from accuracy.tolerances import TOLERANCES, Tolerance
from kernels.contract import OUTPUT_NAMES


class AccuracyError(AssertionError):
    """A backend's output is outside the gate's tolerance."""


@dataclass(frozen=True)
class Verdict:
    output: str
    golden: str
    passed: bool
    vacuous_seed_gate: bool     # would the article's gate accept all zeros here?
    atol_capped: bool           # did the magnitude-aware atol replace the article's?
    message: str


def _idx(index) -> str:
    return "(" + ", ".join(str(i) for i in index) + ")" if index is not None else "(-)"


def _g(x) -> str:
    return "n/a" if x is None else f"{x:.6g}"


def verdict(output: str, golden: str, metrics: Mapping, *, case: str = "?", backend: str = "?",
            attribution: Mapping | None = None) -> Verdict:
    mism = metrics["mismatches"]
    passed = mism == 0
    n = metrics["numel"]
    atol, eff, rtol = metrics["atol"], metrics["atol_effective"], metrics["rtol"]
    tol_text = f"rtol {rtol:.6g}, atol {atol:.6g}"
    if metrics["atol_capped"]:
        tol_text += (f" capped to {eff:.3g} = rtol x rms(golden) because the article's atol swamps this "
                     f"output's values (rms {metrics['golden_rms']:.3g})")
    lines = [f"{'Passed' if passed else 'Accuracy gate failed'}: case {case}, backend {backend!r}, "
             f"output {output!r} vs golden {golden!r} ({tol_text})"]
    if not passed:
        count = f"{mism}" if metrics["mismatches_exact"] else f"{mism}..{metrics['mismatches_upper']}"
        lines.append(f"Mismatched elements: {count} / {n} ({100 * mism / max(n, 1):.3g}%)")
        nf = metrics["nonfinite"]
        if metrics["nonfinite_disagreements"]:
            lines.append(f"Non-finite disagreement: NaN in kernel only {nf['nan_actual_only']}, "
                         f"NaN in golden only {nf['nan_expected_only']}, Inf mismatched {nf['inf_mismatch']}")
            first = metrics.get("first_nonfinite")
            if first:
                lines.append(f"First non-finite disagreement at index {_idx(first['index'])}: kernel "
                             f"{first['actual']:.6g}, golden {first['expected']:.6g}")
        among = " among finite pairs" if metrics["nonfinite_disagreements"] else ""
        lines.append(f"Greatest absolute difference{among}: {_g(metrics['max_abs_err'])} at index "
                     f"{_idx(metrics['max_abs_index'])} (up to {eff:.3g} + {rtol:.6g} x |golden| allowed)")
        lines.append(f"Greatest relative difference{among}: {_g(metrics['max_rel_err'])} at index "
                     f"{_idx(metrics['max_rel_index'])} (up to {rtol:.6g} allowed)")
        if metrics["worst"]:
            w = metrics["worst"][0]
            lines.append(f"Worst{' finite' if among else ''} element {_idx(w['index'])}: kernel {w['actual']:.6g}, golden {w['expected']:.6g}, "
                         f"{w['ulp']:.4g} BF16 ULP apart")
        lines.append(f"BF16 ULP distance{among}: p50 {_g(metrics['ulp_p50'])}, p99 {_g(metrics['ulp_p99'])}, "
                     f"max {_g(metrics['ulp_max'])}")
        if attribution is not None:
            lines.append(f"Error vs FP64 by source (max abs): storage {_g(attribution['storage'])}, tile order "
                         f"{_g(attribution['tile_order'])}, kernel {_g(attribution['kernel'])} -> dominant: "
                         f"{attribution['dominant']}")
        seed_caught = metrics["mismatches_seed_gate"] > 0
        lines.append(f"The article's gate (atol {atol:.3g}) would {'also fail' if seed_caught else 'PASS'} this output"
                     + (" (it accepts an all-zero output here)" if metrics["zero_passes_seed_gate"] else ""))
    return Verdict(output, golden, passed, bool(metrics["zero_passes_seed_gate"]),
                   bool(metrics["atol_capped"]), "\n".join(lines))


def gated_verdicts(backend_metrics: Mapping, *, case: str, backend: str, attribution: Mapping | None = None,
                   tolerances: Mapping[str, Tolerance] = TOLERANCES) -> dict[str, Verdict]:
    """One verdict per output against that output's gated golden layer."""
    out = {}
    for o in OUTPUT_NAMES:
        golden = tolerances[o].golden
        out[o] = verdict(o, golden, backend_metrics[o][golden], case=case, backend=backend,
                         attribution=None if attribution is None else attribution[o])
    return out


def assert_accurate(verdicts: Mapping[str, Verdict], outputs: list[str] | None = None) -> None:
    """Raise AccuracyError listing every failed output (or only ``outputs``)."""
    __tracebackhide__ = True
    failed = [v for o, v in verdicts.items() if not v.passed and (outputs is None or o in outputs)]
    if failed:
        raise AccuracyError("\n\n".join(v.message for v in failed))
