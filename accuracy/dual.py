"""The dual-benchmark verdict of msprobe's api_accuracy_checker: a kernel's errors against the
FP64 golden, metric by metric, as ratios to a trusted kernel's errors against the same golden.

msprobe (MindStudio Probe, ``msprobe/pytorch/api_accuracy_checker``, the "benchmark standard",
标杆比对法, from release 1.2.0 on: ``precision_standard/standard_config.py``,
``compare/algorithm.py``, ``compare/api_precision_compare.py``) computes, for BF16 outputs, over
the elements where both values are finite:

* small-value error ratio: among |golden| <= 2^-10, the share with |error| > 1e-16
  (``_benchmark_small_value`` 2^-10, ``_benchmark_small_value_atol`` 1e-16 for bfloat16;
  its documentation says 2^-16, the code 1e-16: any error on a small value counts);
* RMSE of the error over the other (normal) elements;
* max and mean relative error |error| / (|golden| + 2^-8) over the normal elements
  (BF16's epsilon in the denominator, as msprobe);
* error balance |#(error > 0) - #(error < 0)| / N (reported; msprobe does not gate on it);

and passes when the ratios kernel / benchmark are at most 2 (small value, RMSE, mean relative)
and 10 (max relative). Beside them we record msprobe's ULP rule (the share of elements more than
1 BF16 ULP from the golden: below 0.1%, or no more than the benchmark's), which msprobe applies to
matmul-like APIs instead of the four ratios; it gates only where the ratios are vacuous (below).

Where the benchmark's metric is zero or tiny. msprobe divides by max(benchmark, 2^-8). That floor
is absolute: the RMSE of an output whose values are 1e-5 (the article's dx, dw at randn/sqrt(M))
is far below it, so every kernel, all-zero included, passes that ratio there. Here the floor is
what the rounding model calls unavoidable: the same metric of the reference (FP64 rounded once to
BF16), the best a BF16 output can be. It scales with the output, is zero only where every golden
value is a BF16 number, and then a kernel with any error of that kind has an infinite ratio (a
benchmark and an ideal output both exact, the kernel not). Where kernel and floor are both zero
the ratio is 0 (pass). The error balance, a share, keeps msprobe's floor 2^-8.

Its thresholds are absolute, like the article's atol: where every |golden| is at most 1e-16 (the
tiny profile, values ~1e-38) no element is "small with an error" and none is normal, so every
ratio passes whatever the kernel does, a flush to zero included. There (``vacuous``) the ULP rule,
which is scale-free, gates instead of being reported: msprobe's own answer for outputs its
benchmark standard does not suit. A second blind spot is left as msprobe has it and reported: where
every value is small but above 1e-16 (the article's dw, rms 2.3e-6), every kernel errs on all of
them by more than 1e-16, so the small-value error ratio is 1 whatever the size of the error
(measured at M=220000: the article's kernel fails dw on the absolute gate, passes it here).

Metrics are data (``accuracy.metrics.ErrorStats`` with ``dual=True`` fills them); this module
turns them into ratios and a verdict; only the gate and the test raise.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

SMALL_VALUE = 2.0 ** -10        # msprobe StandardConfig._benchmark_small_value[bfloat16]
SMALL_VALUE_ATOL = 1e-16        # msprobe StandardConfig._benchmark_small_value_atol[bfloat16]
REL_EPS = 2.0 ** -8             # msprobe BFLOAT16_EPS, added to |golden| in the relative error
MINIMUM_ERR = 2.0 ** -8         # msprobe StandardConfig._minmum_err[bfloat16] (floor of the EB ratio)
ULP_SHARE_LIMIT = 1e-3          # msprobe ULP standard, fp16/bf16: share of elements beyond 1 ULP

# metric -> limit of the ratio kernel / benchmark (msprobe: error if ratio > limit); None: reported only
RATIO_LIMITS: dict[str, float | None] = {
    "small_value_error_ratio": 2.0,
    "rmse": 2.0,
    "max_rel_err": 10.0,
    "mean_rel_err": 2.0,
    "error_balance": None,
}
# msprobe computes a status for the error balance with this limit but leaves it out of the result
REPORTED_LIMITS = {"error_balance": 2.0}
DEFAULT_BENCHMARK = "torch-eager"
GATES = ("absolute", "dual", "both")


def ratio(kernel: float, benchmark: float, floor: float) -> float:
    """kernel / max(benchmark, floor); 0 where both are 0, inf where only the kernel errs."""
    denominator = max(abs(benchmark), abs(floor))
    if denominator == 0:
        return 0.0 if kernel == 0 else math.inf
    return abs(kernel) / denominator


@dataclass(frozen=True)
class DualVerdict:
    output: str
    benchmark: str
    passed: bool
    ratios: dict[str, float]
    failed: list[str]                       # metrics whose ratio is over its limit
    ulp_share: float                        # share of elements beyond 1 BF16 ULP (kernel)
    ulp_share_benchmark: float
    ulp_rule_passed: bool                   # msprobe's ULP rule (reported beside the four ratios)
    nonfinite_consistent: bool              # no more NaN/Inf disagreements with FP64 than the benchmark
    vacuous: bool                           # an all-zero output would pass here (msprobe's absolute thresholds)
    message: str
    metrics: dict = field(default_factory=dict)


def _line(name: str, k: float, b: float, floor: float, r: float, limit: float | None) -> str:
    lim = "reported" if limit is None else f"limit {limit:g}"
    return f"{name}: kernel {k:.4g}, benchmark {b:.4g} (floor {floor:.4g}) -> ratio {r:.4g} ({lim})"


def dual_verdict(output: str, kernel: Mapping, benchmark: Mapping, ideal: Mapping, *,
                 benchmark_name: str = DEFAULT_BENCHMARK, case: str = "?", backend: str = "?") -> DualVerdict:
    """``kernel``, ``benchmark``, ``ideal``: the ``dual`` metrics (``ErrorStats.finalize()["dual"]``)
    of the kernel, the benchmark kernel and the reference, each against the FP64 golden."""
    ratios, failed, lines = {}, [], []
    for name, limit in RATIO_LIMITS.items():
        floor = MINIMUM_ERR if name == "error_balance" else ideal[name]
        r = ratio(kernel[name], benchmark[name], floor)
        ratios[name] = r
        lines.append(_line(name, kernel[name], benchmark[name], floor, r, limit))
        if limit is not None and not r <= limit:
            failed.append(name)
    consistent = kernel["nonfinite_disagreements"] <= benchmark["nonfinite_disagreements"]
    if not consistent:
        failed.append("nonfinite")
        lines.append(f"inf/nan: {kernel['nonfinite_disagreements']} disagreements with FP64, the benchmark "
                     f"{benchmark['nonfinite_disagreements']}")
    ulp_ok = kernel["ulp_over_1_share"] < ULP_SHARE_LIMIT or kernel["ulp_over_1_share"] <= benchmark["ulp_over_1_share"]
    lines.append(f"ULP rule: {100 * kernel['ulp_over_1_share']:.3g}% of elements beyond 1 BF16 ULP, "
                 f"benchmark {100 * benchmark['ulp_over_1_share']:.3g}% (pass below {100 * ULP_SHARE_LIMIT:g}% "
                 f"or at most the benchmark's): {'pass' if ulp_ok else 'fail'}")
    vacuous = bool(kernel.get("zero_passes"))
    if vacuous:
        lines.append(f"Vacuous ratios here: every |golden| is at most {SMALL_VALUE_ATOL:g} (msprobe's small-value "
                     f"atol), so an all-zero output passes every ratio; the ULP rule (scale-free) decides instead")
        if not ulp_ok:
            failed.append("ulp_rule")
    passed = not failed
    head = (f"{'Passed' if passed else 'Dual-benchmark verdict failed'}: case {case}, backend {backend!r}, "
            f"output {output!r} vs benchmark {benchmark_name!r} (msprobe's BF16 limits"
            + (f"; over the limit: {', '.join(failed)}" if failed else "") + ")")
    return DualVerdict(output, benchmark_name, passed, ratios, failed, kernel["ulp_over_1_share"],
                       benchmark["ulp_over_1_share"], ulp_ok, consistent, vacuous, "\n".join([head] + lines),
                       dict(kernel))


def dual_verdicts(comparison: Mapping | None, benchmark: str, *, case: str = "?",
                  runs: Mapping | None = None) -> tuple[dict[str, dict[str, DualVerdict]], str | None]:
    """Every compared backend's dual verdict per output against ``benchmark`` at one case
    (``accuracy.compare.compare_case``'s result), or ({}, why) where the benchmark has no outputs."""
    if not comparison:
        return {}, "the case was not compared"
    backends = comparison["backends"]
    if benchmark not in backends:
        run = (runs or {}).get(benchmark)
        why = ("it was not run" if run is None else
               f"it did not produce outputs ({run.skipped or run.error or run.status})")
        return {}, f"benchmark {benchmark!r} has no outputs at case {case}: {why}"
    ideal = comparison["ideal"]
    result = {}
    for name, per_output in backends.items():
        result[name] = {o: dual_verdict(o, m["fp64"]["dual"], backends[benchmark][o]["fp64"]["dual"],
                                        ideal[o]["dual"], benchmark_name=benchmark, case=case, backend=name)
                        for o, m in per_output.items()}
    return result, None
