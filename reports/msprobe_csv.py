"""The dual-benchmark metrics as msprobe's detail CSV (``api_precision_compare_details``), so they
drop into the spreadsheets and scripts Ascend teams keep for msprobe's pre-check results.

Columns in msprobe's order (``get_detail_csv_title``, mindstudio-probe 1.0.3 to 8.3.3). One row
per case x backend x output; "API Name" is ``case/backend/output``. The benchmark standard's
columns are filled (ratios to the benchmark backend, floors as in ``accuracy.dual``), and the ULP
columns with the share of elements beyond 1 BF16 ULP; the absolute-threshold, binary and
thousandth standards' columns are blank (" "), as msprobe leaves a standard it did not apply.
"""
from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from accuracy.dual import RATIO_LIMITS, REPORTED_LIMITS
from contract.records import Record, typed

COLUMNS = ("API Name", "小值域错误比值", "小值域判定结果", "均方根误差比值", "均方根误差判定结果",
           "相对误差最大值比值", "相对误差最大值判定结果", "相对误差平均值比值", "相对误差平均值判定结果",
           "误差均衡性比值", "误差均衡性判定结果", "inf/nan错误率", "inf/nan判定结果", "相对误差错误率",
           "相对误差判定结果", "绝对误差错误率", "绝对误差判定结果", "二进制一致错误率", "二进制一致错误率判定结果",
           "ULP误差平均值", "ULP误差大于阈值占比", "ULP误差大于阈值占比比值", "ULP误差判定结果", "双千指标",
           "双千指标判定结果", "比对结果", "比对算法", "Message")
# msprobe's ratio columns, in order, with the metric each holds
RATIO_COLUMNS = ("small_value_error_ratio", "rmse", "max_rel_err", "mean_rel_err", "error_balance")
BLANK = " "


def _num(v) -> str:
    if v is None:
        return BLANK
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.6g}"


def _status(ok: bool) -> str:
    return "pass" if ok else "error"


def row(rec: Record) -> list[str]:
    dual = rec.dual
    ratios = dual.ratios
    cells = [f"{rec.case}/{rec.backend}/{rec.output}"]
    for metric in RATIO_COLUMNS:
        limit = RATIO_LIMITS[metric] if RATIO_LIMITS[metric] is not None else REPORTED_LIMITS[metric]
        cells += [_num(ratios[metric]), _status(ratios[metric] <= limit)]
    cells += [BLANK] * 8                                   # inf/nan, relative, absolute, binary rates
    bench = dual.ulp_share_benchmark
    ulp_ratio = (0.0 if dual.ulp_share == 0 else math.inf) if not bench else dual.ulp_share / bench
    cells += [BLANK, _num(dual.ulp_share), _num(ulp_ratio), _status(dual.ulp_rule_passed)]
    cells += [BLANK, BLANK, _status(dual.passed), "标杆比对法",
              "" if dual.passed else "over the limit: " + ", ".join(dual.failed)]
    return cells


def write(records: Iterable[Mapping | Record], path: str | Path) -> int:
    """Write the CSV (UTF-8 with BOM, which spreadsheet programs need to read the Chinese titles);
    returns the number of rows."""
    rows = [row(r) for r in typed(records) if r.gated and r.dual]
    with open(path, "w", newline="", encoding="utf-8-sig") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    return len(rows)
