"""The drift of a row-local loop against its number of blocks, from the goldens alone: attention's
online softmax over key blocks (``Plan.loops``), where ``cases.drift_study`` covers the loops over M.

Per case (M queries, N keys, the operator's study head dim), for each row output of a plan with a
loop (the operator's default schedule, FlashAttention's 128-key blocks):

* ``drift``: the output computed block by block (the running max, the rescale chain, each block's
  P~ stored at its running max) minus the same plan in one global pass, in FP32 before the output
  store, as rms and max over elements, over rms(FP64): the loop's own error;
* ``gate``: the gate's element test on the block-by-block output as a kernel stores it,
  max over elements of |output - reference| / (atol_eff + rtol |reference| + allowance):
  above 1 a kernel that computes exactly this loop fails.

Beside the correct loop, each ``KERNELS`` entry (a wrong flash kernel of ``operators.attention``'s
zoo whose error grows with the blocks: the running sum l kept in BF16) is measured by the same
gate ratio, so the figure shows where a real bug crosses the gate and the legitimate loop does not.

``python -m cases.loop_drift -o DIR`` writes ``loop_drift.json`` (points, summary, crossing table) and
``loop_drift.md``; ``python -m reports drift DIR`` draws ``loop-drift.png`` from the JSON
(``reports.plots.loop_drift``), and a run with ``--report-dir`` makes a small study of its own
(``cases/test_drift_figure.py``) that its report shows.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import torch

import operators
from accuracy.derived import TensorOps, reference_and_allowances
from accuracy.tolerances import tolerances_for
from cases.spec import CaseSpec, make_inputs
from goldens.rounding import round_to
from kernels.registry import resolve
from runs import manifest, platform_facts
from runs.output_paths import OutputPathError, output_folder

OPERATOR = "attention"
LOOP = "key"
QUERIES = 64
HEAD_DIM = 64
# 1 to 256 key blocks of 128: up to the 32768-token contexts long-context kernels are tested at
NS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
SEEDS = 5
PROFILES = ("unit", "near_uniform", "large_logits")
# wrong kernels whose error grows with the number of key blocks: name -> "module:callable"
KERNELS = {"bf16_running_sum": "operators.attention.mutants:bf16_running_sum"}


def _kernel_path(op, path: str) -> str:
    """A forward operator's (no dO among its inputs) wrong kernel is the same bug's forward alone."""
    module, name = path.split(":")
    return path if "do" in op.input_names else f"{module}:forward_{name}"


def _rms(t: torch.Tensor) -> float:
    return float(t.double().square().mean().sqrt()) if t.numel() else 0.0


def applies(op) -> bool:
    """Whether the study can run for ``op``: an operator with dimensions (M, N keys, D) whose
    default schedule replays a row-local loop over key blocks (attention, not causal: its keys
    are its M)."""
    plan = op.schedules.default_schedule().plan
    return tuple(op.dims) == ("M", "N", "D") and bool(getattr(plan, "loop", lambda _: None)(LOOP))


def measure(profile: str, n: int, seed: int, operator: str = OPERATOR) -> dict:
    """One case's drift and gate ratios (one thread: the study runs cases in processes)."""
    start = time.perf_counter()
    op = operators.get(operator)
    spec = CaseSpec(QUERIES, n, HEAD_DIM, profile, seed, operator=op)
    inputs = make_inputs(spec)
    schedule = op.schedules.default_schedule()
    blocks = schedule.plan.loop(LOOP)
    flat = replace(schedule.plan, loops={})
    derived = op.golden.derived
    f32 = {k: v.float() for k, v in inputs.items()}
    looped, _ = derived.evaluate(TensorOps(schedule.plan), f32)
    global_, _ = derived.evaluate(TensorOps(flat), f32)
    exact, allow = reference_and_allowances(op, inputs)
    tol = tolerances_for(op)
    point = {"profile": profile, "n": n, "seed": seed, "blocks": -(-n // blocks), "outputs": {}}
    candidates = {"loop": {o: round_to(looped[o], op.output_dtype(o)) for o in op.row_outputs}}
    for name, path in KERNELS.items():
        candidates[name] = resolve(op, _kernel_path(op, path))(**inputs)
    for o in op.row_outputs:
        scale = _rms(exact[o]) or 1.0
        reference = round_to(exact[o], op.output_dtype(o))
        limit = tol[o].element_bound(reference, allow[o], _rms(reference))
        drift = looped[o].double() - global_[o].double()
        entry = {"drift_rms": _rms(drift) / scale, "drift_max": float(drift.abs().max()) / scale}
        for name, out in candidates.items():
            err = (out[o].double() - reference.double()).abs()
            entry[f"gate_{name}"] = float((err / limit).max())
            entry[f"error_rms_{name}"] = _rms(out[o].double() - exact[o]) / scale
        entry["tolerance_rms"] = _rms(limit) / scale
        point["outputs"][o] = entry
    point["seconds"] = time.perf_counter() - start
    return point


def _worker(args) -> dict:
    torch.set_num_threads(1)
    return measure(*args)


def summarize(points: list[dict]) -> dict:
    """Median and 10-90% band over seeds, per profile, output, N and quantity."""
    out: dict = {}
    for p in points:
        for o, entry in p["outputs"].items():
            for q, v in entry.items():
                out.setdefault(p["profile"], {}).setdefault(o, {}).setdefault(q, {}).setdefault(str(p["n"]), []).append(v)
    for prof in out.values():
        for per_output in prof.values():
            for q, by_n in per_output.items():
                for n, vals in by_n.items():
                    vals = sorted(vals)
                    by_n[n] = {"median": statistics.median(vals), "low": vals[0], "high": vals[-1]}
    return out


def crossing_table(summary: dict, candidates: list[str]) -> list[dict]:
    """Per profile, output and candidate (the loop, each wrong kernel): the first N whose median
    gate ratio exceeds 1, or None where it never does on the grid."""
    rows = []
    for profile, per_output in summary.items():
        for o, quantities in per_output.items():
            for name in candidates:
                by_n = quantities[f"gate_{name}"]
                ns = sorted(by_n, key=int)
                first = next((int(n) for n in ns if by_n[n]["median"] > 1), None)
                rows.append({"profile": profile, "output": o, "candidate": name, "first_n_failing": first,
                             "median_gate_at_largest_n": by_n[ns[-1]]["median"], "largest_n": int(ns[-1])})
    return rows


def markdown(study: dict) -> str:
    lines = [f"# Online-softmax drift against key blocks ({study['operator']}, M={study['queries']}, "
             f"D={study['head_dim']}, blocks of {study['block']} keys, seeds {study['seeds']})", "",
             "Generated by `python -m cases.loop_drift`; each value the median over seeds.", "",
             "| profile | output | N | blocks | drift rms / rms | drift max / rms | gate ratio (loop) | "
             + " | ".join(f"gate ratio ({k})" for k in study["kernels"]) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(study["kernels"])]
    for profile, per_output in study["summary"].items():
        for o, q in per_output.items():
            for n in sorted(q["drift_rms"], key=int):
                kern = " | ".join(f"{q[f'gate_{k}'][n]['median']:.3g}" for k in study["kernels"])
                lines.append(f"| {profile} | {o} | {n} | {int(n) // study['block']} | {q['drift_rms'][n]['median']:.3g} | "
                             f"{q['drift_max'][n]['median']:.3g} | {q['gate_loop'][n]['median']:.3g} | {kern} |")
    lines += ["", "## Crossing table (first N whose median gate ratio exceeds 1)", "",
              "| profile | output | candidate | first N failing | median gate ratio at N = largest |", "|---|---|---|---|---|"]
    for r in study["table"]:
        first = "never (on the grid)" if r["first_n_failing"] is None else str(r["first_n_failing"])
        lines.append(f"| {r['profile']} | {r['output']} | {r['candidate']} | {first} | "
                     f"{r['median_gate_at_largest_n']:.3g} (N={r['largest_n']}) |")
    cpu = study["platform"]["cpu"]
    lines += ["", "The gate ratio is the element-wise test's; the gate's aggregate and localized tests (row windows, "
              "the fitted scale) catch a row-wide bias such as a BF16 running sum earlier.", "",
              f"Wall time {study['wall_s']:.0f} s on {study['processes']} processes; CPU {cpu.get('model')} "
              f"({cpu.get('torch_cpu_capability')}), torch {study['platform']['torch']}."]
    return "\n".join(lines) + "\n"


def run(ns=NS, seeds=SEEDS, profiles=PROFILES, processes=0, progress=print, operator: str = OPERATOR) -> dict:
    op = operators.get(operator)
    if not applies(op):
        raise ValueError(f"operator {operator!r}: the loop drift study needs dimensions (M, N, D) and a default "
                         f"schedule with a {LOOP!r} loop")
    tasks = [(p, n, s, operator) for p in profiles for n in ns for s in range(seeds)]
    tasks.sort(key=lambda t: -t[1])
    processes = processes or os.cpu_count() or 1
    start = time.perf_counter()
    points = []
    if processes == 1:
        results = (_worker(t) for t in tasks)
        pool = None
    else:
        import multiprocessing
        pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        results = pool.map(_worker, tasks)
    try:
        for i, point in enumerate(results, 1):
            points.append(point)
            if progress:
                progress(f"loop drift: {i}/{len(tasks)} cases, {time.perf_counter() - start:.0f} s")
    finally:
        if pool is not None:
            pool.shutdown()
    summary = summarize(points)
    study = {"operator": operator, "loop": LOOP, "block": op.schedules.default_schedule().plan.loop(LOOP),
             "queries": QUERIES, "head_dim": HEAD_DIM, "seeds": seeds, "kernels": list(KERNELS),
             "wall_s": time.perf_counter() - start, "processes": processes,
             "platform": {"cpu": manifest.cpu(), "facts": platform_facts.measure(), "torch": torch.__version__},
             "code": manifest.code_version(), "points": points, "summary": summary}
    study["table"] = crossing_table(summary, ["loop", *KERNELS])
    return study


def write(study: dict, folder) -> dict[str, Path]:
    """``loop_drift.json`` and ``loop_drift.md`` in ``folder``; the figure is the report's
    (``python -m reports drift FOLDER`` draws ``loop-drift.png``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "loop_drift.json", "md": folder / "loop_drift.md"}
    paths["json"].write_text(json.dumps(study, indent=1))
    paths["md"].write_text(markdown(study))
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cases.loop_drift", description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--out", required=True, help="directory for loop_drift.json and loop_drift.md")
    parser.add_argument("--ns", type=int, nargs="+", default=list(NS), metavar="N")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES))
    parser.add_argument("--processes", type=int, default=0, help="worker processes (default: one per CPU)")
    args = parser.parse_args(argv)
    if min(args.ns) < 1 or args.seeds < 1:
        print("error: N and seeds must be >= 1", file=sys.stderr)
        return 2
    try:
        out = output_folder(args.out)
    except OutputPathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    study = run(tuple(args.ns), args.seeds, tuple(args.profiles), args.processes)
    paths = write(study, out)
    print(f"wrote {paths['json']}, {paths['md']}; its figure: python -m reports drift {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
