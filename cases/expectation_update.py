"""Regenerate the measured bounds of the operator's ``expectations/*.toml`` from a run's results.

    python -m cases.expectations update RESULTS [--allow-widen] [--dry-run]

For every entry whose platform condition holds on the run's measured facts (its
manifest), the bound of each output it covers becomes the largest failure of the
run's matching gated records (over every case and seed the pattern matches).
The tool prints the diff and

* narrows freely (a smaller bound, an output that now passes: its bound is dropped;
  an entry with no failing output left is deleted);
* refuses to widen (a larger number, an output that was not bounded) unless told
  ``--allow-widen``, so a regression is never approved silently; refused changes
  are printed and the exit status is 1, and nothing is written;
* leaves alone entries whose condition does not hold on that run, that match no record of
  it (the run did not cover them), or that fewer than ``MIN_DRAWS`` of its cases back, and
  says so; each rewritten entry says how many cases back it.

Only the ``bound.<output> = {...}`` lines of an entry are rewritten; comments and
reasons stay as written.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import operators
from cases.expectations import QUANTITIES, Bound, Expectation, measured_size, parse
from contract.records import records_of
from runs.results import load_manifest, load_records

BOUND_LINE = re.compile(r"^bound\.[A-Za-z0-9_]+\s*=")
# Cases (each with its seed) a bound must rest on before the tool rewrites it. A bound is the
# largest failure of n draws; whatever their distribution, a new draw exceeds the largest of n
# exchangeable ones with probability 1 / (n + 1): 50% from one case, 17% from 5. The written
# margins (3 Poisson sigmas on counts, 2x on size) cover the spread measured between seeds
# (1.2x in err_rms) only when the bound rests on more than one draw; 5 keeps the chance a margin
# must absorb at 1 in 6, and the quick profile with --seeds 2 reaches it for every entry.
MIN_DRAWS = 5
ENTRY_HEADER = "[[expected]]"


@dataclass
class EntryUpdate:
    entry: Expectation
    new: dict[str, Bound] = field(default_factory=dict)
    skipped: str | None = None          # why the run says nothing about this entry
    draws: int = 0                      # the cases (with their seeds) of the run that back it

    @property
    def changes(self) -> list[tuple[str, Bound | None, Bound | None]]:
        outputs = sorted(set(self.entry.bounds) | set(self.new))
        return [(o, self.entry.bounds.get(o), self.new.get(o)) for o in outputs
                if self.entry.bounds.get(o) != self.new.get(o)]

    def widened(self) -> list[str]:
        """The outputs whose new bound is larger in any quantity, or that were not bounded."""
        out = []
        for o, old, new in self.changes:
            if new is not None and (old is None or any(getattr(new, q) > getattr(old, q) for q in QUANTITIES)):
                out.append(o)
        return out


def _merge_sizes(sizes: Iterable[Bound]) -> Bound | None:
    sizes = list(sizes)
    if not sizes:
        return None
    return Bound(*(max(getattr(s, q) for s in sizes) for q in QUANTITIES))


def plan(entries: list[Expectation], records: list[dict], manifest: dict | None) -> list[EntryUpdate]:
    """What the run measures for each entry."""
    facts = (manifest or {}).get("facts")
    device = (manifest or {}).get("device", "cpu")
    gated = [r for r in records if r.get("gated") and isinstance(r.get("metrics"), dict)]
    updates = []
    for e in entries:
        up = EntryUpdate(e)
        updates.append(up)
        if facts is None:
            up.skipped = "the run has no manifest (no measured platform facts)"
            continue
        if not e.holds_on(facts):
            up.skipped = f"condition {e.condition_text()} does not hold on this run"
            continue
        matched = [r for r in gated if e.matches(r["backend"], r["case"], r["output"], r["golden"], device)]
        if not matched:
            up.skipped = "no record of this run matches it"
            up.new = dict(e.bounds)
            continue
        up.draws = len({r["case"] for r in matched})
        if up.draws < MIN_DRAWS:
            up.skipped = (f"only {up.draws} case(s) of this run match it; a bound is rewritten from at least "
                          f"{MIN_DRAWS} (MIN_DRAWS: more cases or --seeds)")
            up.new = dict(e.bounds)
            continue
        by_output: dict[str, list[Bound]] = {}
        for r in matched:
            if r["metrics"]["mismatches"] > 0 or r["metrics"].get("nonfinite_disagreements", 0) > 0:
                by_output.setdefault(r["output"], []).append(measured_size(r["metrics"]))
        # the rounded-up form, as written, so an update right after a write is a no-op
        up.new = {o: _as_written(b) for o in sorted(by_output) if (b := _merge_sizes(by_output[o])) is not None}
    return updates


def _number(v: float) -> str:
    """Rounded up at 4 significant digits, so a written bound never falls below the measured one."""
    if math.isinf(v):
        return "inf"
    if v == 0:
        return "0"
    scale = 10 ** (math.floor(math.log10(abs(v))) - 3)
    return f"{math.ceil(v / scale - 1e-6) * scale:.4g}"   # -1e-6: a written value reads back unchanged


def _as_written(b: Bound) -> Bound:
    return Bound(*(float(_number(getattr(b, q))) for q in QUANTITIES))


def _bound_line(output: str, b: Bound) -> str:
    fields = ", ".join(f"{q} = {_number(getattr(b, q))}" for q in QUANTITIES)
    return f"bound.{output} = {{ {fields} }}"


def rewrite(text: str, new_bounds: list[dict[str, Bound] | None]) -> str:
    """``text`` with each entry's bound lines replaced (``None``: delete the entry)."""
    parts = text.split(ENTRY_HEADER)
    if len(parts) - 1 != len(new_bounds):
        raise ValueError(f"{len(parts) - 1} entries in the file, {len(new_bounds)} updates")
    out = [parts[0]]
    for body, bounds in zip(parts[1:], new_bounds):
        if bounds is None:
            # keep the comment lines that follow the deleted entry's last key (they head the next entry)
            tail = body.split('"""\n')[-1] if '"""' in body else ""
            comments = "".join(line + "\n" for line in tail.splitlines() if line.startswith("#") or not line.strip())
            out[-1] = out[-1].rstrip("\n") + "\n" + comments if comments else out[-1]
            continue
        lines = [ln for ln in body.split("\n") if not BOUND_LINE.match(ln)]
        at = next((i + 1 for i, ln in enumerate(lines) if re.match(r"^(golden|device|when)\s*=", ln)), 1)
        while at < len(lines) and re.match(r"^(golden|device|when)\s*=", lines[at]):
            at += 1
        lines[at:at] = [_bound_line(o, b) for o, b in sorted(bounds.items())]
        out.append(ENTRY_HEADER + "\n".join(lines))
    return "".join(out)


