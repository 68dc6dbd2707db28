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

from accuracy.tolerances import Tolerance, tolerances_for
from contract.operator import Operator


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
    # the four checks an output must pass (None: not made for this output)
    elementwise_passed: bool = True
    scale_passed: bool | None = None        # fitted scale beta within the model's noise
    direction_passed: bool | None = None    # errors as often toward zero as away, and as often up as down
    own_passed: bool | None = None          # downstream outputs consistent with its own upstream ones
    localized_passed: bool | None = None    # the fitted scale of every row and column window (``accuracy.localized``)
    variance_passed: bool | None = None     # the errors' mean square within a correct kernel's variance
    # an operator over heads: the fitted scale pooled over every head (``accuracy.heads``)
    heads_scale_passed: bool | None = None

    @property
    def fails_on_its_own(self) -> bool:
        """Failed by a test of this output alone, not only by the heads' pooled fitted scale."""
        return not all(x is not False for x in (self.elementwise_passed, self.scale_passed, self.direction_passed,
                                                self.own_passed, self.localized_passed, self.variance_passed))


def _idx(index) -> str:
    return "(" + ", ".join(str(i) for i in index) + ")" if index is not None else "(-)"


def _g(x) -> str:
    return "n/a" if x is None else f"{x:.6g}"


def _direction_counts(agg: Mapping) -> list[tuple]:
    """The rounding-direction counts of a record that were tested, each as (errors on the first
    side, imbalance, first side, other side, what the sides' names mean, cause when the imbalance
    is positive, cause when negative); both share ``direction_allowed``. Empty where no direction
    test was made; records written before the upward count hold the first one only, those of an
    output tested upward only (``Allowance.toward_zero``) the second."""
    counts = []
    if agg.get("direction_imbalance") is not None:
        counts.append((agg["toward_zero"], agg["direction_imbalance"], "toward zero", "away", "",
                       "round-toward-zero (truncating) stores or a flush to zero", "rounding away from zero"))
    if agg.get("up_imbalance") is not None:
        counts.append((agg["upward"], agg["up_imbalance"], "upward", "downward", " whatever the value's sign",
                       "stores rounding toward +inf (ceil)", "stores rounding toward -inf (floor)"))
    return counts


def aggregate_checks(metrics: Mapping) -> tuple[bool | None, bool | None]:
    """(scale, direction) of the aggregate tests, or (None, None) where they were not made."""
    agg = metrics.get("aggregate")
    if not agg:
        return None, None
    counts = _direction_counts(agg)
    direction = all(abs(c[1]) <= agg["direction_allowed"] for c in counts) if counts else None
    return abs(agg["scale_beta"]) <= agg["scale_allowed"], direction


def localized_checks(metrics: Mapping) -> tuple[bool | None, bool | None]:
    """(windows, variance) of the localized tests, or None where they were not made."""
    local = (metrics.get("aggregate") or {}).get("localized")
    if not local:
        return None, None
    windows = [w for w in (local.get("rows"), local.get("columns")) if w]
    variance = local.get("variance")
    return (all(w["passed"] for w in windows) if windows else None,
            None if variance is None else variance["passed"])


def _span(axis: str, start: int, stop: int) -> str:
    return f"{axis} {start}" if stop - start == 1 else f"{axis} {start}..{stop - 1}"


def _localized_lines(local: Mapping, windows_ok: bool | None, variance_ok: bool | None, output: str) -> list[str]:
    lines = []
    if windows_ok is False:
        for w in (local.get("rows"), local.get("columns")):
            if not w or w["passed"]:
                continue
            worst = w["worst"]
            lines.append(f"Localized error: {output} {_span(w['axis'], worst['start'], worst['stop'])}: fitted scale "
                         f"{100 * worst['beta']:+.3g}% (allowed +-{worst['allowed']:.3g}: {w['sigmas']:.3g} sigma of a "
                         f"correct kernel's noise over {w['windows']} scanned windows of {w['axis']} plus its rounding "
                         f"bias; {worst['ratio']:.3g}x the allowance; {w['failing_windows']} windows fail): "
                         f"a part of the output (a tile, a few {w['axis']}) is wrong")
    if variance_ok is False:
        v = local["variance"]
        lines.append(f"Excess variance: the errors' mean square is {v['ratio']:.3g}x a correct kernel's model "
                     f"variance (own store plus legitimate noise; allowed up to {v['allowed']:.3g}x): errors beyond "
                     f"rounding noise of either sign, such as random-sign noise or an input staged at a lower precision")
    return lines


# A kernel whose values have the reference's size (rms within a factor 2) but point elsewhere (cosine
# below 0.5; a one-row shift of independent values gives ~0, the 5%-scaled dg of a wrong kernel 0.9999)
# has its values in the wrong places: the fitted scale then reads ~-1, which is no uniform error.
SHIFT_COSINE, SHIFT_RMS_RATIO = 0.5, 2.0


