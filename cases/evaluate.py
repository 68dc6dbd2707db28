"""Evaluate one case: inputs, every selected backend, one golden pass, verdicts, records.

All backends of a case are compared in the same streaming pass, so the goldens of
the M=220000 case are computed once, not once per backend. A backend that fails
or skips is recorded as such; the others are still compared.
"""
from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from accuracy.compare import compare_case
from accuracy.determinism import same_bits, compare_runs
from accuracy.dual import DEFAULT_BENCHMARK, DualVerdict, dual_verdicts
from accuracy.gate import Verdict, gated_verdicts
from accuracy.heads import compare_heads
from cases.spec import CaseSpec, make_inputs
from contract.backend import changed_since, input_digests
from contract.operator import Operator
from contract.schedule import TiledSchedule
from goldens.emulation import served_schedule
from kernels.isolated import (InputsMoved, PendingRun, begin_isolated, can_isolate, finish_isolated, run_isolated,
                              start_children)
from kernels.registry import Backend
from kernels.runner import BackendRun, run_backend


class ScheduleError(TypeError):
    """A backend's ``fn.schedule`` that is not a ``TiledSchedule``."""


def declared_schedule(operator: Operator, backend: Backend) -> TiledSchedule:
    """The schedule a backend declares (``fn.schedule``); the operator's default (SwiGLU: the
    article's) when it declares none. A declaration of another type is an error, never silently
    replaced."""
    expected_type = operator.schedules.TiledSchedule
    sched = getattr(backend.fn, "schedule", None)
    if sched is None:
        return operator.schedules.default_schedule()
    if not isinstance(sched, expected_type):
        name = getattr(sched, "name", None)
        what = f"{type(sched).__name__} {name!r}" if isinstance(name, str) else f"{type(sched).__name__} ({sched!r:.80})"
        raise ScheduleError(f"backend {backend.name!r}: fn.schedule is {what}, not a schedule of operator "
                            f"{operator.name!r} (a {expected_type.__module__}.{expected_type.__name__}; a kernel of "
                            f"another operator?), or no attribute: the operator's default schedule")
    return sched


@dataclass
class CaseOutcome:
    spec: CaseSpec
    runs: dict[str, BackendRun]
    comparison: dict | None = None
    verdicts: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    golden_seconds: float | None = None
    schedules: dict[str, str] = field(default_factory=dict)   # backend -> name of the schedule its goldens replay
    error: str | None = None    # the case itself could not be evaluated (inputs, goldens)
    dual: dict[str, dict[str, DualVerdict]] = field(default_factory=dict)   # backend -> output -> verdict
    dual_missing: str | None = None   # why there is no dual verdict at this case (no benchmark outputs)
    benchmark: str | None = None      # the dual verdict's benchmark backend
    checks_nothing: str | None = None  # why no kernel can fail at this case (its inputs), or None


def _bit_identical(a: dict, b: dict) -> bool:
    return all(bool(same_bits(a[o], b[o]).all()) for o in a)


def _other_values(spec: CaseSpec) -> CaseSpec | None:
    """The case's shapes with other values: the operator's first scale profile (the next seed if the
    case is drawn from it); None for inputs read from a file."""
    if spec.inputs_file is not None:
        return None
    first = next(iter(spec.declaration.scales))
    return CaseSpec(sizes=spec.sizes, scale=first, seed=spec.seed + (first == spec.scale), operator=spec.operator)


def _probe_skip(spec: CaseSpec, b: Backend, skipped: BackendRun, device: str, isolate: bool):
    """A backend may decline a case by its shapes, dtype or device (``BackendUnsupported``), never by
    its values: otherwise a wrong kernel could decline exactly the cases that expose it and the run
    would pass. The backend is called once more on the same shapes with other values; the skip
    stands only if it declines those too (``_judge_skip``). Isolated, the call is only sent: its
    child runs it while the goldens are computed (it changes no golden; at the article's case it
    draws 1.6 GB of other inputs, 5.5 s). Returns what ``_judge_skip`` reads."""
    other = _other_values(spec)
    if other is None:
        return other, skipped
    if isolate and can_isolate(b, device):
        return other, begin_isolated(b, other, device)
    return other, run_backend(spec.declaration, b, make_inputs(other, device))


