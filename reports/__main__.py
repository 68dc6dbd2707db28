"""``python -m reports RESULTS -o OUT [--baseline PREV]``: render a results directory into OUT/index.html.

``python -m reports csv RESULTS -o FILE``: the dual-benchmark metrics as msprobe's detail CSV
(``reports.msprobe_csv``).

``python -m reports drift DIR``: the figures of a tile-vs-global drift study (``python -m cases.drift_study -o DIR``)
and of a row-local loop's (``python -m cases.loop_drift -o DIR``)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import operators
from runs.output_paths import OutputPathError, output_file, output_folder
from runs.results import ResultsNotFound, load_records, load_results, resolve_results
from reports.drift_study_figures import StudyUnreadable, draw, draw_loop, load_loop_study, load_study
from reports.msprobe_csv import write
from reports.page import render


def csv_main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports csv",
                                     description="write the dual-benchmark metrics in msprobe's CSV column order")
    parser.add_argument("results", help="a results directory, a run folder or a results JSON file")
    parser.add_argument("-o", "--out", required=True, help="the CSV file to write")
    args = parser.parse_args(argv)
    try:
        records = load_records(args.results)
        output_file(args.out)
        n = write(records, args.out)
    except (FileNotFoundError, OutputPathError, OSError) as exc:    # ResultsNotFound is a FileNotFoundError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if n == 0:
        print(f"error: {args.results} has no dual-benchmark verdicts (a run with --benchmark none, or one made "
              f"before the dual verdict existed)", file=sys.stderr)
        return 1
    print(f"{args.out}: {n} rows")
    return 0


def drift_main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports drift",
                                     description="draw a drift study's figures (one PNG per reduction family) "
                                                 "next to its drift.json (made by python -m cases.drift_study), "
                                                 "and loop-drift.png next to a loop_drift.json (python -m "
                                                 "cases.loop_drift)")
    parser.add_argument("study", help="the study's directory (drift.json inside)")
    args = parser.parse_args(argv)
    try:
        loop = load_loop_study(args.study)
        paths = {"loop drift": draw_loop(loop, args.study)} if loop is not None else {}
        if loop is None or (Path(args.study) / "drift.json").is_file():
            paths.update(draw(load_study(args.study), args.study))
    except (StudyUnreadable, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "csv":
        return csv_main(argv[1:])
    if argv and argv[0] == "drift":
        return drift_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__.split(":", 1)[1].strip())
    parser.add_argument("results", help="a results directory (renders its latest run), a run folder "
                                        "(results/runs/<run>) or a results JSON file")
    parser.add_argument("-o", "--out", required=True, help="output directory (index.html + plots/)")
    parser.add_argument("--baseline", help="a previous results directory to diff against")
    parser.add_argument("--no-heatmap", action="store_true",
                        help="leave out the per-tile drift heatmap")
    parser.add_argument("--drift-study", metavar="DIR",
                        help="a drift study's directory (python -m cases.drift_study -o DIR); default OUT/drift "
                             "when it holds one")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    baseline, baseline_error = args.baseline, None
    if baseline is not None:
        try:
            load_results(baseline)
        except ResultsNotFound as exc:       # the report is still written, without the diff
            baseline, baseline_error = None, f"error: --baseline {args.baseline}: {exc}; the report has no diff"
    try:
        source = resolve_results(args.results)
        output_folder(args.out)
        print(f"rendering {source}")
        path = render(args.results, args.out, baseline, heatmap=not args.no_heatmap,
                      drift_study=args.drift_study)
    except (FileNotFoundError, operators.OperatorNotFound, OutputPathError) as exc:   # ResultsNotFound too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (TypeError, KeyError, AttributeError, ValueError) as exc:   # records of another shape
        print(f"error: {args.results}: cannot be read as results ({type(exc).__name__}: {str(exc)[:200]})",
              file=sys.stderr)
        return 2
    print(f"report: {path} ({time.perf_counter() - start:.1f} s)")
    if baseline_error:
        print(baseline_error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
