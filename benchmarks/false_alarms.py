"""False alarms and catch rates of the gate over seeds.

SwiGLU backward's correct kernels (``operators/swiglu_backward/kernels/``), none declaring
anything the gate reads (torch-eager; the golden's tiled emulation of the hardened schedule
served as a kernel; the plain plug-ins of ``kernels.plain``: FP32 math with dg/dfc stored, the
same with db summed before the store, and one that stores every intermediate as PyTorch autograd
does; the per-tile loop with dx's products stored in BF16), run over N seeds of the quick
profile's small cases; every gate failure is a false alarm unless it is a known, explained
failure (the operator's ``expectations/``), counted apart. The wrong kernels of
``kernels.mutants`` and ``kernels.plain`` (round toward zero stores, BF16 math that declares
BF16 math, a uniform 1/128 error) run over the same seeds; a wrong kernel is caught at a seed when any case of the set fails any of its outputs
(cases are tried cheapest first and a caught kernel is not run on the remaining cases of
that seed).

Restriction, for time (2 shared cores): the quick profile's cases at (K, N) = (96, 200) with
M <= 4097 (13 of its 19 cases, the four range cases among them; the K,N = 512,1024 cases and M = 220000 are left out: the
article's case takes minutes per seed on this machine).

The gate is the matrix's own (``accuracy.compare.compare_case`` and ``accuracy.gate``) without
the diagnosis layers (``diagnose=False``), which the verdict does not read;
``tests/mutants/test_gate_power.py`` checks that these verdicts equal ``evaluate_case``'s.

    python benchmarks/false_alarms.py                       # 200 seeds, markdown table on stdout
    python benchmarks/false_alarms.py --seeds 20 --json out.json
    python benchmarks/false_alarms.py --operator attention --seeds 100 --json a.json   # attention's
    python benchmarks/false_alarms.py --operator attention_forward --seeds 200 --json f.json
    python benchmarks/false_alarms.py --acceptance-case --first-seed 1 --seeds 2 \
        --kernels torch-eager,tiled_emulation_hardened,tiled_dx_products_bf16    # the article's case
    python benchmarks/false_alarms.py --derived --seeds 100 --json d.json    # SwiGLU's derived gate

``--derived``: the same sweep judged by the gate derived from the operator's math and rounding
points (``operators/swiglu_backward/derived.py``, ``accuracy.derived``) in place of its hand model.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

# A sweep is split over processes that share the cores (--first-seed): their OpenMP threads must
# sleep while they wait (``runs.idle_threads``). Two processes on 2 cores took 90-125 s per seed
# with the default spinning and 22 s each with PASSIVE (seeds 28-33, 2026-12-05, AMD EPYC, AVX2).
# libgomp reads it once, when it loads: before torch. A value set by the user is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import operators                                                         # noqa: E402
from accuracy.compare import REFERENCE, compare_case                     # noqa: E402
from accuracy.gate import Verdict, gated_verdicts                        # noqa: E402
from accuracy.heads import compare_heads                                 # noqa: E402
from cases import expectations                                           # noqa: E402
from cases.evaluate import declared_schedule                             # noqa: E402
from cases.matrix import acceptance_case, quick_cases                    # noqa: E402
from cases.spec import CaseSpec, make_inputs                             # noqa: E402
from derived_vs_hand import DERIVED, derived_operator                    # noqa: E402
from contract.operator import Operator                                   # noqa: E402
from contract.schedule import TiledSchedule                              # noqa: E402
from goldens.stream import DEFAULT_CHUNK_ROWS                            # noqa: E402
from kernels.registry import Backend, resolve                            # noqa: E402
from kernels.runner import run_backend                                   # noqa: E402
from operators.swiglu_backward import OPERATOR as SWIGLU                 # noqa: E402
from operators.swiglu_backward.kernels import plain                      # noqa: E402
from operators.swiglu_backward.kernels.mutants import CORRECT, MUTANTS   # noqa: E402
from runs import platform_facts, seed_stats                              # noqa: E402
from runs.results import to_json                                         # noqa: E402

SMALL_KN = (96, 200)
MAX_M = 4097


# Attention's sweep: the quick profile's cases up to M = 1025 (the 2048-query cases take ~20 s each
# with four backends here), its correct backends (the Triton kernel in triton's interpreter), its
# wrong kernels (``operators.attention.mutants``)
ATTENTION = ("attention", "attention_causal", "attention_forward", "attention_forward_causal", "attention_heads",
             "attention_heads_causal", "attention_forward_heads", "attention_forward_heads_causal")
ATTENTION_MAX_M = 1025


def small_cases(operator: str = "swiglu_backward") -> list[CaseSpec]:
    """SwiGLU: the quick profile's (96, 200) cases with M <= 4097; attention: its quick cases with
    M <= 1025; cheapest first."""
    if operator in ATTENTION:
        op = operators.get(operator)
        return sorted((c for c in quick_cases(op) if c.sizes[0] <= ATTENTION_MAX_M), key=lambda c: math.prod(c.sizes))
    return sorted((c for c in quick_cases(SWIGLU) if (c.k, c.n) == SMALL_KN and c.m <= MAX_M), key=lambda c: c.m)


def correct_backends(operator: str = "swiglu_backward") -> list[Backend]:
    """The correct kernels above. ``tiled_fp32`` is left out: it is bit-identical to the tiled
    emulation (tests/mutants/test_gate_power.py), so its verdicts are too. Attention: its default
    backends."""
    if operator in ATTENTION:
        op = operators.get(operator)
        return [resolve(op, n) for n in op.default_backends]
    return ([resolve(SWIGLU, "torch-eager"), Backend("tiled_emulation_hardened", CORRECT["tiled_emulation_hardened"]),
             Backend("tiled_dx_products_bf16", CORRECT["tiled_dx_products_bf16"])]
            + [Backend(n, f) for n, f in plain.CORRECT.items()])


def mutant_backends(operator: str = "swiglu_backward") -> list[Backend]:
    if operator in ATTENTION:
        from operators.attention import mutants
        op = operators.get(operator)
        if op.heads is not None:
            kills = mutants.FORWARD_HEAD_KILLS if operator.startswith("attention_forward") else mutants.HEAD_KILLS
            return [resolve(op, f"operators.attention.mutants:{n}") for n, (_, (of, _)) in kills.items()
                    if of == operator]
        if operator.startswith("attention_forward"):
            return [resolve(op, mutants.forward_kernel_path(n, operator))
                    for n, (_, (of, _)) in mutants.FORWARD_KILLS.items() if of == operator]
        return [resolve(op, f"operators.attention.mutants:{n}") for n, (_, (of, _)) in mutants.KILLS.items()
                if of == operator]
    return [Backend(n, f) for n, f in {**MUTANTS, **plain.WRONG, **plain.LOCALIZED_BUGS}.items()]


def lean_verdicts(inputs: Mapping[str, torch.Tensor], outputs: Mapping[str, Mapping[str, torch.Tensor]],
                  schedules: Mapping[str, TiledSchedule], *, case: str,
                  chunk_rows: int = DEFAULT_CHUNK_ROWS,
                  operator: Operator = SWIGLU) -> dict[str, dict[str, tuple[Verdict, dict]]]:
    """The gate's verdict and gated metrics of each backend x output, as ``evaluate_case``
    computes them, without the diagnosis layers (``operator``: whose case it is; the backends
    of this study are SwiGLU's)."""
    if operator.heads is not None:     # each head on its own (``accuracy.heads``), as the matrix judges it
        heads = compare_heads(operator, inputs, outputs, schedules, case=case, chunk_rows=chunk_rows, diagnose=False)
        return {b: {o: (v, heads.comparison["backends"][b][o][REFERENCE]) for o, v in verdicts.items()}
                for b, verdicts in heads.verdicts.items()}
    comparison = compare_case(operator, inputs, outputs, schedules, chunk_rows=chunk_rows, diagnose=False)
    result = {}
    for b, metrics in comparison["backends"].items():
        verdicts = gated_verdicts(operator, metrics, case=case, backend=b)
        result[b] = {o: (v, metrics[o][REFERENCE]) for o, v in verdicts.items()}
    return result


def run_case(spec: CaseSpec, backends: Sequence[Backend], judge: Operator | None = None) -> dict:
    """{backend: {"error": str} | {"verdicts": {output: (Verdict, metrics)}}} at one case;
    ``judge``: the operator whose golden and gate judge it (default: the case's own)."""
    operator = spec.declaration
    inputs = make_inputs(spec)
    runs = {b.name: run_backend(operator, b, inputs) for b in backends}
    ok = {name: r.outputs for name, r in runs.items() if r.ok}
    schedules = {b.name: declared_schedule(operator, b) for b in backends if b.name in ok}
    verdicts = lean_verdicts(inputs, ok, schedules, case=spec.id, operator=judge or operator) if ok else {}
    return {name: ({"verdicts": verdicts[name]} if name in verdicts else {"error": r.error or r.skipped})
            for name, r in runs.items()}


def scale_excess(metrics: Mapping) -> float | None:
    """How far the fitted scale goes past its legitimate paths' bias, in units of the noise band
    the test allows beyond it: (|beta| - bias) / (allowed - bias), allowed = bias + 7.5 sigma. A
    correct kernel's stays below 1 (it fails above); a kernel on a biased path sits near 0 however
    large the bias, so this, not |beta| / allowed, says how much of the noise band it used."""
    agg = metrics.get("aggregate") or {}
    beta, bias, allowed = agg.get("scale_beta"), agg.get("scale_bias"), agg.get("scale_allowed")
    if beta is None or bias is None or not allowed or allowed <= bias:
        return None
    return (abs(beta) - bias) / (allowed - bias)


def study(seeds: int, *, first_seed: int = 0, progress=None, deadline: float | None = None,
          checkpoint=None, operator: str = "swiglu_backward", acceptance: bool = False,
          kernels: Sequence[str] | None = None, derived: bool = False) -> dict:
    """Runs the sweep; returns records of the correct backends, catches of the mutants, timings.
    ``acceptance``: the operator's acceptance case instead of the small cases, the correct
    backends only; ``kernels``: only these correct backends (by name); ``derived``: judged by the
    gate derived from the operator's math instead of its hand model."""
    if operator in ATTENTION:
        os.environ["TRITON_INTERPRET"] = "1"     # the triton-flash backend in triton's interpreter
    cases = [acceptance_case(operators.get(operator))] if acceptance else small_cases(operator)
    correct, mutants = correct_backends(operator), ([] if acceptance else mutant_backends(operator))
    if kernels:
        unknown = set(kernels) - {b.name for b in correct}
        if unknown:
            raise ValueError(f"no correct backend named {sorted(unknown)}; they are {[b.name for b in correct]}")
        correct = [b for b in correct if b.name in kernels]
    known = expectations.load(operators.get(operator))
    if derived and operator not in DERIVED:
        raise ValueError(f"{operator} has no hand model beside its math: its gate is already the derived one")
    judge = derived_operator(operators.get(operator)) if derived else None
    facts = platform_facts.measure("cpu")
    records, catches = [], {b.name: {} for b in mutants}
    first_case = {b.name: {} for b in mutants}
    start = time.perf_counter()
    done = 0
    for seed in range(first_seed, first_seed + seeds):
        if deadline is not None and time.perf_counter() > deadline:
            break
        remaining = list(mutants)
        for base in cases:
            spec = replace(base, seed=seed)
            result = run_case(spec, correct + remaining, judge)
            for b in correct:
                res = result[b.name]
                if "error" in res:
                    records.append({"backend": b.name, "case": spec.id, "output": "*", "status": "error",
                                    "message": res["error"], "case_spec": spec.asdict()})
                    continue
                for o, (v, mtr) in res["verdicts"].items():
                    status = expectations.judge_output(known, b.name, spec.id, o, REFERENCE, v.passed, mtr,
                                                       facts=facts).status
                    rec = {"backend": b.name, "case": spec.id, "case_spec": spec.asdict(), "output": o,
                           "golden": REFERENCE, "gated": True, "status": status,
                           "metrics": {"ulp_p99": mtr["ulp_p99"], "ulp_max": mtr["ulp_max"],
                                       "mismatches": mtr["mismatches"], "max_excess_index": mtr["max_excess_index"],
                                       "scale_excess": scale_excess(mtr)}}
                    if not v.passed:
                        rec["message"] = v.message
                    records.append(rec)
            still = []
            for b in remaining:
                res = result[b.name]
                failed = ["<contract: " + str(res["error"])[:80] + ">"] if "error" in res else \
                    [o for o, (v, _) in res["verdicts"].items() if not v.passed]
                if failed:
                    catches[b.name][seed] = True
                    first_case[b.name][seed] = (base.id.rsplit("-s", 1)[0], failed)
                else:
                    still.append(b)
            remaining = still
        for b in remaining:
            catches[b.name][seed] = False
        done += 1
        if progress:
            progress(seed, time.perf_counter() - start)
        res = {"seeds": done, "cases": [c.id.rsplit("-s", 1)[0] for c in cases], "records": records,
               "catches": catches, "first_case": first_case, "seconds": time.perf_counter() - start,
               "correct": [b.name for b in correct], "operator": operator,
               "gate": "derived" if derived or operator in ATTENTION else "hand"}
        if checkpoint:
            checkpoint(res)
    return res


def _g(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def table(res: dict) -> str:
    """Markdown: false alarms per correct backend x case, then catch rates per mutant."""
    summary = seed_stats.summarize(res["records"])
    lines = [f"Gate: {res.get('gate', 'hand')} allowances. Seeds: {res['seeds']} per case; cases: {', '.join(res['cases'])}; "
             f"{res['seconds']:.0f} s on this machine.", "",
             "### False alarms of correct kernels (the matrix's gate)", "",
             "| backend | case | seeds | failures (any output) | known, explained | Wilson 95% upper bound | "
             "worst output p99 ULP (median / max over seeds) | fitted scale: max (abs(beta) - bias) / 7.5 sigma |",
             "|---|---|---|---|---|---|---|---|"]
    per_case: dict = {}
    for (b, case, o), g in summary["groups"].items():
        per_case.setdefault((b, case), []).append((o, g))
    expected_fail = {(r["backend"], seed_stats.strip_seed(r["case"]), r["case_spec"]["seed"])
                     for r in res["records"] if r["status"] == "expected_failure"}
    for (b, case), groups in per_case.items():
        seeds = max(g["seeds"] for _, g in groups)
        failing = set()
        for _, g in groups:
            failing.update(g["failing_seeds"])
        known = {s for s in failing if (b, case, s) in expected_fail}
        unknown = failing - known
        _, hi = seed_stats.wilson_interval(len(unknown), seeds)
        o_worst, g_worst = max(groups, key=lambda og: og[1]["p99_ulp"]["max"] or 0)
        p = g_worst["p99_ulp"]
        ratios = [(r["metrics"].get("scale_excess"), r["output"]) for r in res["records"]
                  if r["backend"] == b and seed_stats.strip_seed(r["case"]) == case
                  and r.get("metrics", {}).get("scale_excess") is not None]
        head = max(ratios, default=None)
        lines.append(f"| {b} | {case} | {seeds} | {len(unknown)} | {len(known)} | {hi:.3f} | "
                     f"{o_worst}: {_g(p['median'])} / {_g(p['max'])} | "
                     f"{'-' if head is None else f'{head[1]}: {head[0]:.3f}'} |")
    lines += ["", "### Catch rate of wrong kernels (caught = some case fails some output at that seed)", "",
              "| wrong kernel | caught / seeds | rate | Wilson 95% interval | first catching case (most seeds) | "
              "outputs failing there |", "|---|---|---|---|---|---|"]
    for name, by_seed in res["catches"].items():
        cr = seed_stats.catch_rate(by_seed)
        firsts: dict = {}
        for case, outs in res["first_case"][name].values():
            firsts.setdefault(case, []).append(outs)
        top = max(firsts.items(), key=lambda kv: len(kv[1]), default=(None, []))
        outs = sorted({o for lst in top[1] for o in lst})
        rate = f"{cr['rate']:.3f}" if cr["rate"] is not None else "-"
        lines.append(f"| {name} | {cr['caught']} / {cr['seeds']} | {rate} | [{cr['ci'][0]:.3f}, {cr['ci'][1]:.3f}] | "
                     f"{top[0]} ({len(top[1])}) | {', '.join(outs)} |")
    fails = [r for r in res["records"] if r["status"] in ("fail", "error")]
    if fails:
        lines += ["", f"### Unexplained failures of correct kernels ({len(fails)} output verdicts)", ""]
        for r in fails[:10]:
            lines += ["```", r.get("message", "")[:1500], "```"]
    return "\n".join(lines)


def merge(parts: Sequence[dict]) -> dict:
    """One result from the JSON of split sweeps; their seeds must be disjoint and their cases and
    correct kernels the same (a seed counted twice, or a sweep of other cases, would be refused by
    nothing else and change the table's counts)."""
    res = {"seeds": 0, "cases": parts[0]["cases"], "records": [], "catches": {}, "first_case": {},
           "seconds": 0.0, "correct": parts[0]["correct"], "gate": parts[0].get("gate", "hand")}
    seen: set = set()
    for i, part in enumerate(parts):
        if part["cases"] != res["cases"] or part["correct"] != res["correct"] or \
                part.get("gate", "hand") != res["gate"]:
            raise ValueError(f"sweep {i} ran other cases, correct kernels or gate than sweep 0: not one table")
        seeds = {str(seed) for by_seed in part["catches"].values() for seed in by_seed}
        if seeds & seen:
            raise ValueError(f"sweep {i} repeats seeds {sorted(seeds & seen, key=int)[:10]}: each seed once")
        seen |= seeds
        res["seeds"] += part["seeds"]
        res["seconds"] = max(res["seconds"], part["seconds"])
        res["records"] += part["records"]
        for key in ("catches", "first_case"):
            for name, by_seed in part[key].items():
                res[key].setdefault(name, {}).update(by_seed)
    return res


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+N-1 (to split a sweep)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                        help="print the table of several --json results (split sweeps) instead of running")
    parser.add_argument("--json", default=None, help="write the raw result (records, catches) here")
    parser.add_argument("--budget-s", type=float, default=None, help="stop starting new seeds after this many seconds")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    parser.add_argument("--operator", default="swiglu_backward", choices=("swiglu_backward", *ATTENTION),
                        help="whose correct and wrong kernels (default: the SwiGLU backward's)")
    parser.add_argument("--acceptance-case", action="store_true",
                        help="the operator's acceptance case (SwiGLU: M=220000, minutes a seed), correct kernels only")
    parser.add_argument("--derived", action="store_true",
                        help="judge by the gate derived from the operator's math (accuracy.derived), not its hand model")
    parser.add_argument("--kernels", default=None,
                        help="comma-separated correct kernels to run (the acceptance case holds every kernel's "
                             "outputs: six SwiGLU kernels need about 20 GB, three 10-18 GB)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    deadline = time.perf_counter() + args.budget_s if args.budget_s else None

    def progress(seed, seconds):
        print(f"seed {seed} done at {seconds:.0f} s", file=sys.stderr, flush=True)

    if args.merge:
        res = merge([json.loads(Path(p).read_text()) for p in args.merge])
        print(table(res))
        return 0
    def checkpoint(res):
        if args.json:
            tmp = Path(args.json + ".tmp")
            tmp.write_text(json.dumps(to_json(res), default=str))
            tmp.replace(args.json)

    try:
        res = study(args.seeds, first_seed=args.first_seed, progress=progress, deadline=deadline,
                    checkpoint=checkpoint, operator=args.operator, acceptance=args.acceptance_case,
                    kernels=args.kernels.split(",") if args.kernels else None, derived=args.derived)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
