"""Statistics of verdicts over seeds: failure rates with confidence intervals, the spread of
the p99 ULP error, and a gate decision over seeds.

One seed is one draw of the inputs; a gate that passes at seed 0 says little about seed 1.
Over N seeds each (backend, case, output) has k failures; the failure rate k/N comes with a
**Wilson score interval** (Wilson 1927; Agresti & Coull 1998): closed form, never outside
[0, 1], and, unlike the normal approximation, useful at k = 0 and k = N, the two counts this
framework mostly sees. At k = 0 its upper bound is z^2 / (N + z^2): 1.9% for N = 200 at 95%
(Clopper-Pearson's exact bound, 1 - 0.025^(1/N), is 1.8%). Two-sided, 95% by default.

The decision over seeds (``seed_gate``) fails when either

* the lower confidence bound of the failure rate is above ``max_failure_rate`` (default 0: a
  correct kernel is meant never to fail the gate, so a single failing seed is a finding; with
  a tolerated rate p0 > 0 it fails only when the data exclude p0), or
* the ``quantile`` of the per-seed p99 ULP error exceeds ``ulp_limit`` (when one is given):
  a kernel whose typical element drifts further from the golden on most seeds, even inside
  the per-seed gate.

Pure functions on result records (``cases.evaluate.records_for``; only gated records count)
or on plain verdict rows; nothing here raises on bad data: a record without the fields
needed is skipped and counted in ``skipped``.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from statistics import NormalDist

from runs.results import from_json_number

FAILED = ("fail", "expected_failure", "error")     # an expected failure is still a failure of the gate
PASSED = ("pass", "unexpected_pass")
_SEED = re.compile(r"-s\d+$")


def strip_seed(case_id: str) -> str:
    """``M2049-K96-N200-unit-s17`` -> ``M2049-K96-N200-unit``."""
    return _SEED.sub("", str(case_id))


def z_value(confidence: float) -> float:
    """Two-sided normal quantile; confidence clamped to (0, 1) exclusive."""
    c = min(max(float(confidence), 1e-9), 1 - 1e-12)
    return NormalDist().inv_cdf(0.5 + c / 2)


def wilson_interval(failures: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when n = 0 (no information)."""
    if n <= 0:
        return 0.0, 1.0
    k = min(max(int(failures), 0), int(n))
    z = z_value(confidence)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    # exact at the edges (the formula's rounding can leave 1e-17 there)
    return (0.0 if k == 0 else lo), (1.0 if k == n else hi)


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation quantile (numpy's default) of the finite values; None when there are none."""
    xs = sorted(v for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v))
    if not xs:
        return None
    q = min(max(float(q), 0.0), 1.0)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def verdict_rows(records: Iterable[Mapping]) -> tuple[list[dict], int]:
    """(rows, skipped): one row {backend, case, output, seed, failed, ulp_p99} per gated record.

    Accepts the framework's result records (``gated`` true, ``status`` pass/fail/
    expected_failure/unexpected_pass; an ``error`` record of output "*" fails every
    output; ``skipped`` and ``info`` records are not verdicts) and plain rows that already
    carry ``failed`` (bool)."""
    rows, skipped = [], 0
    for r in records:
        try:
            if not isinstance(r, Mapping):
                skipped += 1
                continue
            status = r.get("status")
            if "failed" in r and isinstance(r["failed"], bool):
                failed = r["failed"]
            elif status in FAILED and (r.get("gated") or status == "error"):
                failed = True
            elif status in PASSED and r.get("gated"):
                failed = False
            else:
                skipped += 1   # info rows (non-gated goldens), skips, malformed
                continue
            case = str(r.get("case", "?"))
            spec = r.get("case_spec") if isinstance(r.get("case_spec"), Mapping) else {}
            seed = spec.get("seed", r.get("seed"))
            if seed is None:
                m = re.search(r"-s(\d+)$", case)
                seed = int(m.group(1)) if m else None
            metrics = r.get("metrics") if isinstance(r.get("metrics"), Mapping) else {}
            rows.append({"backend": str(r.get("backend", "?")), "case": strip_seed(case),
                         "output": str(r.get("output", "*")), "seed": seed, "failed": bool(failed),
                         "ulp_p99": from_json_number(r.get("ulp_p99", metrics.get("ulp_p99")))})
        except Exception:   # never raise on data
            skipped += 1
    return rows, skipped


