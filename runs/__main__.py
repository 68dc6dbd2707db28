"""``python -m runs merge RUN... -o MERGED`` (or ``python -m accuracy merge``): merge runs of a
sharded matrix (``runs.merge``).
``python -m runs diff BEFORE AFTER`` (or ``python -m accuracy diff``): two runs record by record (``runs.record_diff``); exit 1
when any result differs. Exit 2: an input or output the tool refuses, said in one line."""
from __future__ import annotations

import argparse
import sys

from runs.merge import MergeError, merge_runs
from runs.output_paths import OutputPathError, output_folder
from runs.record_diff import describe, diff_records
from runs.results import ResultsNotFound, load_records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runs")
    sub = parser.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge", help="merge the runs of --num-shards/--shard-id shards (possibly from many "
                                         "hosts) into one run folder, checked")
    merge.add_argument("runs", nargs="+", help="results directories (their latest run), run folders or results files")
    merge.add_argument("-o", "--out", required=True, help="the merged run folder (results.json inside)")
    diff = sub.add_parser("diff", help="compare two runs record by record (every verdict and metric; timings "
                                       "and hosts left out): exit 1 when any differs")
    diff.add_argument("before", help="results directory (its latest run), run folder or results file")
    diff.add_argument("after")
    diff.add_argument("--float-rtol", type=float, default=None, metavar="R",
                      help="floats may differ by this relative amount (verdicts, counts, indices and strings "
                           "stay exact); the largest difference per field is printed")
    args = parser.parse_args(argv)
    if args.command == "diff":
        try:
            d = diff_records(load_records(args.before), load_records(args.after), args.float_rtol)
        except ResultsNotFound as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(describe(d))
        return 0 if d.same else 1
    try:
        output_folder(args.out)
        payload = merge_runs(args.runs, args.out)
    except (MergeError, ResultsNotFound, OutputPathError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    hosts = sorted({str(h["host"]) for h in payload["manifest"]["hosts"]})
    print(f"{args.out}/results.json: {len(payload['records'])} records, {len(payload['planned'])} planned cells "
          f"from {len(args.runs)} runs on {len(hosts)} host(s): {', '.join(hosts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
