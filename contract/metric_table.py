"""The comparison record's metrics, declared once: each key ``accuracy.metrics.ErrorStats.finalize``
writes (and each of its ``aggregate`` and ``dual`` sub-records), what it means, the accumulator
slots of the compiled pass it is read from, and the columns of the report's detail table that
show it.

Made from it: the fields of ``contract.records.Metrics``, ``Aggregate`` and ``DualMetrics``; the
keys ``finalize`` writes and their order (``ordered``); the slot numbers of
``accuracy.compiled_pass`` (``SLOTS``); the detail table's columns (``detail_columns``, read by
``reports.data.details``). ``tests/core/test_metric_table.py`` checks that they agree.
Pure data, as the rest of ``contract``: nothing of the framework is imported."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# A slice's row of the compiled pass's accumulator (float64; counts are exact there up to 2^53),
# in slot order: ``accuracy.compiled_pass`` numbers them 0..N_SLOTS-1, writes one row per slice
# and ``ErrorStats`` adds the rows' values in slice order. A slot ending in ``_AT`` holds the flat
# index of the maximum before it.
SLOTS = (
    "N_VISIBLE", "SQ_B", "MAX_GOLDEN", "N_ZERO_PASSES", "N_OVER_SEED", "MAX_NOISE_RATIO",
    "MAX_ABS", "MAX_ABS_AT", "MAX_REL", "MAX_REL_AT", "MAX_ULP", "MAX_ULP_AT", "N_MISMATCH",
    "SUM_ERR", "SUM_ABS_ERR", "N_POS", "N_NEG", "DOT", "SQ_A", "SQ_B_PAIRS",
    "N_SMALL", "N_SMALL_ERR", "N_ULP_OVER_1", "SUM_SQ_ERR_NORMAL", "SUM_REL_NORMAL", "MAX_REL_NORMAL",
    "SUM_EB", "SUM_BB", "SUM_STORE", "SUM_NOISE", "N_COUNTED", "N_TOWARD",
    "MAX_UTIL", "MAX_UTIL_AT", "N_OVER_BOUND", "SUM_BOUND", "N_SAMPLED", "N_NONFINITE", "N_FINITE", "N_UP",
)

# The forms of a record: the full comparison, and the benchmark's own metrics alone
# (``ErrorStats(dual_only=True)``: the golden's size, the non-finite counts and ``dual``).
FULL = "full"
DUAL_ONLY = "dual_only"
BOTH = (FULL, DUAL_ONLY)
# what a head's record of an operator over heads adds to either form (``accuracy.heads``)
OF_A_HEAD = "of_a_head"
FORMS = (*BOTH, OF_A_HEAD)

# How a detail column writes its value (``reports/templates/panels/details.html.j2``): three
# significant digits, a share in percent, an integer.
FORMATS = ("num", "pct", "count")
# The record a detail column reads: the one against the gated golden, or the one against FP64.
COLUMN_GOLDENS = ("gated", "fp64")


@dataclass(frozen=True)
class Column:
    """A column of the report's detail table, one row per case."""
    place: int                          # its position among the table's metric columns, from 1
    label: str
    format: str = "num"                 # one of FORMATS
    golden: str = "gated"               # one of COLUMN_GOLDENS
    band: str | None = None             # a key of the same record shown beside it in parentheses; the
                                        # value is flagged where its magnitude exceeds the band
    bad_above: float | None = None      # the value is flagged above this


@dataclass(frozen=True)
class Metric:
    """One key of a record's metrics."""
    key: str
    meaning: str
    slots: tuple[str, ...] = ()         # the accumulator slots it is computed from
    forms: tuple[str, ...] = (FULL,)    # the record forms that carry it
    columns: tuple[Column, ...] = ()    # where the detail table shows it


