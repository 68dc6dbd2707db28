"""A sweep of hostile inputs against the whole tool, as a user and an adversary would run it.

Three parts, each a set of real command lines run in subprocesses on a results folder of its own:

* **kernels, isolated** (the default): every kernel of ``benchmarks/hostile_sweep/kernels.py`` in
  one pytest run over four small cases beside torch-eager. Correct kernels, and attacks through a
  door the framework has closed whose outputs are right (``HARMLESS``), must pass every cell;
  wrong kernels and attacks on the harness must fail at least one cell (not xfail, not pass);
  torch-eager must pass every cell; no planned cell may lose its record.
* **attacks in-process** (``--no-isolation``): each attack in a run of its own with torch-eager
  after it in the same process: the attack must fail (a ``HARMLESS`` one pass), torch-eager must
  still pass every cell.
* **user errors**: options, files and tool invocations that are wrong; each must end with a
  non-zero exit (4 for pytest's usage errors, 2 for a tool's), one line naming the option or
  file, and no traceback; no input file may change.

    python -m benchmarks.hostile_sweep                      # all parts, a markdown table
    python -m benchmarks.hostile_sweep --part errors --json out.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.hostile_sweep import kernels as K   # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU   # noqa: E402

MODULE = "benchmarks.hostile_sweep.kernels"
CASES = ("2,96,200,unit", "1025,96,200,seed", "2049,96,200,unit", "3000,96,200,saturating")
BAD = ("fail", "error", "crashed", "timed_out")


@dataclass
class Row:
    part: str
    name: str
    expected: str
    observed: str
    ok: bool


def _run(args, *, env=None, timeout=1800, cwd=ROOT) -> subprocess.CompletedProcess:
    """A finished process, or one killed at ``timeout`` seconds (exit 124, as timeout(1) says)."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(args, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)    # the whole session: pool workers and backend children too
        out, _ = proc.communicate()
        return subprocess.CompletedProcess(args, 124, out, f"killed after {timeout} s")


def _pytest(*args, env=None, timeout=1800):
    return _run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "cases/", *args], env=env,
                timeout=timeout)


def _records(results_dir: Path) -> tuple[list[dict], dict]:
    runs = sorted((results_dir / "runs").iterdir()) if (results_dir / "runs").exists() else []
    if not runs or not (runs[-1] / "results.json").exists():
        return [], {"missing": ["<no results.json>"], "unreadable_shards": []}
    data = json.loads((runs[-1] / "results.json").read_text())
    return data.get("records", []), data


def _by_backend(records):
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r.get("backend"), []).append(r)
    return out


def _judge(name: str, recs: list[dict], *, must: str) -> Row | None:
    statuses = sorted({r.get("status") for r in recs if r.get("gated") or r.get("output") == "*"})
    if must == "pass":
        ok = bool(recs) and all(s in ("pass",) for s in statuses)
    elif must == "fail":
        ok = any(s in BAD for s in statuses)
    else:    # "recorded": any verdict, as long as the cell kept a record
        ok = bool(recs)
    return Row("", name, must, ",".join(statuses) or "no record", ok)


def _must(name: str) -> str:
    """What a kernel of ``K`` must do: pass every cell, keep a record of any verdict, or fail one."""
    if name in K.CORRECT or name in K.HARMLESS:
        return "pass"
    return "recorded" if name in K.RIGHT_AT_RETURN else "fail"


def kernels_isolated(tmp: Path, part="kernels isolated", names=None, extra=()) -> list[Row]:
    names = names or (*K.CORRECT, *K.WRONG, *K.ATTACKS)
    results = tmp / part.replace(" ", "-")
    backends = [a for n in names for a in ("--backend", f"{MODULE}:{n}")] + ["--backend", "torch-eager"]
    cases = [a for c in CASES for a in ("--case", c)]
    t0 = time.time()
    proc = _pytest("-n", "2", "--profile", "none", *cases, *backends, "--cell-timeout", "20",
                   "--results-dir", str(results), *extra, env={"SWEEP_RESULTS": str(results)})
    records, data = _records(results)
    rows = [Row(part, "run", "exit 1, no INTERNALERROR, nothing missing",
                f"exit {proc.returncode}, {len(data.get('missing', []))} missing, "
                f"{len(data.get('unreadable_shards', []))} unreadable, {time.time() - t0:.0f} s",
                proc.returncode == 1 and "INTERNALERROR" not in proc.stdout + proc.stderr
                and not data.get("missing") and not data.get("unreadable_shards"))]
    by = _by_backend(records)
    for n in names:
        must = _must(n)
        row = _judge(n, by.get(f"{MODULE}:{n}", []), must=must)
        row.part = part
        rows.append(row)
    row = _judge("torch-eager", by.get("torch-eager", []), must="pass")
    row.part = part
    rows.append(row)
    if not rows[0].ok:
        rows[0].observed += " | " + (proc.stdout + proc.stderr)[-400:].replace("\n", " ")
    return rows


