"""``python -m reports RESULTS -o OUT [--baseline PREV]``: render a results directory into OUT/index.html.

``python -m reports csv RESULTS -o FILE``: the dual-benchmark metrics as msprobe's detail CSV
(``reports.msprobe_csv``).

``python -m reports drift -o DIR``: the tile-vs-global drift study (``reports.drift_study``)."""
from __future__ import annotations

import argparse
import sys
import time


def csv_main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports csv",
                                     description="write the dual-benchmark metrics in msprobe's CSV column order")
    parser.add_argument("results", help="a results directory, a run folder or a results JSON file")
    parser.add_argument("-o", "--out", required=True, help="the CSV file to write")
    args = parser.parse_args(argv)
    from accuracy.output_paths import OutputPathError, output_file
    from accuracy.results import load_records
    from reports.msprobe_csv import write
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
    import operators
    from reports import drift_study as S
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--operator", default=operators.DEFAULT)
    known, _ = pre.parse_known_args(argv)
    try:
        ax = S.axes(known.operator)
    except operators.OperatorNotFound as exc:
        print(f"error: --operator: {exc}", file=sys.stderr)
        return 2
    scales = ax.declaration.scales
    parser = argparse.ArgumentParser(prog="python -m reports drift",
                                     description="the tile-vs-global drift of every declared schedule against M, "
                                                 "from the goldens alone (reports.drift_study)")
    parser.add_argument("--operator", default=operators.DEFAULT, metavar="NAME",
                        help=f"the operator whose schedules are studied (default: {operators.DEFAULT})")
    parser.add_argument("-o", "--out", required=True, help="directory for drift.json, drift.md, drift-db.png, "
                                                            "drift-dw.png")
    parser.add_argument("--ms", type=int, nargs="+", default=list(ax.ms), metavar="M")
    parser.add_argument("--seeds", type=int, default=S.STUDY_SEEDS)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--profiles", nargs="+", default=list(ax.profiles), choices=sorted(scales))
    parser.add_argument("--shape", default=",".join(map(str, ax.shape)), metavar="SIZES",
                        help=f"the sizes after M, comma-separated ({ax.shape_label(ax.shape)} by default: "
                             f"drift relative to rms does not depend on them)")
    parser.add_argument("--processes", type=int, default=0, help="worker processes (default: one per CPU)")
    parser.add_argument("--shape-check", action="store_true",
                        help=f"also measure the default schedule's drift at the acceptance case's shape "
                             f"({ax.shape_label(ax.acceptance_shape)}) beside the study's (3 seeds at M=8192 and 32768)")
    args = parser.parse_args(argv)
    try:
        shape = tuple(int(v) for v in args.shape.split(","))
    except ValueError:
        shape = ()
    if len(shape) != len(ax.shape) or min(args.ms) < 1 or args.seeds < 1 or min(shape) < 1:
        print(f"error: M and seeds must be >= 1, and --shape {len(ax.shape)} sizes >= 1 "
              f"(e.g. --shape {','.join(map(str, ax.shape))})", file=sys.stderr)
        return 2
    from accuracy.output_paths import OutputPathError, output_folder
    try:
        output_folder(args.out)
    except OutputPathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = S.StudyConfig(operator=ax.operator, ms=tuple(sorted(set(args.ms))), seeds=args.seeds, first_seed=args.first_seed,
                           profiles=tuple(args.profiles), shape=shape, processes=args.processes)
    study = S.run(config)
    if args.shape_check:
        start = time.perf_counter()
        check = S.shape_check(S.ShapeCheck(operator=ax.operator))
        study["shape_check"] = {"ms": list(check.ms), "seeds": check.seeds, "rows": check.rows,
                                "wall_s": time.perf_counter() - start}
    paths = S.write(study, args.out)
    print(S.markdown(study))
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
                        help="a drift study's directory (python -m reports drift -o DIR); default OUT/drift "
                             "when it holds one")
    args = parser.parse_args(argv)
    import operators
    from accuracy.output_paths import OutputPathError, output_folder
    from accuracy.results import ResultsNotFound, load_results, resolve_results
    from reports.page import render
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
