"""Run the case matrix as shards on a Ray cluster and merge them:

    python -m cases.ray_launch --shards 8 --resource NPU=1 [--address ray://head:10001] \\
        --out merged/ -- -m "not large" --backend pypto

One Ray task per shard (``--num-shards N --shard-id i``, ``cases/shards.py``), each asking for
``--resource`` (``NPU=1``, ``GPU=1`` or ``CPU=4``; repeatable), so Ray places shards on the nodes
that have the devices and balances mixed hosts. A task runs its shard's pytest in a subprocess on
its node with the devices Ray assigned, streams progress (cells done / planned, failures so far)
to the driver, and sends its run folder's ``results.json`` back (no shared filesystem assumed);
the driver merges them with ``runs.merge``. A shard whose task dies (the node, the process,
or pytest killed by a signal) is retried once by Ray; if it dies again its planned cells are
recorded as missing in the merged run and the exit status is non-zero.

Devices. Ray exports the ids it assigned to a task in the accelerator's visibility variable
(``ASCEND_RT_VISIBLE_DEVICES`` for the ``NPU`` resource, ``CUDA_VISIBLE_DEVICES`` for ``GPU``);
the task passes them to pytest sorted in ascending order, because CANN requires the ids of
``ASCEND_RT_VISIBLE_DEVICES`` to ascend (and the framework then indexes into that visible list,
never from a physical id). A shard that asks for no device of a kind gets an empty visibility
variable for it: Ray does the same by default (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO``, which a
future Ray turns off), and the task sets it explicitly so that a CPU shard never touches a device
another shard owns, whatever the Ray version. Where the cluster has no such devices at all the
variable is left alone.

Ray is an optional extra: ``pip install -e '.[ray]'``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runs.merge import merge_runs
from runs.output_paths import OutputPathError, output_folder
from runs.results import TMP_PREFIX
from cases.shards import assignment
from contract.records import CASE_ID_PATTERN, FAILING, GOLDEN_PREFIX  # the records' vocabulary (torch-free)

ROOT = Path(__file__).resolve().parents[1]
VISIBILITY = {"NPU": "ASCEND_RT_VISIBLE_DEVICES", "GPU": "CUDA_VISIBLE_DEVICES"}
POLL_SECONDS = 2.0


def parse_resources(specs: list[str]) -> dict[str, float]:
    """["NPU=1", "CPU=2"] -> {"NPU": 1.0, "CPU": 2.0}."""
    out: dict[str, float] = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        try:
            amount = float(value)
        except ValueError:
            raise ValueError(f"--resource wants NAME=AMOUNT (NPU=1, GPU=1, CPU=2), got {spec!r}") from None
        if not name or amount <= 0:
            raise ValueError(f"--resource wants NAME=AMOUNT with AMOUNT > 0, got {spec!r}")
        out[name] = out.get(name, 0.0) + amount
    return out


def device_env(assigned: dict[str, list], requested: dict[str, float], cluster: dict[str, float]) -> dict[str, str]:
    """The visibility variables of one shard: the assigned ids in ascending order (CANN's rule),
    empty for a device kind the shard did not ask for but the cluster has."""
    env = {}
    for kind, var in VISIBILITY.items():
        ids = sorted(assigned.get(kind) or [], key=lambda i: (len(str(i)), str(i)))
        if requested.get(kind):
            env[var] = ",".join(map(str, ids))
        elif cluster.get(kind):
            env[var] = ""      # zero devices of this kind: see the module docstring
    return env


def _cells_of(run_root: Path) -> list[Path]:
    return [p for p in run_root.glob("runs/*/shards/*/*.json") if not p.name.startswith(TMP_PREFIX)]


def run_shard(shard: int, shards: int, pytest_args: list[str], requested: dict[str, float], cluster: dict[str, float],
              progress=None, cwd: str | None = None) -> dict:
    """Run one shard's pytest here (on the node the task landed on); returns its results.json as
    text with where it ran. Raises when pytest died without results (so Ray retries it)."""
    import ray
    assigned = ray.get_runtime_context().get_accelerator_ids() if ray.is_initialized() else {}
    env = {**os.environ, **device_env(assigned, requested, cluster)}
    with tempfile.TemporaryDirectory(prefix=f"shard{shard}-") as tmp:
        root = Path(tmp) / "results"
        cmd = [sys.executable, "-m", "pytest", "cases/", "-p", "no:cacheprovider", "-q", *pytest_args,
               "--num-shards", str(shards), "--shard-id", str(shard), "--results-dir", str(root)]
        log = Path(tmp) / "pytest.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, cwd=cwd or os.getcwd(), env=env, stdout=out, stderr=subprocess.STDOUT)
            seen: dict[Path, int | None] = {}     # cell file -> 1 failing, 0 not, None a case's goldens
            reported = None
            while True:
                finished = proc.poll() is not None
                for cell in _cells_of(root):
                    if cell not in seen:
                        try:
                            recs = json.loads(cell.read_text())["records"]
                        except (OSError, ValueError, KeyError):
                            continue      # being written: read it at the next poll
                        goldens = all(str(r.get("backend", "")).startswith(GOLDEN_PREFIX) for r in recs)
                        seen[cell] = None if goldens else int(any(r.get("status") in FAILING for r in recs))
                cells = [v for v in seen.values() if v is not None]
                if progress is not None and (len(cells), sum(cells)) != reported:
                    reported = (len(cells), sum(cells))
                    progress.put((shard, *reported))
                if finished:
                    break
                time.sleep(POLL_SECONDS)
        tail = log.read_text()[-3000:]
        results = list(root.glob("runs/*/results.json"))
        if proc.returncode < 0 or not results:
            raise RuntimeError(f"shard {shard} of {shards}: pytest exited with {proc.returncode} and "
                               f"{'no' if not results else 'a'} results.json; its log ends:\n{tail}")
        return {"shard": shard, "returncode": proc.returncode, "host": platform.node(),
                "visible": {v: env.get(v) for v in VISIBILITY.values()}, "results": results[0].read_text(),
                "log_tail": tail}


def planned_cells(pytest_args: list[str], shards: int, cwd: Path = ROOT) -> dict[int, list[tuple[str, str]]]:
    """Shard -> its planned (case, backend) cells, from a local collection of the same selection,
    split as the plugin splits it (``cases.shards.assignment``, with ``--shard-durations`` if given)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "cases/", "--collect-only", "-q", "-p", "no:xdist",
                           "-p", "no:cacheprovider", *pytest_args], cwd=cwd, capture_output=True, text=True)
    cell = re.compile(rf"test_cell\[(?P<case>{CASE_ID_PATTERN})-(?P<backend>.+)\]$")
    cells = [(m["case"], m["backend"]) for m in map(cell.search, proc.stdout.splitlines()) if m]
    options = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    options.add_argument("--shard-durations")
    shard_of = assignment({c for c, _ in cells}, shards, options.parse_known_args(pytest_args)[0].shard_durations)
    out: dict[int, list] = {i: [] for i in range(shards)}
    for case, backend in cells:
        out[shard_of[case]].append((case, backend))
    return out