def seed_gate(failures: int, n: int, p99s: Sequence[float] = (), *, confidence: float = 0.95,
              max_failure_rate: float = 0.0, ulp_limit: float | None = None, quantile_q: float = 0.9) -> dict:
    """The decision over seeds for one (backend, case, output); see the module docstring."""
    lo, hi = wilson_interval(failures, n, confidence)
    reasons = []
    if n > 0 and lo > max_failure_rate:
        reasons.append(f"failure rate {failures}/{n}: lower {confidence:.0%} bound {lo:.3g} > {max_failure_rate:.3g}")
    q = quantile(p99s, quantile_q)
    if ulp_limit is not None and q is not None and q > ulp_limit:
        reasons.append(f"p{100 * quantile_q:g} over seeds of the p99 ULP error is {q:.3g} > {ulp_limit:.3g}")
    if any(v is not None and isinstance(v, float) and math.isnan(v) for v in p99s) and ulp_limit is not None:
        reasons.append("p99 ULP is NaN at some seed")
    return {"passed": not reasons, "reasons": reasons, "failure_ci": (lo, hi), "p99_quantile": q}


def summarize(records: Iterable[Mapping], *, confidence: float = 0.95, max_failure_rate: float = 0.0,
              ulp_limit: float | None = None, quantile_q: float = 0.9) -> dict:
    """Per (backend, seed-stripped case, output): seeds, failures, rate, Wilson interval,
    p99-ULP distribution over seeds (min, median, p90, max) and the seed gate's decision.

    Returns ``{"groups": {(backend, case, output): {...}}, "skipped": int, "confidence": c}``.
    An ``error`` record (output "*") counts as a failure of every output of its group."""
    rows, skipped = verdict_rows(records)
    outputs_of: dict[tuple[str, str], set] = {}
    for row in rows:
        if row["output"] != "*":
            outputs_of.setdefault((row["backend"], row["case"]), set()).add(row["output"])
    groups: dict[tuple[str, str, str], dict] = {}
    for row in rows:
        targets = ([row["output"]] if row["output"] != "*"
                   else sorted(outputs_of.get((row["backend"], row["case"]), set())) or ["*"])
        for out in targets:
            g = groups.setdefault((row["backend"], row["case"], out), {"seeds": {}, "p99": []})
            seed = row["seed"] if row["seed"] is not None else f"#{len(g['seeds'])}"
            g["seeds"][seed] = g["seeds"].get(seed, False) or row["failed"]   # one verdict per seed
            if row["ulp_p99"] is not None and row["output"] != "*":
                g["p99"].append(row["ulp_p99"])
    result = {}
    for key, g in sorted(groups.items()):
        n = len(g["seeds"])
        k = sum(g["seeds"].values())
        p99 = g["p99"]
        result[key] = {
            "seeds": n, "failures": k, "failure_rate": k / n if n else None,
            "failing_seeds": sorted((s for s, f in g["seeds"].items() if f), key=str),
            "failure_ci": wilson_interval(k, n, confidence),
            "p99_ulp": {"min": quantile(p99, 0.0), "median": quantile(p99, 0.5), "p90": quantile(p99, 0.9),
                        "max": quantile(p99, 1.0), "n": len(p99)},
            "decision": seed_gate(k, n, p99, confidence=confidence, max_failure_rate=max_failure_rate,
                                  ulp_limit=ulp_limit, quantile_q=quantile_q),
        }
    return {"groups": result, "skipped": skipped, "confidence": confidence}


def catch_rate(caught_by_seed: Mapping[object, bool], confidence: float = 0.95) -> dict:
    """Fraction of seeds at which a wrong kernel was caught, with its Wilson interval."""
    n = len(caught_by_seed)
    k = sum(1 for v in caught_by_seed.values() if v)
    return {"seeds": n, "caught": k, "rate": k / n if n else None,
            "ci": wilson_interval(k, n, confidence),
            "missed_seeds": sorted((s for s, v in caught_by_seed.items() if not v), key=str)}