def _fmt(b: Bound | None) -> str:
    return "-" if b is None else ", ".join(f"{q} {_number(getattr(b, q))}" for q in QUANTITIES)


def main(argv: list[str] | None = None, directory: Path | None = None) -> int:
    """``directory``: the known failures' folder (default: that of the run's operator, from its manifest)."""
    parser = argparse.ArgumentParser(prog="python -m cases.expectations update", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", help="a results directory or results.json of a matrix run")
    parser.add_argument("--allow-widen", action="store_true", help="accept larger bounds and newly bounded outputs")
    parser.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    parser.add_argument("--operator", default=None, metavar="NAME",
                        help="whose known failures to update (default: the run's operator; needed for a run of several)")
    args = parser.parse_args(argv)
    try:
        records, manifest = load_records(args.results), load_manifest(args.results)
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read results {args.results}: {exc}")
    if manifest is None:
        parser.error(f"{args.results} has no run manifest: its platform facts are unknown, so no bound can be "
                     "attributed to a platform; rerun the matrix with this version")
    selected = (manifest.get("selection") or {}).get("operator") or operators.DEFAULT
    name = args.operator or selected
    if not isinstance(name, str):
        parser.error(f"{args.results} is a run of several operators ({', '.join(name)}): name one with --operator")
    try:
        operator = operators.get(name)
        in_run = [operators.key(operators.get(n)) for n in ([selected] if isinstance(selected, str) else selected)]
    except operators.OperatorNotFound as exc:
        parser.error(str(exc))
    if operators.key(operator) not in in_run:
        parser.error(f"{args.results} is a run of {', '.join(in_run)}, not of {name!r}: its records cannot bound "
                     f"that operator's known failures")
    if directory is None:
        directory = operator.expectations
        if directory is None:
            parser.error(f"operator {name!r} declares no folder of known failures (Operator.expectations)")
    registered = tuple(operator.backends)
    case_operators = (manifest.get("selection") or {}).get("case_operators")
    if case_operators:      # a run of several operators: this operator's cases alone
        records = records_of(records, case_operators, operators.key(operator))
    print(f"platform facts of the run: {manifest.get('facts')}")
    refused, writes = [], {}
    for path in sorted(directory.glob("*.toml")):
        text = path.read_text()
        updates = plan(parse(text, path, registered), records, manifest)
        new_bounds = []
        for up in updates:
            e = up.entry
            head = f"{e.source} [{e.backend} / {e.case} / {e.output}]"
            if up.skipped:
                print(f"  {head}: unchanged ({up.skipped})")
                new_bounds.append(dict(e.bounds))
                continue
            widened = up.widened()
            print(f"  {head}: backed by {up.draws} case(s) of this run")
            for o, old, new in up.changes:
                mark = "WIDEN" if o in widened else "narrow"
                print(f"  {head} {o}: {_fmt(old)}  ->  {_fmt(new)}   [{mark}]")
            if widened and not args.allow_widen:
                refused.append(f"{head}: {', '.join(widened)}")
            if not up.new:
                print(f"  {head}: no output fails in this run: entry deleted")
                new_bounds.append(None)
            else:
                new_bounds.append(up.new)
        new_text = rewrite(text, new_bounds)
        if new_text != text:
            parse(new_text, path, registered)   # never write a file the loader would refuse
            writes[path] = new_text
    if refused:
        print("\nRefused (the run's failures are larger than the recorded ones; pass --allow-widen to accept):")
        for r in refused:
            print(f"  {r}")
        return 1
    if args.dry_run:
        print(f"\n--dry-run: {len(writes)} file(s) would change")
        return 0
    for path, text in writes.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