def _scale_cause(metrics: Mapping) -> str:
    cosine, ratio = metrics.get("cosine"), metrics.get("rms_ratio")
    if cosine is None or ratio is None:
        return "a uniform relative error"
    if cosine < SHIFT_COSINE and 1 / SHIFT_RMS_RATIO <= ratio <= SHIFT_RMS_RATIO:
        return (f"values of the reference's size (rms ratio {ratio:.3g}) in the wrong places (cosine {cosine:.3g}): "
                f"a shift or permutation of elements, an indexing error, not a uniform relative error")
    if ratio == 0:
        return "an all-zero output"
    if cosine < 1 - 1e-3:
        return f"a relative error that is not uniform (cosine {cosine:.4g}, rms ratio {ratio:.3g})"
    return "a uniform relative error"


def _aggregate_lines(agg: Mapping, scale_ok: bool, direction_ok: bool, metrics: Mapping | None = None) -> list[str]:
    lines = []
    if not scale_ok:
        lines.append(f"Fitted scale: kernel = (1 {'+' if agg['scale_beta'] >= 0 else '-'} "
                     f"{abs(agg['scale_beta']):.3g}) x FP64 (beta {agg['scale_beta']:.3g}, allowed +-"
                     f"{agg['scale_allowed']:.3g}: 7.5 sigma of a correct kernel's noise plus its rounding bias): "
                     f"{_scale_cause(metrics or {})}")
    if direction_ok is False:
        counted = agg["toward_zero"] + agg["away_from_zero"]
        allowed = agg["direction_allowed"]
        for first, imbalance, side, other, sense, positive, negative in _direction_counts(agg):
            if abs(imbalance) <= allowed:
                continue
            share = first / counted if counted else 0.0
            lines.append(f"Rounding direction: of {counted} errors of 1/4 to 1 ULP, {100 * share:.3g}% {side}, "
                         f"{100 * (1 - share):.3g}% {other} (imbalance {imbalance}, allowed +-{allowed:.0f}): "
                         f"one-sided errors{sense}, {positive if imbalance > 0 else negative}")
    return lines


def _own_lines(own: Mapping, output: str, operator: Operator | None) -> list[str]:
    gate = getattr(operator, "gate", None)
    source = gate.OWN_SOURCE[output] if gate is not None else "its own upstream outputs"
    upstream = gate.UPSTREAM if gate is not None else "the upstream outputs"
    w = own["worst"][0] if own["worst"] else None
    where = (f"; worst at {_idx(w['index'])}: kernel {w['actual']:.6g}, recomputed {w['expected']:.6g}"
             if w else "")
    return [f"Inconsistent with its own upstream outputs: {own['mismatches']} / {own['numel']} elements differ "
            f"from the recompute ({source}) beyond the allowance{where}: an accumulation, tiling or indexing error "
            f"downstream of {upstream}"]


