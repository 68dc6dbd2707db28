"""Detection floors per cell, from a run's results: for one backend's gated records (default
torch-eager), per case and output, the smallest uniform relative error the element-wise test
fails (``detection_floor``, computed for reference x (1 + eps)) and the fitted scale's threshold
(``aggregate.scale_allowed``), both in units of the operator's rtol (1/128).

    pytest -n 2 cases/ --operator attention --results-dir R
    python benchmarks/cell_floors.py R                      # markdown table on stdout
    python benchmarks/cell_floors.py R --backend flash-emulation --json floors.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from accuracy.tolerances import ACCEPTANCE_RTOL   # noqa: E402
from runs.results import load_records             # noqa: E402


def metric_floors(metrics: dict) -> tuple[float | None, float | None]:
    """A cell's (element-wise detection floor, fitted scale's threshold) in units of rtol, None
    where its metrics have none."""
    floor = metrics.get("detection_floor")
    scale = (metrics.get("aggregate") or {}).get("scale_allowed")
    return tuple(None if x is None else x / ACCEPTANCE_RTOL for x in (floor, scale))


def floors(records: list[dict], backend: str) -> list[dict]:
    rows = []
    for r in records:
        if r.get("backend") != backend or r.get("golden") != "reference" or not r.get("gated"):
            continue
        elementwise, scale = metric_floors(r.get("metrics") or {})
        rows.append({"case": r["case"], "output": r["output"],
                     "elementwise_rtol": elementwise, "fitted_scale_rtol": scale})
    return sorted(rows, key=lambda x: (x["case"], x["output"]))


def table(rows: list[dict], backend: str) -> str:
    def g(x):
        return "-" if x is None else f"{x:.3g}"
    lines = [f"Detection floors of {backend}'s cells, in rtol (1/128): a uniform relative error above the "
             "element-wise floor fails element-wise, above the fitted-scale one by the fitted scale.", "",
             "| case | output | element-wise | fitted scale |", "|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['output']} | {g(r['elementwise_rtol'])} | {g(r['fitted_scale_rtol'])} |"
              for r in rows]
    values = [r["elementwise_rtol"] for r in rows if r["elementwise_rtol"] is not None]
    if values:
        values.sort()
        lines += ["", f"{len(values)} cells: element-wise floor median {values[len(values) // 2]:.3g} rtol, "
                      f"max {values[-1]:.3g} rtol."]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="a results folder (pytest --results-dir) or a results.json")
    parser.add_argument("--backend", default="torch-eager")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    try:
        rows = floors(load_records(args.results), args.backend)
    except FileNotFoundError as exc:       # ResultsNotFound is one
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: no gated records of backend {args.backend!r} in {args.results}", file=sys.stderr)
        return 2
    print(table(rows, args.backend))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