# ``metrics`` of a record (``ErrorStats.finalize``), in the order a record writes them
METRICS = (
    Metric("shape", "the output's shape", forms=BOTH),
    Metric("numel", "elements of the output", ("N_FINITE",), forms=BOTH),
    Metric("compared", "elements whose kernel value and golden are both finite", ("N_FINITE",)),
    Metric("dual_only", "True: the record holds only the benchmark's own metrics", forms=(DUAL_ONLY,)),
    Metric("rtol", "the gate's relative tolerance"),
    Metric("atol", "the gate's declared absolute tolerance"),
    Metric("atol_effective", "the absolute tolerance applied: the declared one, capped at rtol x atol_rms "
                             "where magnitude-aware (Tolerance.effective_atol)", ("SQ_B", "N_FINITE")),
    Metric("atol_capped", "atol_effective is below the declared atol", ("SQ_B", "N_FINITE")),
    Metric("golden_rms", "root mean square of the finite golden", ("SQ_B", "N_FINITE"), forms=BOTH),
    Metric("golden_max_abs", "largest finite |golden|", ("MAX_GOLDEN",), forms=BOTH,
           columns=(Column(7, "max |golden|"),)),
    Metric("atol_rms", "the rms the atol is capped by: the output's reference's where given, else golden_rms",
           ("SQ_B", "N_FINITE")),
    Metric("max_abs_err", "largest |kernel - golden|", ("MAX_ABS",),
           columns=(Column(4, "max abs err"), Column(12, "vs FP64: max abs", golden="fp64"))),
    Metric("max_abs_index", "its (row, column), the first of equal ones", ("MAX_ABS_AT",)),
    Metric("max_rel_err", "largest |kernel - golden| / |golden| (0 where both are 0, FP32's largest where "
                          "only the golden is)", ("MAX_REL",), columns=(Column(5, "max rel err"),)),
    Metric("max_rel_index", "its (row, column), the first of equal ones", ("MAX_REL_AT",)),
    Metric("max_excess", "the worst element's excess: |error| - rtol scale - allowance (None: no element)"),
    Metric("max_excess_index", "its (row, column)"),
    Metric("mismatches", "elements beyond atol_effective + rtol scale + allowance, NaN/Inf disagreements "
                         "included", ("N_MISMATCH",)),
    Metric("mismatches_exact", "the count is exact: no kept excess value is on an unknown side of the atol",
           ("N_MISMATCH",)),
    Metric("mismatches_upper", "mismatches plus the elements on an unknown side of the atol", ("N_MISMATCH",)),
    Metric("mismatch_fraction", "mismatches / numel", ("N_MISMATCH", "N_FINITE"),
           columns=(Column(6, "mismatch share", format="pct"),)),
    Metric("mismatches_seed_gate", "elements beyond the acceptance criterion (rtol and the declared atol, no "
                                   "allowance), NaN/Inf disagreements included", ("N_OVER_SEED",)),
    Metric("nonfinite", "NaN and Inf of the kernel against the golden (NonfiniteCounts); a slice with one is "
                        "compared on the eager path", ("N_NONFINITE",), forms=BOTH),
    Metric("nonfinite_disagreements", "NaN on one side only, or Inf on both that differ", ("N_NONFINITE",),
           forms=BOTH, columns=(Column(10, "NaN/Inf disagree", format="count", bad_above=0),)),
    Metric("first_nonfinite", "{index, actual, expected} of the first disagreeing element, or None",
           ("N_NONFINITE",)),
    Metric("worst", "the elements of largest excess, largest first, as data ({index, actual, expected, "
                    "abs_err, rel_err, ulp, excess})"),
    Metric("ulp_p50", "median BF16 ULP distance (in the golden's binade) of a systematic sample of at most "
                      "2^20 elements", columns=(Column(1, "ULP p50"),)),
    Metric("ulp_p99", "99th percentile of the same", columns=(Column(2, "ULP p99"),
                                                                 Column(11, "vs FP64: ULP p99", golden="fp64"))),
    Metric("ulp_max", "largest BF16 ULP distance over every element (None: none compared)", ("MAX_ULP",),
           columns=(Column(3, "ULP max"),)),
    Metric("ulp_max_index", "its (row, column), the first of equal ones", ("MAX_ULP_AT",)),
    Metric("ulp_hist", "the sample's ULP distances per bin of histogram_edges()['ulp'], weighted by the "
                       "sampling step"),
    Metric("log10_abs_err_hist", "the sample's non-zero log10 |error| per bin of "
                                 "histogram_edges()['log10_abs_err'], weighted the same way"),
    Metric("exact_elements", "compared elements where the kernel equals the golden",
           ("N_FINITE", "N_POS", "N_NEG")),
    Metric("sign_bias", "(errors above the golden - errors below) / non-zero errors", ("N_POS", "N_NEG")),
    Metric("mean_err_over_mean_abs_err", "sum error / sum |error|: +-1 where every error has one sign",
           ("SUM_ERR", "SUM_ABS_ERR")),
    Metric("cosine", "cosine of the angle between the kernel's and the golden's values",
           ("DOT", "SQ_A", "SQ_B_PAIRS")),
    Metric("rms_ratio", "rms(kernel) / rms(golden) over the compared elements", ("SQ_A", "SQ_B_PAIRS")),
    Metric("small_value_share", "share of elements whose |golden| <= atol / (1 - rtol), where a zero passes "
                                "the acceptance criterion", ("N_ZERO_PASSES", "N_FINITE")),
    Metric("zero_passes_seed_gate", "every element is such: an all-zero output passes the acceptance criterion",
           ("N_ZERO_PASSES", "N_FINITE")),
    Metric("allowance_max_ratio", "largest |error| / allowance (None: no allowance)", ("MAX_NOISE_RATIO",)),
    Metric("bound_max_utilisation", "largest |error| / rounding-model bound; above 1 the declared dtype path "
                                    "and schedule cannot explain it (None: no bound)", ("MAX_UTIL",),
           columns=(Column(13, "bound util.", golden="fp64", bad_above=1.0),)),
    Metric("bound_max_utilisation_index", "its (row, column), the first of equal ones", ("MAX_UTIL_AT",)),
    Metric("bound_exceeded", "elements beyond the bound (None: no bound)", ("N_OVER_BOUND",)),
    Metric("bound_mean", "mean bound over the compared elements (None: no bound)", ("SUM_BOUND", "N_FINITE")),
    Metric("allowance", "an allowance of the operator's legitimate choices was added to the tolerance"),
    Metric("detection_floor", "the smallest uniform relative error the element-wise test catches here "
                              "(None: no FP64 values)", columns=(Column(8, "detection floor", format="pct"),)),
    Metric("aggregate", "the aggregate error model (Aggregate), or None where no FP64 values were given"),
    Metric("dual", "msprobe's benchmark-standard metrics (DualMetrics), or None where not kept", forms=BOTH),
    Metric("head", "the head this record is of (0 first), where the operator has heads; its indices lead with it",
           forms=(OF_A_HEAD,)),
    Metric("heads", "the case's head count, where the operator has heads", forms=(OF_A_HEAD,)),
    Metric("failing_heads", "the heads that fail this output on their own (0 first), where the operator has heads",
           forms=(OF_A_HEAD,)),
    Metric("heads_scale", "the fitted scale pooled over the heads (heads, beta, sigma, bias, allowed, passed; "
                          "accuracy.heads.pooled_scale), where the operator has heads", forms=(OF_A_HEAD,)),
)