def _judge_skip(skipped: BackendRun, probe, device: str, cell_timeout: float | None) -> BackendRun:
    """The skip, or an error where the probe's call did not decline (``_probe_skip``)."""
    other, probe = probe
    if isinstance(probe, PendingRun):
        probe = finish_isolated(probe, device, timeout=cell_timeout)
    if other is None or probe.skipped:
        return skipped
    how = "ran" if probe.ok else f"did not decline them ({(probe.error or probe.status or '').splitlines()[0][:200]})"
    return BackendRun(skipped.backend, error=f"{skipped.skipped}; but it {how} on the same shapes with other values "
                                             f"(case {other.id}): a backend may decline a case by its shapes, dtype "
                                             f"or device, not by its values",
                      seconds=skipped.seconds, output=skipped.output)


def evaluate_case(spec: CaseSpec, backends: Sequence[Backend], *, device: str = "cpu",
                  golden_device: str | None = None,
                  chunk_rows: int | None = None, isolate: bool = False,
                  cell_timeout: float | None = None, repeats: int = 1,
                  benchmark: str | None = DEFAULT_BENCHMARK, keep_outputs: bool = False,
                  progress=None) -> CaseOutcome:
    """``isolate``: run each nameable backend in its own child process (``kernels.isolated``), so a
    crash or a hang (past ``cell_timeout`` seconds) costs only its own cell.
    ``repeats``: run each backend that many times; its run records whether the repeats are bit-identical
    to the first (``accuracy.determinism``), and every repeat that is not is gated too: an output
    passes only if it passes in every repeat.
    ``benchmark``: the backend whose errors the dual-benchmark verdict divides by (``accuracy.dual``);
    it must be among ``backends`` for that verdict to exist.
    ``golden_device``: where the goldens and the comparison run when not on ``device`` (the host,
    for a device without FP64: ``cases.devices``); inputs and outputs are moved there once.
    ``keep_outputs``: leave each backend's outputs on its run after the comparison (``--save-failing``
    writes those of failing cells); by default they are dropped as soon as they are compared.
    ``progress``: told each backend call and the comparison's rows (``cases.progress.CaseProgress``).
    A schedule emulation (``goldens.emulation``) is not called: the golden pass serves its outputs,
    the same bits, unless they must be kept or the goldens run on another device."""
    operator = spec.declaration
    served = {} if keep_outputs or golden_device not in (None, device) else {
        b.name: sched for b in backends if (sched := served_schedule(b.fn, operator)) is not None}
    if isolate:     # their children import while the inputs are drawn
        start_children([b for b in backends if b.name not in served and can_isolate(b, device)])
    try:
        inputs = make_inputs(spec, device)
    except Exception as exc:
        return CaseOutcome(spec, {}, error=f"case {spec.id}: inputs could not be made: {type(exc).__name__}: {exc}")
    constant_inputs = all(bool((t == t.reshape(-1)[0]).all()) for t in inputs.values())

    # A backend run in this process gets clones, but it can reach the case's own inputs through the
    # garbage collector and write into them and their clones alike: the goldens would then follow
    # its writes. Their digests, taken once here (about 1 s per GB of inputs), are checked after
    # every in-process call; a backend that changed them fails, and the inputs are made again.
    digests = None

    def run(b: Backend) -> BackendRun:
        nonlocal inputs, digests
        if isolate and can_isolate(b, device):
            return run_isolated(b, spec, device, timeout=cell_timeout, inputs=inputs)
        if digests is None:
            digests = input_digests(inputs)
        result = run_backend(operator, b, inputs)
        changed = changed_since(digests, inputs)
        if changed:
            inputs = make_inputs(spec, device)
            return BackendRun(b.name, error=f"backend {b.name!r} wrote into the case's inputs {changed} through "
                                            f"a reference other than its arguments (found, e.g., through the "
                                            f"garbage collector): a kernel must leave every input untouched",
                              seconds=result.seconds)
        return result

    def called(i: int, b: Backend) -> BackendRun:
        if b.name in served:
            return BackendRun(b.name, served=f"tiled:{served[b.name].name}")
        if progress is None:
            return run(b)
        progress.stage(f"backend {b.name} ({i} of {len(backends)}) called")
        result = run(b)
        how = "returned" if result.ok else result.status or ("skipped" if result.skipped else "raised")
        progress.stage_done(f"backend {b.name} {how}")
        return result

    try:
        runs = {b.name: called(i, b) for i, b in enumerate(backends, 1)}
    except InputsMoved as exc:
        return CaseOutcome(spec, {}, error=f"case {spec.id}: {exc}")
    probes = {b.name: _probe_skip(spec, b, runs[b.name], device, isolate) for b in backends if runs[b.name].skipped}

    def judge_skips() -> None:     # once the golden pass is done (or failed): a probe sent is always collected
        while probes:
            name, probe = probes.popitem()
            runs[name] = _judge_skip(runs[name], probe, device, cell_timeout)

    try:
        repeat_of: dict[str, str] = {}    # "name#repeatI" -> name, for repeats that differ from the first run
        ok = {name: run.outputs for name, run in runs.items() if run.ok}
        for b in backends:
            first = runs[b.name]
            if repeats < 2 or not first.ok:
                continue
            differing = []
            for i in range(2, repeats + 1):
                again = run(b)
                if not again.ok:
                    first.error = f"repeat {i} of {repeats}: {again.error or again.skipped}"
                    first.status, first.outputs = again.status, None
                    del ok[b.name]
                    break
                if not _bit_identical(first.outputs, again.outputs):
                    differing.append((i, again.outputs))
            else:
                first.determinism = {**compare_runs([first.outputs] + [o for _, o in differing]), "repeats": repeats,
                                     "differing_repeats": [i for i, _ in differing]}
                for i, outputs in differing:
                    ok[f"{b.name}#repeat{i}"] = outputs
                    repeat_of[f"{b.name}#repeat{i}"] = b.name
        outcome = CaseOutcome(spec, runs, benchmark=benchmark)
        schedules = {}
        for b in backends:
            if b.name in ok or b.name in served:
                try:
                    schedules[b.name] = declared_schedule(operator, b)
                except ScheduleError as exc:     # that backend's cell fails; the others are compared
                    runs[b.name].error, runs[b.name].outputs, runs[b.name].served = str(exc), None, None
                    ok.pop(b.name, None)
                    served.pop(b.name, None)
        for key, name in repeat_of.items():
            if name in schedules:
                schedules[key] = schedules[name]
            else:
                del ok[key]
        outcome.schedules = {name: sched.name for name, sched in schedules.items() if name not in repeat_of}
        start = time.perf_counter()
        try:
            if golden_device is not None and golden_device != device:
                inputs = {k: v.to(golden_device) for k, v in inputs.items()}
                ok = {name: {o: t.to(golden_device) for o, t in outs.items()} for name, outs in ok.items()}
            if operator.heads is None:
                outcome.comparison = compare_case(operator, inputs, ok, schedules, served=served,
                                                  chunk_rows=chunk_rows, progress=progress)
            else:   # each head judged on its own (``accuracy.heads``)
                heads = compare_heads(operator, inputs, ok, schedules, case=spec.id, served=served,
                                      chunk_rows=chunk_rows, progress=progress)
                outcome.comparison = heads.comparison
        except Exception as exc:  # a golden that cannot be computed fails every cell of the case, loudly
            outcome.error = f"case {spec.id}: goldens/compare failed: {type(exc).__name__}: {exc}"
            return outcome
        finally:
            for run in runs.values() if not keep_outputs else ():
                run.outputs = None     # the outputs of M=220000 are GBs; keep only the numbers
            del inputs, ok
            gc.collect()
            judge_skips()
        outcome.golden_seconds = time.perf_counter() - start
        outcome.checks_nothing = _checks_nothing(spec, constant_inputs, outcome.comparison["ideal"])
        for name in outcome.comparison["backends"]:
            outcome.verdicts[name] = gated_verdicts(operator, outcome.comparison["backends"][name], case=spec.id,
                                                    backend=name,
                                                    attribution=outcome.comparison["attribution"][name]
                                                    ) if operator.heads is None else heads.verdicts[name]
        _fold_repeats(outcome, repeat_of, repeats)
        if benchmark is not None:
            outcome.dual, outcome.dual_missing = (
                dual_verdicts(outcome.comparison, benchmark, case=spec.id, runs=runs) if operator.heads is None
                else heads.dual(benchmark, runs))
        return outcome
    except InputsMoved as exc:     # in a repeat's call
        return CaseOutcome(spec, runs, error=f"case {spec.id}: {exc}")
    finally:
        judge_skips()


