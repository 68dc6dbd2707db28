"""Deterministic shards (``cases/shards.py``, ``--num-shards/--shard-id``) and the checked merge
(``runs/merge.py``, ``python -m accuracy merge``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runs.merge import MergeError, merge_runs
from cases.matrix import PROFILES
from cases.shards import assign, durations_from_records, hashed_shard
from operators.swiglu_backward import OPERATOR as SWIGLU

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_shards_partition_the_plan_for_any_count(profile):
    ids = [c.id for c in PROFILES[profile](SWIGLU, 2)]
    for n in range(1, 65):
        shards = assign(ids, n)
        assert set(shards) == set(ids) and all(0 <= s < n for s in shards.values())
        # a case's shard is its own: adding or removing other cases never moves it
        assert assign(ids[: len(ids) // 2], n) == {c: shards[c] for c in ids[: len(ids) // 2]}
    assert len(set(assign(ids, 8).values())) == 8     # the hash spreads the cases


def test_the_hash_is_the_ids_alone():
    """sha256 of the id, not Python's salted hash: every machine computes the same shard."""
    code = "from cases.shards import hashed_shard; print(hashed_shard('M220000-K512-N1024-seed-s0', 7))"
    seen = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed,
                                                              "PYTHONPATH": str(ROOT)},
                           capture_output=True, text=True, check=True).stdout for seed in ("0", "1", "2")}
    assert seen == {f"{hashed_shard('M220000-K512-N1024-seed-s0', 7)}\n"}


def test_balanced_by_durations():
    durations = {"a": 100.0, "b": 60.0, "c": 50.0, "d": 10.0, "e": 5.0}
    shards = assign(list(durations) + ["f"], 2, durations)      # f unknown: counts the median, 50
    loads = [sum(durations.get(c, 50.0) for c, s in shards.items() if s == i) for i in range(2)]
    # longest processing time first: within 4/3 of the optimum, itself at least half the total
    assert max(loads) <= 4 / 3 * sum(loads) / 2 and shards == assign(list(durations) + ["f"], 2, dict(durations))
    records = [{"case": "a", "backend": "x", "seconds": 3.0}, {"case": "a", "backend": "x", "seconds": 3.0},
               {"case": "a", "backend": "golden:fp64", "seconds": 2.0}, {"case": "a", "backend": "golden:tiled:t",
                                                                         "seconds": 2.0}]
    assert durations_from_records(records) == {"a": 5.0}


def _collect(*args) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "cases/", "--collect-only", "-q", "-p", "no:xdist",
                          "-p", "no:cacheprovider", *args], cwd=ROOT, capture_output=True, text=True)
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_pytest_shards_union_is_the_unsharded_collection():
    whole = _collect()
    parts = [_collect("--num-shards", "3", "--shard-id", str(i)) for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(whole) and all(parts)
    case_of = {line: line.split("[", 1)[1].rsplit("-", 1)[0] for line in whole if "test_cell[" in line}
    for i, part in enumerate(parts):            # every cell of a case lands in the same shard
        cases = {case_of[line] for line in part if line in case_of}
        assert not cases & {case_of[line] for j, p in enumerate(parts) if j != i for line in p if line in case_of}


# --------------------------------------------------------------------------- merge

def _run(tmp: Path, name: str, shard: int, count: int, cells, *, planned=None, host="h", digest="d0",
         **selection) -> Path:
    manifest = {"framework": {"version": "1", "commit": "abc", "digest": digest}, "host": host, "device": "cpu",
                "facts": {"fp32_keeps_subnormals": True},
                "selection": {"profile": "quick", "seeds": 1, "backends": ["k"], "benchmark": None,
                              "gate": "absolute", "markexpr": "", "keyword": "",
                              "shard": {"id": shard, "count": count, "durations": None}, **selection}}
    records = [{"case": c, "backend": b, "output": "dg", "golden": "reference", "status": "pass"} for c, b in cells]
    folder = tmp / name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(
        {"schema": 2, "run": name, "manifest": manifest, "planned": [list(c) for c in (planned or cells)],
         "missing": [], "unreadable_shards": [], "records": records}))
    return folder