def verdict(output: str, golden: str, metrics: Mapping, *, case: str = "?", backend: str = "?",
            attribution: Mapping | None = None, own: Mapping | None = None,
            own_set_aside: tuple[str, ...] = (), operator: Operator | None = None) -> Verdict:
    """Pass = no element outside rtol x |reference| + atol + allowance, the fitted scale and the
    rounding direction within the noise of a correct kernel, and, for a downstream output
    (SwiGLU's db, dw, dx), consistency with the kernel's own upstream outputs (``own``: the
    metrics against them); ``own_set_aside``: the failing upstream outputs for which that check was not made;
    ``operator``: whose gate names the recompute in the message."""
    mism = metrics["mismatches"]
    elementwise_ok = mism == 0
    scale_ok, direction_ok = aggregate_checks(metrics)
    windows_ok, variance_ok = localized_checks(metrics)
    own_ok = None if own is None else own["mismatches"] == 0
    pooled = metrics.get("heads_scale")
    heads_ok = None if pooled is None else pooled["passed"]
    passed = (elementwise_ok and scale_ok is not False and direction_ok is not False and own_ok is not False
              and windows_ok is not False and variance_ok is not False and heads_ok is not False)
    n = metrics["numel"]
    atol, eff, rtol = metrics["atol"], metrics["atol_effective"], metrics["rtol"]
    tol_text = f"rtol {rtol:.6g}, atol {atol:.6g}"
    if metrics["atol_capped"]:
        tol_text += (f" capped to {eff:.3g} = rtol x rms(golden) because the atol swamps this "
                     f"output's values (rms of its reference {metrics.get('atol_rms', metrics['golden_rms']):.3g})")
    lines = [f"{'Passed' if passed else 'Accuracy gate failed'}: case {case}, backend {backend!r}, "
             f"output {output!r} vs golden {golden!r} ({tol_text})"]
    if not passed:
        count = f"{mism}" if metrics["mismatches_exact"] else f"{mism}..{metrics['mismatches_upper']}"
        if elementwise_ok:
            lines.append(f"Element-wise within the gate: 0 / {n} elements beyond rtol x |reference| + atol"
                         + (" + the allowance" if metrics.get("allowance") else "") + "; failed by:")
        else:
            lines.append(f"Mismatched elements: {count} / {n} ({100 * mism / max(n, 1):.3g}%)"
                         + (" beyond rtol x |reference| + atol + the allowance of the operator's legitimate choices"
                            if metrics.get("allowance") else ""))
        if scale_ok is False or direction_ok is False:
            lines += _aggregate_lines(metrics["aggregate"], scale_ok, direction_ok, metrics)
        if windows_ok is False or variance_ok is False:
            lines += _localized_lines(metrics["aggregate"]["localized"], windows_ok, variance_ok, output)
        if heads_ok is False:
            lines.append(f"Fitted scale pooled over the {pooled['heads']} heads: kernel = (1 "
                         f"{'+' if pooled['beta'] >= 0 else '-'} {abs(pooled['beta']):.3g}) x FP64 (allowed +-"
                         f"{pooled['allowed']:.3g}: 7.5 sigma of the pooled noise {pooled['sigma']:.3g} plus the heads' "
                         f"rounding bias {pooled['bias']:.3g}): the heads lean the same way, a bias common to them "
                         f"(a scale, a constant, an input staged at a lower precision) too small to fail one head")
        if own_ok is False:
            lines += _own_lines(own, output, operator)
        if own_set_aside:
            lines.append(f"Own-upstream check set aside: its own {'/'.join(own_set_aside)} fails against the "
                         f"reference, so the recompute from it carries that error")
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
            # a source with non-finite values says so: its max abs is over finite pairs only
            nonfinite = attribution.get("nonfinite") or {}

            def source(name: str) -> str:
                count = nonfinite.get(name)
                return _g(attribution[name]) + (f" (+{count} non-finite)" if count else "")
            lines.append(f"Error vs FP64 by source (max abs): storage {source('storage')}, tile order "
                         f"{source('tile_order')}, kernel {source('kernel')} -> dominant: "
                         f"{attribution['dominant']}")
        seed_caught = metrics["mismatches_seed_gate"] > 0
        lines.append(f"The article's gate (atol {atol:.3g}) would {'also fail' if seed_caught else 'PASS'} this output"
                     + (" (it accepts an all-zero output here)" if metrics["zero_passes_seed_gate"] else ""))
    if not passed and metrics.get("detection_floor") is not None:
        lines.append(f"Detection floor here: a uniform relative error above {metrics['detection_floor']:.3g} "
                     f"fails element-wise"
                     + (f", above {metrics['aggregate']['scale_allowed']:.3g} by the fitted scale"
                        if metrics.get("aggregate") else ""))
    return Verdict(output, golden, passed, bool(metrics["zero_passes_seed_gate"]),
                   bool(metrics["atol_capped"]), "\n".join(lines), elementwise_ok, scale_ok, direction_ok, own_ok,
                   windows_ok, variance_ok, heads_ok)


def gated_verdicts(operator: Operator, backend_metrics: Mapping, *, case: str, backend: str,
                   attribution: Mapping | None = None,
                   tolerances: Mapping[str, Tolerance] | None = None) -> dict[str, Verdict]:
    """One verdict per output against that output's gated golden layer. A downstream output's own-upstream
    check is set aside where an upstream output it is recomputed from fails against the reference: the
    recompute then carries that error, and the disagreement says nothing about the downstream output
    (which the reference still judges)."""
    tolerances = tolerances_for(operator) if tolerances is None else tolerances
    reads = getattr(operator.gate, "OWN_READS", {})
    out = {}
    for o in sorted(operator.output_names, key=lambda o: o in reads):     # upstream outputs first
        golden = tolerances[o].golden
        own = backend_metrics[o].get("own")
        wrong_upstream = [u for u in reads.get(o, ()) if not out[u].passed]
        out[o] = verdict(o, golden, backend_metrics[o][golden], case=case, backend=backend,
                         attribution=None if attribution is None else attribution[o],
                         own=None if wrong_upstream else own, own_set_aside=tuple(wrong_upstream) if own else (),
                         operator=operator)
    return {o: out[o] for o in operator.output_names}


def assert_accurate(verdicts: Mapping[str, Verdict], outputs: list[str] | None = None) -> None:
    """Raise AccuracyError listing every failed output (or only ``outputs``)."""
    __tracebackhide__ = True
    failed = [v for o, v in verdicts.items() if not v.passed and (outputs is None or o in outputs)]
    if failed:
        raise AccuracyError("\n\n".join(v.message for v in failed))
