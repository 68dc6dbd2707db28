"""``python -m reports RESULTS -o OUT [--baseline PREV]``: render a results directory into OUT/index.html."""
from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("results", help="a results directory (renders its latest run), a run folder "
                                        "(results/runs/<run>) or a results JSON file")
    parser.add_argument("-o", "--out", required=True, help="output directory (index.html + plots/)")
    parser.add_argument("--baseline", help="a previous results directory to diff against")
    parser.add_argument("--no-heatmap", action="store_true",
                        help="skip the per-tile drift replay (re-creates one case's inputs)")
    parser.add_argument("--heatmap-max-m", type=int, default=32768, metavar="M",
                        help="largest M the per-tile replay re-creates (default 32768)")
    args = parser.parse_args(argv)
    from accuracy.results import resolve_results
    from reports.render import render
    start = time.perf_counter()
    try:
        source = resolve_results(args.results)
        print(f"rendering {source}")
        path = render(args.results, args.out, args.baseline, heatmap=not args.no_heatmap,
                      heatmap_max_m=args.heatmap_max_m)
    except FileNotFoundError as exc:     # ResultsNotFound too: a missing, empty or corrupt results file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {path} ({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