# ``metrics.aggregate`` (``ErrorStats._aggregate_result``); the direction keys are None where the
# direction was not counted
AGGREGATE = (
    Metric("scale_beta", "the fitted scale beta of kernel = (1 + beta) FP64: sum e r / sum r^2",
           ("SUM_EB", "SUM_BB"), columns=(Column(9, "fitted scale (allowed ±)", band="scale_allowed"),)),
    Metric("scale_sigma", "its standard deviation under a correct kernel's error model: sqrt(sum var r^2) / "
                          "sum r^2", ("SUM_STORE", "SUM_NOISE", "SUM_BB")),
    Metric("scale_allowed", "the largest |beta| of a correct kernel: TAIL_SIGMAS x sigma + scale_bias",
           ("SUM_STORE", "SUM_NOISE", "SUM_BB")),
    Metric("scale_bias", "the fitted scale's rounding bias allowed: measured on this data, else SCALE_BIAS"),
    Metric("toward_zero", "errors of SIGN_MIN_ULP to SIGN_MAX_ULP toward zero", ("N_TOWARD",)),
    Metric("away_from_zero", "those away from zero", ("N_COUNTED", "N_TOWARD")),
    Metric("direction_imbalance", "toward_zero - away_from_zero (None: toward zero not tested)",
           ("N_COUNTED", "N_TOWARD")),
    Metric("direction_allowed", "the imbalance a correct kernel stays within: 2 DIRECTION_BIAS n + "
                                "TAIL_SIGMAS sqrt(n) of n counted errors", ("N_COUNTED",)),
    Metric("upward", "counted errors above the FP64 value", ("N_UP",)),
    Metric("downward", "counted errors below it", ("N_COUNTED", "N_UP")),
    Metric("up_imbalance", "upward - downward", ("N_COUNTED", "N_UP")),
    Metric("localized", "the localized tests over windows of rows and columns, as data (accuracy.localized)"),
)