def _checks_nothing(spec: CaseSpec, constant_inputs: bool, ideal: Mapping) -> str | None:
    """A case at which a wrong kernel passes as surely as a right one: every input constant (every
    output is then constant: a shifted, permuted or mis-tiled kernel gives the same values), or
    every output's FP64 reference zero (an all-zero kernel is exact)."""
    if constant_inputs:
        return (f"case {spec.id} checks nothing: every input is constant, so every output is too and a shifted, "
                f"permuted or mis-tiled kernel gives the same values; choose inputs that vary")
    if all(m.get("golden_max_abs") == 0 for m in ideal.values()):
        return (f"case {spec.id} checks nothing: every output's reference is zero, so an all-zero kernel is exact; "
                f"choose inputs that give non-zero outputs")
    return None


def _fold_repeats(outcome: CaseOutcome, repeat_of: Mapping[str, str], repeats: int) -> None:
    """An output of a backend takes the verdict (and metrics) of its first failing repeat."""
    comparison = outcome.comparison
    for key, name in repeat_of.items():
        for o, v in outcome.verdicts.pop(key).items():
            if outcome.verdicts[name][o].passed and not v.passed:
                i = key.rsplit("#repeat", 1)[1]
                outcome.verdicts[name][o] = replace(
                    v, message=f"Repeat {i} of {repeats} (not bit-identical to the first run): " + v.message)
                comparison["backends"][name][o] = comparison["backends"][key][o]
        comparison["backends"].pop(key)
        comparison["attribution"].pop(key)