def launch(pytest_args: list[str], shards: int, requested: dict[str, float], out: Path, *,
           address: str | None = None, init_kwargs: dict | None = None, echo=print) -> dict:
    """Run every shard as a Ray task, stream progress, merge into ``out``; returns a summary."""
    import ray
    start = time.perf_counter()
    plan = planned_cells(pytest_args, shards)
    total = sum(len(v) for v in plan.values())
    if not ray.is_initialized():
        ray.init(address=address, **(init_kwargs or {}))
    cluster = ray.cluster_resources()
    from ray.util.queue import Queue
    queue = Queue()
    options = {"num_cpus": requested.get("CPU", 1), "max_retries": 1, "retry_exceptions": True,
               "resources": {k: v for k, v in requested.items() if k not in ("CPU", "GPU")}}
    if requested.get("GPU"):
        options["num_gpus"] = requested["GPU"]
    task = ray.remote(run_shard).options(**options)
    empty = [i for i in range(shards) if not plan[i]]       # a shard the hash gave no case: nothing to run
    refs = {task.remote(i, shards, pytest_args, requested, cluster, queue, str(ROOT)): i
            for i in range(shards) if plan[i]}
    state = {i: (0, 0) for i in range(shards)}
    pending = dict(refs)
    done: dict[int, dict] = {}
    lost: dict[int, str] = {}
    last = None
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
        while not queue.empty():
            shard, cells, failed = queue.get_nowait()
            state[shard] = (cells, failed)
        for ref in ready:
            i = pending.pop(ref)
            try:
                done[i] = ray.get(ref)
            except Exception as exc:   # noqa: BLE001 - retried once by Ray already; record and go on
                cause = getattr(exc, "cause", None) or exc      # RayTaskError wraps the task's own exception
                text = str(cause).strip()
                lost[i] = f"{type(cause).__name__}: {text.splitlines()[0] if text else ''}"
        line = (f"cells {sum(c for c, _ in state.values())}/{total}, failing {sum(f for _, f in state.values())}, "
                f"shards done {len(done) + len(empty)}/{shards}" + (f", lost {len(lost)}" if lost else ""))
        if line != last:
            echo(line)
            last = line
    with tempfile.TemporaryDirectory(prefix="ray-shards-") as tmp:
        folders = []
        for i, res in sorted(done.items()):
            folder = Path(tmp) / f"shard{i}"
            folder.mkdir()
            (folder / "results.json").write_text(res["results"])
            folders.append(folder)
        missing = [{"case": c, "backend": b} for i in lost for c, b in plan[i]]
        payload = merge_runs(folders, out, absent_shards=sorted([*lost, *empty]), extra_missing=missing)
    return {"wall_s": time.perf_counter() - start, "shards": shards, "planned": total,
            "records": len(payload["records"]), "missing": len(payload["missing"]), "lost": lost, "empty": empty,
            "hosts": {i: (r["host"], r["visible"]) for i, r in done.items()},
            "failing_cells": sum(f for _, f in state.values())}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m cases.ray_launch", description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, required=True, help="number of shards (Ray tasks)")
    parser.add_argument("--resource", action="append", default=[], metavar="NAME=AMOUNT",
                        help="what each shard needs: NPU=1, GPU=1, CPU=2 (repeatable; default CPU=1)")
    parser.add_argument("--address", default=None, help="the Ray cluster (default: start a local one)")
    parser.add_argument("--out", required=True, help="the merged run folder (results.json inside)")
    args = parser.parse_args(own)
    try:
        requested = parse_resources(args.resource or ["CPU=1"])
    except ValueError as exc:
        parser.error(str(exc))
    if args.shards < 1:
        parser.error("--shards must be >= 1")
    try:
        output_folder(args.out, "--out")
    except OutputPathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        import ray  # noqa: F401
    except ImportError:
        print("error: Ray is not installed: pip install -e '.[ray]'", file=sys.stderr)
        return 2
    summary = launch(pytest_args, args.shards, requested, Path(args.out), address=args.address)
    print(f"{args.out}/results.json: {summary['records']} records from {summary['shards'] - len(summary['lost'])}"
          f"/{summary['shards']} shards in {summary['wall_s']:.0f} s; {summary['missing']} planned cells missing")
    for i, why in summary["lost"].items():
        # the retry is Ray's (max_retries=1): the reason is the second attempt's
        print(f"LOST shard {i}: {why}", file=sys.stderr)
    return 1 if summary["missing"] or summary["failing_cells"] else 0


if __name__ == "__main__":
    sys.exit(main())
