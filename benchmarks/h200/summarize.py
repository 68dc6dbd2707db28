"""Summarise a case-matrix results directory for the H200 run: compress the merged
records and count cells by backend and status. Called by ``run.sh``.

    python3 benchmarks/h200/summarize.py --results-dir DIR --out OUT

Writes ``OUT/matrix-results.json.gz`` (every record: results.json, or the newest run's
shards if the matrix was cut short) and ``OUT/matrix-summary.json``.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def summarize(records: list[dict]) -> dict:
    """Per backend: cells by their verdict, the failing (case, output, golden) and skips by reason."""
    cells: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for r in records:
        if str(r.get("backend", "")).startswith("golden:"):
            continue
        cells[(r["backend"], r["case"])].append(r)
    per_backend: dict[str, dict] = {}
    for (backend, case), recs in sorted(cells.items()):
        b = per_backend.setdefault(backend, {"cells": 0, "cell_status": collections.Counter(),
                                             "failures": [], "unexpected_passes": [], "skips": collections.Counter(),
                                             "errors": [], "seconds": []})
        b["cells"] += 1
        statuses = {r.get("status") for r in recs}
        if "error" in statuses:
            verdict = "error"
            b["errors"].append({"case": case, "message": recs[0].get("message", "")[:500]})
        elif "skipped" in statuses:
            verdict = "skipped"
            b["skips"][recs[0].get("message", "")[:200]] += 1
        elif "fail" in statuses or "unexpected_pass" in statuses:
            verdict = "fail"
        elif "expected_failure" in statuses:
            verdict = "xfail"
        else:
            verdict = "pass"
        b["cell_status"][verdict] += 1
        for r in recs:
            if r.get("status") == "fail":
                m = r.get("metrics") or {}
                b["failures"].append({"case": case, "output": r["output"], "golden": r["golden"],
                                      "mismatches": m.get("mismatches"), "max_abs_err": m.get("max_abs_err"),
                                      "dominant": (r.get("attribution") or {}).get("dominant")})
            elif r.get("status") == "unexpected_pass":
                b["unexpected_passes"].append({"case": case, "output": r["output"], "golden": r["golden"]})
        secs = next((r.get("seconds") for r in recs if isinstance(r.get("seconds"), (int, float))), None)
        if secs is not None:
            b["seconds"].append(secs)
    for b in per_backend.values():
        s = sorted(b.pop("seconds"))
        b["backend_seconds"] = {"cells_timed": len(s), "total": sum(s), "max": s[-1] if s else None,
                                "median": s[len(s) // 2] if s else None}
        b["cell_status"] = dict(b["cell_status"])
        b["skips"] = dict(b["skips"])
    return {"records": len(records), "cases": len({c for _, c in cells}), "backends": per_backend}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results-dir", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    from runs.results import load_records
    records = load_records(args.results_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out / "matrix-results.json.gz", "wt") as f:
        json.dump({"records": records}, f)
    summary = summarize(records)
    (args.out / "matrix-summary.json").write_text(json.dumps(summary, indent=1))
    print(f"{summary['records']} records, {summary['cases']} cases")
    for name, b in summary["backends"].items():
        print(f"  {name:15s} {b['cells']} cells {b['cell_status']}  backend time {b['backend_seconds']['total']:.1f} s")
        for f in b["failures"][:15]:
            print(f"      fail {f['case']} {f['output']} vs {f['golden']}: {f['mismatches']} mismatches, "
                  f"max abs {f['max_abs_err']}, dominant {f['dominant']}")
        if len(b["failures"]) > 15:
            print(f"      ... {len(b['failures']) - 15} more failing outputs in matrix-summary.json")
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
