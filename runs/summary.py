"""The run on one screen: per backend its cells by verdict, each backend's outputs at the
operator's acceptance case, what the acceptance gate would miss, where the time went. Data from the merged records only; the plugin prints the lines."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from contract.records import records_of, typed

# Worst first: a cell's verdict is the worst of its outputs' (an error hides nothing below it).
CELL_ORDER = ("crashed", "timed_out", "error", "fail", "unexpected_pass", "expected_failure", "skipped", "pass")
LABELS = {"pass": "passed", "fail": "failed", "expected_failure": "known failures",
          "unexpected_pass": "known failures that passed", "skipped": "skipped", "error": "errors",
          "crashed": "crashed", "timed_out": "timed out"}


def cell_verdicts(records: Iterable[Mapping]) -> dict[tuple[str, str], str]:
    """(case, backend) -> the worst status among the cell's gated records (or its one error record)."""
    cells: dict[tuple[str, str], str] = {}
    for r in typed(records):
        if r.is_golden or not (r.gated or r.output == "*"):
            continue
        status = r.status
        if status not in CELL_ORDER:
            continue
        key = (r.case, r.backend)
        if key not in cells or CELL_ORDER.index(status) < CELL_ORDER.index(cells[key]):
            cells[key] = status
    return cells


def backend_lines(records: Iterable[Mapping]) -> list[str]:
    per_backend: dict[str, Counter] = {}
    for (_, backend), status in cell_verdicts(records).items():
        per_backend.setdefault(backend, Counter())[status] += 1
    lines = []
    for backend in sorted(per_backend):
        counts = per_backend[backend]
        parts = [f"{counts[s]} {LABELS[s]}" for s in reversed(CELL_ORDER) if counts[s]]
        lines.append(f"{backend}: {', '.join(parts)} (of {sum(counts.values())} cells)")
    return lines


def acceptance_outputs(records: Iterable[Mapping], case_id: str,
                       missing: Iterable[Mapping] = ()) -> dict[str, dict[str, list[str]]]:
    """At the case ``case_id``: backend -> status -> its outputs with that verdict (a cell that did
    not run: its status -> the first line of its message; a planned cell without a record, from the
    run's ``missing`` list: "missing")."""
    outputs: dict[str, dict[str, list[str]]] = {}
    for r in typed(records):
        if r.case != case_id or r.is_golden:
            continue
        if r.gated:
            outputs.setdefault(r.backend, {}).setdefault(r.status, []).append(r.output)
        elif r.output == "*" and r.status in CELL_ORDER:   # the cell did not run
            why = str(r.message).splitlines()[0] if r.message else ""
            outputs.setdefault(r.backend, {})[r.status] = [why] if why else []
    for cell in missing:
        if cell.get("case") == case_id and cell.get("backend") not in outputs:
            outputs[cell.get("backend")] = {"missing": []}
    return outputs


def emulations(records: Iterable[Mapping], case_id: str) -> dict[str, str]:
    """At ``case_id``, the backends that were not called but served by the golden pass (a declared
    schedule's emulation, ``goldens.emulation``): backend -> the golden layer that served it."""
    return {r.backend: str(r.served) for r in typed(records)
            if r.case == case_id and not r.is_golden and r.gated and r.given("served") and r.served}


# at the acceptance case a known failure is still a failure: said as one
ACCEPTANCE_LABELS = {**LABELS, "expected_failure": "failed as expected", "unexpected_pass": "passed, expected to fail",
                     "missing": "missing (no record: a crashed or killed worker)"}
ACCEPTANCE_ORDER = (*CELL_ORDER[:-1], "missing", CELL_ORDER[-1])


def verdict_parts(by_status: Mapping[str, list[str]]) -> list[tuple[str, str, list[str]]]:
    """One backend's outputs at a case as (status, label, names), worst first, the passing last."""
    if set(by_status) == {"pass"}:
        return [("pass", f"passed all {len(by_status['pass'])} outputs", [])]
    parts = [(s, ACCEPTANCE_LABELS[s], by_status[s]) for s in ACCEPTANCE_ORDER if s in by_status and s != "pass"]
    if "pass" in by_status:
        parts.append(("pass", "passed", by_status["pass"]))
    return parts


def acceptance_lines(records: Iterable[Mapping], case_id: str, missing: Iterable[Mapping] = (),
                     operator: str | None = None) -> list[str]:
    """At the operator's acceptance case, each backend's outputs by verdict: the run's headline
    (the reference schedules' emulations beside the kernels). ``operator``: its name, for the
    command that runs the case where this run did not."""
    outputs = acceptance_outputs(records, case_id, missing)
    if not outputs:
        command = f" (pytest -n auto cases/ --operator {operator} runs it)" if operator else ""
        return [f"the acceptance case {case_id} is not in this run{command}"]
    lines = [f"at the acceptance case {case_id}:"]
    for backend, by_status in outputs.items():
        parts = [label if not names else f"{label} {', '.join(names)}" if status == "pass"
                 else f"{label} ({', '.join(names)})" for status, label, names in verdict_parts(by_status)]
        lines.append(f"  {backend}: {'; '.join(parts)}")
    return lines