def attacks_in_process(tmp: Path) -> list[Row]:
    rows = []
    for n in K.ATTACKS:
        if n in ("attack_ignore_sigterm_and_hang", "attack_fork_orphan", "attack_os_exit_zero", "attack_alarm"):
            continue     # these kill or hang the process they run in: isolated runs only
        if n == "attack_decline_where_wrong":
            continue     # it declines the saturating case only, not among the in-process cases
        results = tmp / f"inproc-{n}"
        proc = _pytest("-p", "no:xdist", "--no-isolation", "--profile", "none", "--case", CASES[0],
                       "--case", CASES[1], "--backend", f"{MODULE}:{n}", "--backend", "torch-eager",
                       "--results-dir", str(results), timeout=600)
        by = _by_backend(_records(results)[0])
        mine = _judge(n, by.get(f"{MODULE}:{n}", []), must=_must(n))
        eager = _judge("torch-eager", by.get("torch-eager", []), must="pass")
        crashed = "INTERNALERROR" in proc.stdout + proc.stderr or proc.returncode not in (0, 1)
        rows.append(Row("attacks in-process", n, f"{mine.expected}; torch-eager after it passes",
                        f"{mine.observed}; torch-eager {eager.observed}; exit {proc.returncode}",
                        mine.ok and eager.ok and not crashed))
    return rows


def _one_line_error(proc, codes) -> tuple[bool, str]:
    text = (proc.stderr + proc.stdout).strip()
    ok = proc.returncode in codes and "Traceback" not in text and "INTERNALERROR" not in text
    last = text.splitlines()[-1] if text else ""
    return ok, f"exit {proc.returncode}: {last[:160]}"


