"""The gate's verdicts with derived allowances (``accuracy.derived``) against the hand models'.

The bias + GELU backward (``--operator bias_gelu_backward``), which has no hand model, is judged
by its derived gate alone (both columns the same): its false alarms and catches over seeds.

SwiGLU backward's correct and wrong kernels (those of ``benchmarks/false_alarms.py``) and RMSNorm
backward's (its reference backends and ``operators.rmsnorm_backward.mutants``) run at their
quick profile's small cases over N seeds; each backend x case x output is judged twice by the
matrix's own gate (``compare_case`` without the diagnosis layers, ``gated_verdicts``): with the
operator's hand model, and with the reference and allowances derived from its math
(``operators.<name>.derived``; its own golden and schedules serve the rest,
``accuracy.derived_switch``).

Printed: per backend, the outputs failed under each model, every (case, output) whose verdict
differs, and the detection floors of the first correct backend's cells under each (the smallest
uniform relative error the element-wise test fails, and the fitted scale's threshold, in units of
the operator's rtol; ``benchmarks/cell_floors.py`` reads the same metrics from a run).

    python benchmarks/derived_verdicts.py --seeds 3
    python benchmarks/derived_verdicts.py --first-seed 1 --seeds 4 --correct-only
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import operators  # noqa: E402
from cases.evaluate import declared_schedule  # noqa: E402
from cases.matrix import quick_cases  # noqa: E402
from cases.spec import make_inputs  # noqa: E402
from cell_floors import metric_floors  # noqa: E402
from derived_vs_hand import DERIVED, derived_operator  # noqa: E402
from false_alarms import correct_backends, lean_verdicts, mutant_backends  # noqa: E402
from kernels.registry import Backend, resolve  # noqa: E402
from kernels.runner import run_backend  # noqa: E402

MAX_M = 4097


def backends_of(operator) -> tuple[list, list]:
    """(correct, wrong) backends of the operator."""
    if operator.name == "swiglu_backward":
        return correct_backends(), mutant_backends()
    if operator.name == "bias_gelu_backward":
        from operators.bias_gelu_backward import mutants
        names = [n for n, f in vars(mutants).items() if callable(f) and getattr(f, "__module__", "") == mutants.__name__
                 and not n.startswith("_")]
        return [resolve(operator, n) for n in operator.default_backends], [Backend(n, getattr(mutants, n)) for n in names]
    from operators.rmsnorm_backward import mutants
    return ([resolve(operator, n) for n in operator.backends],
            [Backend(n, getattr(mutants, n)) for n in mutants.KILLS])


def cases_of(operator) -> list:
    small = {"swiglu_backward": (96, 200), "bias_gelu_backward": (200,)}.get(operator.name)
    return sorted((c for c in quick_cases(operator) if c.sizes[0] <= MAX_M and
                   (small is None or c.sizes[1:] == small)), key=lambda c: c.sizes[0])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operator", action="append", default=None)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--correct-only", action="store_true", help="the correct backends alone (false alarms)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.operator or ["swiglu_backward", "rmsnorm_backward"]:
        op = operators.get(name)
        # an operator written as its math has no hand model: its own (derived) gate in both columns
        derived = derived_operator(op) if op.name in DERIVED else op
        correct, wrong = backends_of(op)
        if args.correct_only:
            wrong = []
        failed = {b.name: {"hand": set(), "derived": set()} for b in correct + wrong}
        differ = []
        floors = {}     # (case, output) -> {model: (element-wise floor, fitted-scale floor)} of correct[0]
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for base in cases_of(op):
                spec = replace(base, seed=seed)
                inputs = make_inputs(spec)
                runs = {b.name: run_backend(op, b, inputs) for b in correct + wrong}
                ok = {n: r.outputs for n, r in runs.items() if r.ok}
                scheds = {b.name: declared_schedule(op, b) for b in correct + wrong if b.name in ok}
                hand = lean_verdicts(inputs, ok, scheds, case=spec.id, operator=op)
                auto = lean_verdicts(inputs, ok, scheds, case=spec.id, operator=derived)
                for model, verdicts in (("hand", hand), ("derived", auto)):
                    for o, (_, metrics) in verdicts.get(correct[0].name, {}).items():
                        floors.setdefault((spec.id, o), {})[model] = metric_floors(metrics)
                for b in ok:
                    for o, (v, _) in hand[b].items():
                        d = auto[b][o][0]
                        if not v.passed:
                            failed[b]["hand"].add((spec.id, o))
                        if not d.passed:
                            failed[b]["derived"].add((spec.id, o))
                        if v.passed != d.passed:
                            differ.append((b, spec.id, o, "hand " + ("pass" if v.passed else "fail"),
                                           "derived " + ("pass" if d.passed else "fail"),
                                           (v.message if not v.passed else d.message).splitlines()[0][:160]))
            print(f"{name}: seed {seed} done", file=sys.stderr, flush=True)
        kind = {b.name: "correct" for b in correct} | {b.name: "wrong" for b in wrong}
        print(f"\n### {name}: {args.seeds} seed(s), {len(cases_of(op))} cases\n")
        print("| backend | kind | outputs failed (hand) | outputs failed (derived) |")
        print("|---|---|---|---|")
        for b, f in failed.items():
            print(f"| {b} | {kind[b]} | {len(f['hand'])} | {len(f['derived'])} |")
        print(f"\n{len(differ)} verdicts differ:\n")
        for row in differ:
            print("- " + " | ".join(row))
        print(floor_table(floors, correct[0].name))
    return 0


def floor_table(floors: dict, backend: str) -> str:
    """Per output the largest derived / hand ratio of each floor over the cells and seeds, and the
    cells where a derived floor is more than 10% above the hand one."""
    worst: dict = {}
    above = []
    for (case, o), by_model in sorted(floors.items()):
        if set(by_model) != {"hand", "derived"}:
            continue
        for i, kind in enumerate(("element-wise", "fitted scale")):
            h, d = by_model["hand"][i], by_model["derived"][i]
            if h is None or d is None or h <= 0:
                continue
            ratio = d / h
            key = (o, kind)
            worst[key] = max(worst.get(key, (0.0, None, None, None)), (ratio, case, h, d))
            if ratio > 1.1:
                above.append(f"- {case} {o} {kind}: hand {h:.3g}, derived {d:.3g} rtol ({ratio:.2f}x)")
    lines = [f"\n### Detection floors of {backend}'s cells, derived / hand (rtol units)\n",
             "| output | floor | largest ratio | at | hand | derived |", "|---|---|---|---|---|---|"]
    for (o, kind), (ratio, case, h, d) in sorted(worst.items()):
        lines.append(f"| {o} | {kind} | {ratio:.3f} | {case} | {h:.3g} | {d:.3g} |")
    lines.append(f"\n{len(above)} cells with a derived floor more than 10% above the hand one" + (":" if above else "."))
    return "\n".join(lines + above)


if __name__ == "__main__":
    raise SystemExit(main())