def drift_line(study: Mapping) -> str:
    """Where each schedule's reductions cross the gate in a drift study (``cases.drift_study``)."""
    rows = study.get("table") or []
    crossing = [r for r in rows if not str(r.get("crossing", "")).startswith("not up to")]
    crossed = [f"{r['schedule']} {r['family']} {r['crossing'].split(' (')[0]}" for r in crossing]
    never = sorted({r["schedule"] for r in rows} - {r["schedule"] for r in crossing})
    cfg = study.get("config") or {}
    dims = (study.get("axes") or {}).get("dims") or []      # the sizes after M
    shape = ", ".join(f"{d}={v}" for d, v in zip(dims, cfg.get("shape") or ()))
    head = (f"drift study ({cfg.get('seeds')} seeds, scale profile {', '.join(cfg.get('profiles') or ())}"
            + (f", {shape}" if shape else "") + "): ")
    parts = [("crosses the gate: " + ", ".join(crossed)) if crossed else "no schedule crosses the gate"]
    if never:
        parts.append(f"never up to M={max(cfg.get('ms') or [0]):,}: {', '.join(never)}")
    return head + "; ".join(parts)


def vacuity_line(records: Iterable[Mapping], acceptance: str | None = None) -> str | None:
    """Outputs where the operator's acceptance gate would pass an all-zero output, and at how many
    of the cases that gated them; with ``acceptance`` (its case id), which at that case."""
    by_case: dict[tuple, bool] = {}      # (case, output) -> vacuous: a property of the case's reference
    for r in typed(records):
        if r.gated and not r.is_golden and r.given("vacuous_seed_gate"):
            key = (r.case, r.output)
            by_case[key] = by_case.get(key, False) or bool(r.vacuous_seed_gate)
    seen = Counter(o for _, o in by_case)
    vacuous = Counter(o for (_, o), v in by_case.items() if v)
    hit = [o for o in seen if vacuous[o]]
    if not hit:
        return None
    there = {o: v for (c, o), v in by_case.items() if c == acceptance}
    zeros_there = [o for o, v in there.items() if v]
    at_case = (f"at the acceptance case {acceptance} on {len(zeros_there)} of {len(there)} outputs "
               f"({', '.join(zeros_there) or 'none'}); " if there else "")
    return ("acceptance gate (rtol 1/128, atol 1e-4) would pass all zeros: " + at_case
            + ", ".join(f"{o} at {vacuous[o]}/{seen[o]} cases" for o in hit)
            + "; the gate here caps its atol there")


def slowest_line(records: Iterable[Mapping]) -> str | None:
    """Where the run's time went: the case whose goldens and comparison took longest (its golden
    records' ``seconds``, one evaluation per case) and the slowest backend call."""
    case, call = None, None
    for r in typed(records):
        seconds = r.seconds
        if not isinstance(seconds, (int, float)):
            continue
        if r.is_golden:
            if case is None or seconds > case[0]:
                case = (seconds, r.case)
        elif call is None or seconds > call[0]:
            call = (seconds, r.case, r.backend)
    parts = []
    if case is not None:
        parts.append(f"slowest case: {case[1]}, goldens and comparison {case[0]:.1f} s")
    if call is not None:
        parts.append(f"slowest backend call: {call[2]} at {call[1]}, {call[0]:.1f} s")
    return "; ".join(parts) or None


def summary_lines(records: list[Mapping], case_operators: Mapping[str, str] | None = None,
                  acceptance: Mapping[str, str] | None = None, studies: Mapping[str, Mapping] | None = None,
                  missing: Iterable[Mapping] = ()) -> list[str]:
    """``case_operators``: case id -> operator (a run of several, ``selection.case_operators``):
    then one block of lines per operator, headed by its name. ``acceptance``: operator -> the id
    of its acceptance case (its backends' outputs by verdict there); ``studies``: operator -> the
    run's drift study of it; ``missing``: the run's planned cells without a record."""
    acceptance, studies, missing = acceptance or {}, studies or {}, list(missing)
    if not case_operators:
        records = typed(records)      # once, for every line below
        lines = backend_lines(records)
        for operator, case_id in acceptance.items():
            lines += acceptance_lines(records, case_id, missing, operator)
        lines += [drift_line(study) for study in studies.values()]
        for line in (vacuity_line(records, next(iter(acceptance.values()), None)), slowest_line(records)):
            if line:
                lines.append(line)
        return lines
    lines = []
    for operator in dict.fromkeys(case_operators.values()):
        lines.append(f"[{operator}]")
        mine = {operator: acceptance[operator]} if operator in acceptance else {}
        study = {operator: studies[operator]} if operator in studies else {}
        lines += [f"  {line}" for line in summary_lines(records_of(records, case_operators, operator),
                                                        acceptance=mine, studies=study, missing=missing)]
    return lines