def user_errors(tmp: Path) -> list[Row]:
    """Each: (name, argv, exit codes allowed). pytest's usage errors exit 4, the tools' errors 2."""
    tiny = tmp / "tiny-results"
    _pytest("-p", "no:xdist", "--profile", "none", "--case", CASES[0], "--backend", "torch-eager",
            "--results-dir", str(tiny), timeout=600)
    run = sorted((tiny / "runs").iterdir())[-1]
    results_file = run / "results.json"
    junk = tmp / "junk.json"
    junk.write_text(json.dumps([{"a": 1}, 3, "x"]))
    binary = tmp / "binary.json"
    binary.write_bytes(bytes(range(256)) * 4)
    afile = tmp / "a-file.txt"
    afile.write_text("x")
    zeros = tmp / "zeros.safetensors"
    _write_zero_inputs(zeros)
    same_bytes = tmp / "same-bytes.safetensors"
    same_bytes.write_bytes(zeros.read_bytes())
    opmod = tmp / "opmods"
    (opmod / "raises_op").mkdir(parents=True, exist_ok=True)
    (opmod / "raises_op" / "__init__.py").write_text("raise RuntimeError('boom')\n")
    (opmod / "syntax_op").mkdir(parents=True, exist_ok=True)
    (opmod / "syntax_op" / "__init__.py").write_text("def (:\n")
    (opmod / "raising_backend.py").write_text("raise ValueError('at import')\n")
    py = sys.executable
    P = [py, "-m", "pytest", "-q", "-p", "no:xdist", "cases/"]
    one = ["--profile", "none", "--case", CASES[0], "--backend", "torch-eager", "--results-dir", str(tmp / "r-err")]
    env_op = {"PYTHONPATH": f"{ROOT}:{opmod}"}
    cases = [
        ("--profile none, no case", P + ["--profile", "none", "--backend", "torch-eager"], {4}, None),
        ("--seeds 0", P + one + ["--seeds", "0"], {4}, None),
        ("--seeds 10^12", P + one + ["--seeds", "1000000000000"], {4}, None),
        ("--repeats -1", P + one + ["--repeats", "-1"], {4}, None),
        ("--cell-timeout nan", P + one + ["--cell-timeout", "nan"], {4}, None),
        ("--cell-timeout inf", P + one + ["--cell-timeout", "inf"], {4}, None),
        ("--cell-timeout -5", P + one + ["--cell-timeout", "-5"], {4}, None),
        ("--chunk-rows 0", P + one + ["--chunk-rows", "0"], {4}, None),
        ("--chunk-rows 10^15", P + one + ["--chunk-rows", "1000000000000000"], {4}, None),
        ("--num-shards 0", P + one + ["--num-shards", "0"], {4}, None),
        ("--shard-id 5 of 2", P + one + ["--num-shards", "2", "--shard-id", "5"], {4}, None),
        ("--shard-durations missing", P + one + ["--num-shards", "2", "--shard-durations", str(tmp / "nope")], {4}, None),
        ("--case 30-digit M", P + ["--profile", "none", "--case", "1" * 30 + ",96,200,unit", "--backend", "torch-eager"], {4}, None),
        ("--case negative K", P + ["--profile", "none", "--case", "2,-96,200,unit", "--backend", "torch-eager"], {4}, None),
        ("--case unknown scale", P + ["--profile", "none", "--case", "2,96,200,nosuch", "--backend", "torch-eager"], {4}, None),
        ("--case garbage", P + ["--profile", "none", "--case", "a,b", "--backend", "torch-eager"], {4}, None),
        ("--case M=0", P + ["--profile", "none", "--case", "0,96,200,unit", "--backend", "torch-eager"], {4}, None),
        ("--inputs missing file", P + ["--profile", "none", "--inputs", str(tmp / "no.safetensors"), "--backend", "torch-eager"], {4}, None),
        ("--inputs not safetensors", P + ["--profile", "none", "--inputs", str(afile), "--backend", "torch-eager"], {4}, None),
        ("--inputs twice, same bytes", P + ["--profile", "none", "--inputs", str(zeros), "--inputs", str(same_bytes), "--backend", "torch-eager"], {4}, None),
        ("--backend ':'", P + one + ["--backend", ":"], {4}, None),
        ("--backend no.such:fn", P + one + ["--backend", "no.such:fn"], {4}, None),
        ("--backend module raising at import", P + one + ["--backend", "raising_backend:fn"], {4}, env_op),
        ("--backend not callable", P + one + ["--backend", f"{MODULE}:CORRECT"], {4}, None),
        ("--operator nosuchop", P + one + ["--operator", "nosuchop"], {4}, None),
        ("--operator raising module", P + one + ["--operator", "raises_op"], {4}, env_op),
        ("--operator syntax error", P + one + ["--operator", "syntax_op"], {4}, env_op),
        ("--operator relative path", P + one + ["--operator", "./operators/swiglu_backward"], {4}, None),
        # $ACCURACY_OPERATOR is read by nothing now: an unknown operator beside a known one is --operator's error
        ("--operator nosuchop beside a known one", P + one + ["--operator", "swiglu_backward", "--operator", "nosuchop"],
         {4}, None),
        ("--device tpu", P + one + ["--device", "tpu"], {4}, None),
        ("--device cuda without a GPU", P + one + ["--device", "cuda"], {4}, None),
        ("--gate dual --benchmark none", P + one + ["--gate", "dual", "--benchmark", "none"], {4}, None),
        ("--gate dual, benchmark under test", P + one + ["--gate", "dual", "--benchmark", f"{MODULE}:wrong_all_zero", "--backend", f"{MODULE}:wrong_all_zero"], {1, 4}, None),
        ("--results-dir is a file", P + one[:-2] + ["--results-dir", str(afile)], {4}, None),
        ("--report-dir is a file", P + one + ["--report-dir", str(afile)], {4}, None),
        ("--baseline missing", P + one + ["--report-dir", str(tmp / "rep"), "--baseline", str(tmp / "nobase")], {1, 2, 4}, None),
        ("reports: missing results", [py, "-m", "reports", str(tmp / "none"), "-o", str(tmp / "rep2")], {2}, None),
        ("reports: junk results", [py, "-m", "reports", str(junk), "-o", str(tmp / "rep3")], {2}, None),
        ("reports: binary results", [py, "-m", "reports", str(binary), "-o", str(tmp / "rep4")], {2}, None),
        ("reports: -o is a file", [py, "-m", "reports", str(tiny), "-o", str(afile)], {2}, None),
        ("reports: -o is the run folder", [py, "-m", "reports", str(tiny), "-o", str(run)], {2}, None),
        ("reports csv: -o onto results.json", [py, "-m", "reports", "csv", str(tiny), "-o", str(results_file)], {2}, None),
        ("reports csv: junk", [py, "-m", "reports", "csv", str(junk), "-o", str(tmp / "x.csv")], {2}, None),
        ("reports csv: -o unwritable", [py, "-m", "reports", "csv", str(tiny), "-o", "/proc/x.csv"], {2}, None),
        ("merge: junk", [py, "-m", "runs", "merge", str(junk), "-o", str(tmp / "m1")], {2}, None),
        ("merge: binary", [py, "-m", "runs", "merge", str(binary), "-o", str(tmp / "m2")], {2}, None),
        ("merge: -o onto a run", [py, "-m", "runs", "merge", str(tiny), "-o", str(run)], {2}, None),
        ("merge: -o onto a results dir", [py, "-m", "runs", "merge", str(tiny), "-o", str(tiny)], {2}, None),
        ("merge: -o is a file", [py, "-m", "runs", "merge", str(tiny), "-o", str(afile)], {2}, None),
        ("diff: junk", [py, "-m", "runs", "diff", str(junk), str(tiny)], {2}, None),
        ("diff: binary", [py, "-m", "runs", "diff", str(tiny), str(binary)], {2}, None),
        ("diff: missing", [py, "-m", "runs", "diff", str(tmp / "none"), str(tiny)], {2}, None),
        ("merge at its first address (python -m accuracy): junk",
         [py, "-m", "accuracy", "merge", str(junk), "-o", str(tmp / "m3")], {2}, None),
        ("expectations update: junk", [py, "-m", "cases.expectations", "update", str(junk), "--dry-run"], {2}, None),
        ("expectations update: binary", [py, "-m", "cases.expectations", "update", str(binary), "--dry-run"], {2}, None),
        ("expectations update: missing", [py, "-m", "cases.expectations", "update", str(tmp / "none"), "--dry-run"], {2}, None),
        ("drift study: -o is a file", [py, "-m", "cases.drift_study", "-o", str(afile)], {2}, None),
        ("drift study: --operator nosuchop", [py, "-m", "cases.drift_study", "--operator", "nosuchop", "-o",
                                              str(tmp / "drift")], {2}, None),
        ("reports drift: no study there", [py, "-m", "reports", "drift", str(tmp / "none")], {2}, None),
    ]
    before = {p: _digest(p) for p in (results_file, junk, binary, afile, zeros)}
    rows = []
    for name, argv, codes, env in cases:
        proc = _run(argv, env=env, timeout=120)
        ok, observed = _one_line_error(proc, codes)
        rows.append(Row("user errors", name, f"exit {sorted(codes)}, one line, no traceback", observed, ok))
    after = {p: _digest(p) for p in before}
    changed = [str(p) for p in before if before[p] != after[p]]
    rows.append(Row("user errors", "inputs unchanged", "no input file changed", ", ".join(changed) or "none changed",
                    not changed))
    mine = tmp / "pkgs" / "torch-mine"
    mine.mkdir(parents=True, exist_ok=True)
    (mine / "__init__.py").write_text(
        "import torch\nfrom benchmarks.hostile_sweep.kernels import _math\n"
        "def zero_dx(**inp):\n    out = _math(**inp)\n    out['dx'] = torch.zeros_like(out['dx'])\n    return out\n")
    named = tmp / "torch-mine-run"
    proc = _pytest("-p", "no:xdist", "--profile", "none", "--case", "1,96,200,tiny", "--case", CASES[0],
                   "--backend", "torch-mine:zero_dx", "--results-dir", str(named),
                   env={"PYTHONPATH": f"{ROOT}:{tmp / 'pkgs'}"}, timeout=600)
    statuses = sorted({r.get("status") for r in _records(named)[0]
                       if r.get("gated") and r.get("backend") == "torch-mine:zero_dx"})
    rows.append(Row("user errors", "an import path named like a registered backend (torch-mine:zero_dx)",
                    "its zero dx fails, never excused", f"exit {proc.returncode}, statuses {statuses}",
                    proc.returncode == 1 and "fail" in statuses and "expected_failure" not in statuses))
    zero_results = tmp / "zeros-run"
    proc = _pytest("-p", "no:xdist", "--profile", "none", "--inputs", str(zeros), "--backend", "torch-eager",
                   "--backend", f"{MODULE}:wrong_all_zero", "--results-dir", str(zero_results), timeout=600)
    statuses = sorted({r.get("status") for r in _records(zero_results)[0] if r.get("gated") or r.get("output") == "*"})
    rows.append(Row("user errors", "all-zero inputs file", "no cell PASSES (checks nothing)",
                    f"exit {proc.returncode}, statuses {statuses}", "pass" not in statuses and proc.returncode != 0))
    return rows


def _write_zero_inputs(path: Path) -> None:
    import torch
    from safetensors.torch import save_file
    shapes = SWIGLU.input_shapes(dict(zip(SWIGLU.dims, (64, 96, 200))))
    save_file({name: torch.zeros(s, dtype=torch.bfloat16) for name, s in shapes.items()}, str(path))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


def markdown(rows: list[Row]) -> str:
    lines = ["| part | input | expected | observed | ok |", "|---|---|---|---|---|"]
    lines += [f"| {r.part} | {r.name} | {r.expected} | {r.observed.replace('|', '/')} | {'yes' if r.ok else '**NO**'} |"
              for r in rows]
    bad = sum(not r.ok for r in rows)
    lines.append(f"\n{len(rows)} inputs, {bad} not as expected")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostile_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("all", "kernels", "in-process", "errors"), default="all")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="hostile-sweep-") as tmp:
        tmp = Path(tmp)
        if args.part in ("all", "kernels"):
            rows += kernels_isolated(tmp)
        if args.part in ("all", "in-process"):
            rows += attacks_in_process(tmp)
        if args.part in ("all", "errors"):
            rows += user_errors(tmp)
    print(markdown(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
