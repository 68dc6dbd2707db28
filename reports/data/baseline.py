"""What changed against a baseline run: new and fixed failures, worse metrics."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from contract.records import Metrics

from reports.data.records import FAILING, Index, NOISE_MAX_ABS_FACTOR, NOISE_ULP_P99, metrics_of, num
from reports.data.verdicts import row_anchor, verdict_cells


@dataclass
class Change:
    case: str
    backend: str
    output: str
    golden: str
    before: str
    after: str
    detail: str = ""
    anchor: str = ""


@dataclass
class BaselineDiff:
    new_failures: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    worse: list[Change] = field(default_factory=list)
    better: list[Change] = field(default_factory=list)
    added_cells: int = 0
    removed_cells: int = 0
    compared_cells: int = 0


def _failing(status: str | None) -> bool:
    return status in FAILING


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}"


def _worse(before: Metrics, after: Metrics) -> list[str]:
    """Why ``after`` is worse than ``before`` beyond noise (empty if it is not)."""
    reasons = []
    p_b, p_a = num(before.ulp_p99), num(after.ulp_p99)
    if p_b is not None and p_a is not None and p_a - p_b > NOISE_ULP_P99:
        reasons.append(f"ULP p99 {_fmt(p_b)} -> {_fmt(p_a)} (+{p_a - p_b:.3g} > {NOISE_ULP_P99:g})")
    e_b, e_a = num(before.max_abs_err), num(after.max_abs_err)
    if e_b is not None and e_a is not None:
        if math.isfinite(e_b) and not math.isfinite(e_a):
            reasons.append(f"max abs err {_fmt(e_b)} -> {_fmt(e_a)}")
        elif math.isfinite(e_a) and e_a > NOISE_MAX_ABS_FACTOR * e_b and e_a > 0:
            reasons.append(f"max abs err {_fmt(e_b)} -> {_fmt(e_a)} (x{e_a / e_b:.3g})" if e_b > 0
                           else f"max abs err 0 -> {_fmt(e_a)}")
    nf_b, nf_a = num(before.nonfinite_disagreements) or 0, num(after.nonfinite_disagreements) or 0
    if nf_a > nf_b:
        reasons.append(f"NaN/Inf disagreements {nf_b:g} -> {nf_a:g}")
    return reasons


def baseline_diff(current: Index, baseline: Index) -> BaselineDiff:
    """Cells (case x backend x output) whose verdict changed, and records whose metrics got worse
    beyond noise: ULP p99 up by more than NOISE_ULP_P99, or max abs error up by more than
    NOISE_MAX_ABS_FACTOR (or from 0 / finite to non-zero / non-finite), or new NaN/Inf disagreements."""
    diff = BaselineDiff()
    cur, base = verdict_cells(current), verdict_cells(baseline)
    diff.added_cells = len(set(cur) - set(base))
    diff.removed_cells = len(set(base) - set(cur))
    for key in sorted(set(cur) & set(base)):
        diff.compared_cells += 1
        a, b = cur[key], base[key]
        change = Change(*key, a.golden or b.golden or "", b.status, a.status, anchor=a.anchor)
        if a.status in ("fail", "error") and b.status not in ("fail", "error"):
            change.detail = a.message.splitlines()[0] if a.message else ""
            diff.new_failures.append(change)
        elif (b.status in ("fail", "error", "expected_failure") and a.status in ("pass", "unexpected_pass")):
            diff.fixed.append(change)
    for key in sorted(set(current.by_golden) & set(baseline.by_golden)):
        m_a, m_b = metrics_of(current.by_golden[key]), metrics_of(baseline.by_golden[key])
        reasons = _worse(m_b, m_a)
        case, backend, output, golden = key
        if reasons:
            diff.worse.append(Change(case, backend, output, golden, "", "", "; ".join(reasons),
                                     row_anchor(case, backend, output)))
        elif _worse(m_a, m_b):
            diff.better.append(Change(case, backend, output, golden, "", "", "; ".join(_worse(m_a, m_b)),
                                      row_anchor(case, backend, output)))
    return diff