def test_merge_unions_shards_and_keeps_each_host(tmp_path):
    a = _run(tmp_path, "a", 0, 2, [("c1", "k")], host="npu-host-1")
    b = _run(tmp_path, "b", 1, 2, [("c2", "k")], host="npu-host-2")
    merged = merge_runs([a, b], tmp_path / "merged")
    assert [(r["case"], r["host"]) for r in merged["records"]] == [("c1", "npu-host-1"), ("c2", "npu-host-2")]
    assert [h["host"] for h in merged["manifest"]["hosts"]] == ["npu-host-1", "npu-host-2"]
    assert json.loads((tmp_path / "merged" / "results.json").read_text())["planned"] == [["c1", "k"], ["c2", "k"]]


@pytest.mark.parametrize("problem, expected", [
    ("duplicate", "appear in two runs: case c1"),
    ("missing-shard", "shard(s) 1 of 2 are not among the runs"),
    ("twice", "shard 0 of 2 appears twice"),
    ("manifest", "manifests disagree on selection.gate"),
    ("edited", "manifests disagree on framework.digest"),      # the same commit, another tree
    ("never-ran", "1 planned cells never ran: case c9"),
    ("unplaced", "1 records lack a key that identifies them (case, backend, output, golden, status): records 1"),
])
def test_merge_refuses_and_names_the_problem(tmp_path, problem, expected):
    a = _run(tmp_path, "a", 0, 2, [("c1", "k")])
    if problem == "duplicate":
        runs = [a, _run(tmp_path, "b", 1, 2, [("c1", "k")])]
    elif problem == "missing-shard":
        runs = [a]
    elif problem == "twice":
        runs = [a, _run(tmp_path, "b", 0, 2, [("c2", "k")])]
    elif problem == "manifest":
        runs = [a, _run(tmp_path, "b", 1, 2, [("c2", "k")], gate="dual")]
    elif problem == "edited":
        runs = [a, _run(tmp_path, "b", 1, 2, [("c2", "k")], digest="d1")]
    elif problem == "unplaced":
        b = _run(tmp_path, "b", 1, 2, [("c2", "k")])
        payload = json.loads((b / "results.json").read_text())
        payload["records"].append({"backend": "k", "output": "dg", "golden": "reference", "status": "pass"})
        (b / "results.json").write_text(json.dumps(payload))
        runs = [a, b]
    else:
        runs = [a, _run(tmp_path, "b", 1, 2, [("c2", "k")], planned=[("c2", "k"), ("c9", "k")])]
    with pytest.raises(MergeError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        merge_runs(runs, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_sharded_runs_merge_to_the_unsharded_run(tmp_path):
    """Two real shards of a few small cells, merged: the same records, verdict for verdict."""
    select = ["-k", "M1-K512 or M2-K96 or M1023-K96", "--benchmark", "none", "--no-isolation",
              "--backend", "torch-eager", "--backend", "tests.reports.kernels:wrong_db_g"]

    def run(folder, *extra):
        proc = subprocess.run([sys.executable, "-m", "pytest", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider",
                               "-q", "--results-dir", str(tmp_path / folder), *select, *extra], cwd=ROOT,
                              capture_output=True, text=True)
        assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]   # 1: the wrong kernel fails
        return tmp_path / folder

    whole = run("whole")
    shards = [run(f"s{i}", "--num-shards", "2", "--shard-id", str(i)) for i in range(2)]
    from accuracy.__main__ import main
    assert main(["merge", *map(str, shards), "-o", str(tmp_path / "merged")]) == 0
    from runs.results import load_results
    merged, single = load_results(tmp_path / "merged"), load_results(whole)

    def verdicts(records):
        return sorted((r["case"], r["backend"], r["output"], r["golden"], r.get("status")) for r in records)
    assert verdicts(merged["records"]) == verdicts(single["records"]) and len(merged["records"]) > 20
    assert sorted(map(tuple, merged["planned"])) == sorted(map(tuple, single["planned"]))
    assert main(["merge", str(shards[0]), "-o", str(tmp_path / "half")]) == 2       # shard 1 absent: refused
    from reports.page import render           # rendered like a local run, with where each cell ran
    html = render(tmp_path / "merged", tmp_path / "report", heatmap=False).read_text()
    host = merged["records"][0]["host"]
    assert f"(host {host}, device cpu)" in html and "Merged from 2 runs" in html