# ``metrics.dual`` (``ErrorStats._dual_result``, msprobe's metrics: ``accuracy.dual``)
DUAL = (
    Metric("small_value", "|golden| at or below it is a small value (SMALL_VALUE)"),
    Metric("small_value_atol", "the error a small value may have (SMALL_VALUE_ATOL)"),
    Metric("small_values", "finite elements with a small |golden|", ("N_SMALL",)),
    Metric("normal_values", "the other finite elements", ("N_FINITE", "N_SMALL")),
    Metric("small_value_error_ratio", "share of the small values whose error exceeds small_value_atol",
           ("N_SMALL", "N_SMALL_ERR")),
    Metric("rmse", "root mean square error over the normal values", ("SUM_SQ_ERR_NORMAL", "N_FINITE", "N_SMALL")),
    Metric("max_rel_err", "largest |error| / (|golden| + REL_EPS) over the normal values", ("MAX_REL_NORMAL",)),
    Metric("mean_rel_err", "mean of the same", ("SUM_REL_NORMAL", "N_FINITE", "N_SMALL")),
    Metric("error_balance", "|errors above the golden - errors below| / numel", ("N_POS", "N_NEG", "N_FINITE")),
    Metric("ulp_over_1_share", "share of elements more than one BF16 ULP off", ("N_ULP_OVER_1", "N_FINITE")),
    Metric("nonfinite_disagreements", "NaN on one side only, or Inf on both that differ", ("N_NONFINITE",)),
    Metric("zero_passes", "every finite |golden| is at or below small_value_atol: an all-zero output passes "
                          "every ratio", ("N_VISIBLE",)),
)

# where each sub-record of ``metrics`` is declared
NESTED_TABLES = {"aggregate": AGGREGATE, "dual": DUAL}


def keys(table: tuple[Metric, ...], form: str = FULL) -> tuple[str, ...]:
    """The keys a record of ``form`` carries, in their order."""
    return tuple(m.key for m in table if form in m.forms)


def ordered(table: tuple[Metric, ...], values: Mapping, form: str = FULL) -> dict:
    """``values`` (key -> value) in the table's order; refused where its keys are not the ones the
    table declares for ``form``, naming the difference."""
    declared = keys(table, form)
    if set(values) != set(declared):
        missing = [k for k in declared if k not in values]
        extra = [k for k in values if k not in declared]
        raise ValueError(f"metrics of form {form!r}: {missing} declared and not computed, {extra} computed "
                         f"and not declared (contract.metric_table)")
    return {k: values[k] for k in declared}


def detail_columns() -> tuple[tuple[tuple[str, ...], Column], ...]:
    """The detail table's metric columns in their order, each with the path of the key it shows
    (``("ulp_p50",)``, ``("aggregate", "scale_beta")``)."""
    found = [((m.key,), c) for m in METRICS for c in m.columns]
    found += [((name, m.key), c) for name, table in NESTED_TABLES.items() for m in table for c in m.columns]
    return tuple(sorted(found, key=lambda pc: pc[1].place))