def _gate_status(gate: str, absolute_status: str, absolute_message: str, dual: DualVerdict | None,
                 dual_missing: str | None) -> tuple[str, str]:
    """(status, message) of a gated output under ``gate`` (absolute, dual or both)."""
    if gate == "absolute":
        return absolute_status, absolute_message
    dual_message = dual.message if dual is not None else (
        f"Dual-benchmark verdict unavailable: {dual_missing or 'no benchmark'}")
    dual_passed = dual is not None and dual.passed
    if gate == "dual":
        return ("pass" if dual_passed else "fail"), dual_message
    if dual_passed:
        return absolute_status, absolute_message
    return "fail", absolute_message + "\n\n" + dual_message


def records_for(outcome: CaseOutcome, backend: str, judge_of=None, gate: str = "absolute") -> list[dict]:
    """Result records of one backend at one case (one per output x golden, or one for a skip/error).
    ``judge_of(output, golden, passed, metrics)``: the ``cases.expectations.Judgement`` of a gated output
    (known failures are judged on the absolute verdict). ``gate``: which verdict sets the status:
    ``absolute`` (the operator's criterion), ``dual`` (``accuracy.dual``) or ``both``."""
    spec = outcome.spec
    if backend == outcome.benchmark and gate != "absolute":
        # its dual ratios are to itself, 1 whatever its numbers: the absolute gate alone judges it
        gate = "absolute"
    base = {"case": spec.id, "case_spec": spec.asdict(), "backend": backend,
            "schedule": outcome.schedules.get(backend)}
    run = outcome.runs.get(backend)
    if run is not None and run.output:
        base["backend_output"] = run.output       # what it printed during its call, capped
    if run is not None and run.served:
        base["served"] = run.served               # not called: its outputs are this golden layer
    if outcome.error or run is None or not (outcome.comparison and backend in outcome.comparison["backends"]):
        status = ("skipped" if run is not None and run.skipped else
                  run.status if run is not None and run.status else "error")
        message = outcome.error or (run.skipped or run.error if run else "backend did not run")
        return [{**base, "output": "*", "golden": "*", "status": status, "message": message,
                 "seconds": run.seconds if run else None}]
    records = []
    metrics = outcome.comparison["backends"][backend]
    attribution = outcome.comparison["attribution"][backend]
    for output, per_golden in metrics.items():
        verdict = outcome.verdicts[backend][output]
        for golden, m in per_golden.items():
            gated = golden == verdict.golden
            rec = {**base, "output": output, "golden": golden, "gated": gated, "metrics": m,
                   "seconds": run.seconds, "attribution": attribution[output]}
            if run.determinism is not None:
                rec["determinism"] = {"repeats": run.determinism["repeats"],
                                      "bit_identical": run.determinism["bit_identical"],
                                      "differing_repeats": run.determinism["differing_repeats"],
                                      **run.determinism["outputs"].get(output, {})}
            if gated:
                judgement = judge_of(output, golden, verdict.passed, m) if judge_of else None
                absolute_status = judgement.status if judgement else ("pass" if verdict.passed else "fail")
                absolute_message = verdict.message
                if judgement is not None and judgement.note:
                    absolute_message += "\n" + judgement.note
                dual = outcome.dual.get(backend, {}).get(output)
                rec["gate"] = gate
                rec["absolute_status"] = absolute_status
                rec["status"], rec["message"] = _gate_status(gate, absolute_status, absolute_message, dual,
                                                             outcome.dual_missing)
                if outcome.checks_nothing:      # no verdict here can be a pass
                    rec["checks_nothing"] = outcome.checks_nothing
                    rec["status"], rec["message"] = "fail", outcome.checks_nothing + "\n\n" + rec["message"]
                rec["dual"] = None if dual is None else {
                    "benchmark": dual.benchmark, "passed": dual.passed, "ratios": dual.ratios, "failed": dual.failed,
                    "ulp_share": dual.ulp_share, "ulp_share_benchmark": dual.ulp_share_benchmark,
                    "ulp_rule_passed": dual.ulp_rule_passed, "nonfinite_consistent": dual.nonfinite_consistent,
                    "vacuous": dual.vacuous, "message": dual.message}
                if dual is None and outcome.dual_missing:
                    rec["dual_missing"] = outcome.dual_missing
                rec["vacuous_seed_gate"] = verdict.vacuous_seed_gate
                rec["atol_capped"] = verdict.atol_capped
                if judgement is not None:
                    if judgement.entry is not None:
                        rec["expected_reason"] = judgement.entry.reason
                        rec["expected_source"] = judgement.entry.source
                    if judgement.excess:
                        rec["expected_exceeded"] = [vars(x) for x in judgement.excess]
            else:
                rec["status"] = "info"
            records.append(rec)
    return records


def golden_records(outcome: CaseOutcome) -> list[dict]:
    """The goldens compared with each other at this case (storage and tile-order error)."""
    if not outcome.comparison:
        return []
    spec = outcome.spec
    drift = outcome.comparison.get("tile_drift", {})
    records = []
    for pair, per_output in outcome.comparison["goldens"].items():
        for output, m in per_output.items():
            rec = {"case": spec.id, "case_spec": spec.asdict(), "backend": f"golden:{pair.layer}",
                   "output": output, "golden": pair.reference, "status": "info", "metrics": m,
                   "seconds": outcome.golden_seconds}
            if output in drift.get(pair.layer, {}):
                rec["tile_drift"] = drift[pair.layer][output]     # per tile, against the global sum of the same partials
            records.append(rec)
    return records
