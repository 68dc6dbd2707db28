"""``python -m accuracy merge RUN... -o MERGED``: merge runs of a sharded matrix (``accuracy.merge``)."""
from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m accuracy")
    sub = parser.add_subparsers(dest="command", required=True)
    merge = sub.add_parser("merge", help="merge the runs of --num-shards/--shard-id shards (possibly from many "
                                         "hosts) into one run folder, checked")
    merge.add_argument("runs", nargs="+", help="results directories (their latest run), run folders or results files")
    merge.add_argument("-o", "--out", required=True, help="the merged run folder (results.json inside)")
    args = parser.parse_args(argv)
    from accuracy.merge import MergeError, merge_runs
    from accuracy.results import ResultsNotFound
    try:
        payload = merge_runs(args.runs, args.out)
    except (MergeError, ResultsNotFound) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    hosts = sorted({str(h["host"]) for h in payload["manifest"]["hosts"]})
    print(f"{args.out}/results.json: {len(payload['records'])} records, {len(payload['planned'])} planned cells "
          f"from {len(args.runs)} runs on {len(hosts)} host(s): {', '.join(hosts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
