"""The tile-vs-global drift of every declared schedule against M, from the goldens alone.

The drift of a schedule is a property of the schedule and the data, not of any kernel: the
golden pass (``goldens.stream.GoldenPass``, reductions only, no dx) runs each schedule's tiled
emulation beside the same plan summed globally (one FP32 sum over M in canonical blocks) and
the FP64 reference, over a log grid of M and many seeds. Per reduction output it records:

* ``drift``: the tiled accumulator minus the global sum of the same plan, before the output
  store (the accumulation's own error), as rms and max over elements, over rms(FP64);
* ``gate``: the gate's element-wise test on the stored output, max over elements of
  |output - reference| / (atol_eff + rtol |reference| + allowance) (``accuracy.allowance``,
  ``accuracy.tolerances``): above 1, a kernel that computes exactly this schedule fails;
* ``bound``: the deterministic bound of the accumulation (Higham's recursive summation),
  [u_acc + gamma_{T-1}(u_acc)(1 + u_acc) + gamma_T(u_math)] sum_t |partial_t|, max over
  elements, over rms(FP64).

A family (db: db_g and db_fc; dw: dw_g and dw_fc) takes the rms of its two outputs' rms ratios
and the max of their max ratios, gate and bound ratios.

The models, for drift / rms on random-sign data with T tiles: each BF16 cast and add rounds
by a relative error of about u_acc with random sign, the running sum grows like sqrt(t), so
the rms drift over rms grows like u_acc sqrt(T/2) (``probabilistic_model``); the
deterministic bound grows like T u_acc sum|partials| / rms, linear in T for T u_acc << 1.

``python -m cases.drift_study -o DIR`` runs the study (``run``) and writes ``drift.json`` (with
its axes and crossing table, so that a reader needs nothing else) and ``drift.md``; the report
draws one figure per family from the JSON (``python -m reports drift DIR``, ``reports.plots``).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace

import torch

import operators
from accuracy import allowance
from runs import manifest, platform_facts
from goldens.heap import keep_freed_memory
from accuracy.bounds import accumulation_bound, accumulator_roundoff, unit_roundoff
from runs.output_paths import OutputPathError, output_folder
from accuracy.tolerances import tolerances_for
from cases.spec import CaseSpec, make_inputs
from contract.operator import Operator
from contract.schedule import TiledSchedule
from goldens.rounding import round_to
from goldens.stream import GoldenPass

STUDY_SEEDS = 20
BAND = (0.1, 0.9)


@dataclass(frozen=True)
class StudyAxes:
    """What the study of one operator is made of, from its declaration."""
    operator: str          # the name ``operators.get`` finds it by
    shape: tuple           # the sizes after M the study runs at
    acceptance_m: int      # the M of the operator's acceptance case
    acceptance_shape: tuple
    ms: tuple
    profiles: tuple
    dims: tuple            # the dimensions after M, by name
    families: dict         # family -> its reduction outputs
    kernel_of_family: dict

    def shape_label(self, shape) -> str:
        """The sizes after M with their names: "K=64, N=128"."""
        return ", ".join(f"{d}={v}" for d, v in zip(self.dims, shape))

    @property
    def declaration(self) -> Operator:
        return operators.get(self.operator)

    def declared_schedules(self) -> list[TiledSchedule]:
        """The operator's schedules the study compares (``study_schedules``; SwiGLU: the article's
        with BF16 accumulators, the hardened one with FP32 accumulators and PyTorch's one global
        FP32 sum)."""
        return list(self.declaration.schedules.study_schedules())


def axes(operator: Operator | str = operators.DEFAULT) -> StudyAxes:
    """The study's axes for ``operator`` (a declaration or the name it is found by)."""
    op = operators.get(operator) if isinstance(operator, str) else operator
    acceptance_m = op.acceptance_case[0]
    # A family: the operator's reductions stored at one point by one kernel (SwiGLU: db = db_g, db_fc
    # from the b kernel; dw = dw_g, dw_fc from the w kernel)
    families: dict = {}
    for o in op.reduction_outputs:
        families.setdefault(op.output(o).store_point, []).append(o)
    families = {fam: tuple(names) for fam, names in families.items()}
    return StudyAxes(
        operator=operators.key(op),
        # Drift relative to rms does not depend on the sizes after M for these inputs (every element of
        # a reduction is a sum over M of independent terms; the other sizes only count the elements):
        # the operator's small study shape (SwiGLU: K=64, N=128) keeps 20 seeds x 12 M values under five
        # minutes on 2 cores. ``shape_check`` measures the claim at the acceptance case's shape.
        shape=tuple(op.study_shape or op.shapes[-1]),
        acceptance_m=acceptance_m,
        acceptance_shape=tuple(op.acceptance_case[1:-2]),
        # One tile of each kernel up to past the acceptance case's M (SwiGLU: the w kernel's tile
        # edges 2048 | 2049, a last tile of one row, and the article's M itself).
        ms=tuple(sorted({1024, 2048, 2049, 4096, 4097, 8192, 16384, 32768, 65536, 131072, 262144, acceptance_m})),
        # the acceptance case's scale profile, then unit scale
        profiles=tuple(dict.fromkeys(p for p in (op.acceptance_case[-2], "unit") if p in op.scales)),
        dims=tuple(op.dims[1:]),
        families=families,
        kernel_of_family={op.output(names[0]).store_point: op.output(names[0]).kernel for names in families.values()})


def global_of(schedule: TiledSchedule) -> TiledSchedule:
    """The same dtype path summed globally: no tiles, the accumulator in the math dtype."""
    return schedule.summed_globally(f"{schedule.name}/global")


def _is_global(schedule: TiledSchedule) -> bool:
    return global_of(schedule) == replace(schedule, name=global_of(schedule).name)


def probabilistic_model(tiles: float, u_acc: float) -> float:
    """rms drift / rms of a random-sign sum accumulated over ``tiles`` tiles: u_acc sqrt(T/2)."""
    return u_acc * math.sqrt(tiles / 2)


@dataclass
class OutputPoint:
    """One reduction output of one schedule at one case: ratios to rms(FP64)."""
    drift_rms: float
    drift_max: float
    gate: float           # max |stored - reference| / element tolerance (the gate fails above 1)
    gate_fails: int       # elements above their tolerance
    bound_max: float
    error_rms: float      # rms(stored - FP64) / rms(FP64)
    tolerance_rms: float  # rms over elements of the element tolerance / rms(FP64): the gate's level


@dataclass
class CasePoint:
    profile: str
    m: int
    shape: tuple          # the sizes after M
    seed: int
    schedule: str
    tiles: dict           # family -> tile count of its kernel
    outputs: dict         # output -> OutputPoint
    seconds: float = 0.0

    def family(self, fam: str, outputs: Sequence[str]) -> dict:
        """The family ``fam`` of reduction ``outputs`` (``StudyAxes.families``) as one point."""
        pts = [self.outputs[o] for o in outputs]
        return {"drift_rms": math.sqrt(sum(p.drift_rms ** 2 for p in pts) / len(pts)),
                "drift_max": max(p.drift_max for p in pts), "gate": max(p.gate for p in pts),
                "gate_fails": sum(p.gate_fails for p in pts), "bound_max": max(p.bound_max for p in pts),
                "error_rms": math.sqrt(sum(p.error_rms ** 2 for p in pts) / len(pts)),
                "tolerance_rms": math.sqrt(sum(p.tolerance_rms ** 2 for p in pts) / len(pts))}


def _rms(t: torch.Tensor) -> float:
    return float(t.double().square().mean().sqrt()) if t.numel() else 0.0


def measure_case(spec: CaseSpec, schedules: Sequence[TiledSchedule]) -> list[CasePoint]:
    """Every schedule's drift, gate ratio and bound at one case: one reductions-only golden pass."""
    start = time.perf_counter()
    op, ax = spec.declaration, axes(spec.operator)
    inputs = make_inputs(spec, "cpu")
    layers = {"fp64": op.schedules.FP64_GLOBAL}
    for s in schedules:
        layers[s.name] = s
        if not _is_global(s):
            layers[global_of(s).name] = global_of(s)
    golden = GoldenPass(op, inputs, layers, terms=True, rows=False, accumulators=True)
    for _ in golden.blocks():
        pass
    exact = golden.reductions["fp64"]
    ref_data = {}
    tolerances = tolerances_for(op)
    for o in op.reduction_outputs:
        reference = round_to(exact[o], op.output_dtype(o))
        tol = tolerances[o]
        model = allowance.reduction(golden.terms, o, op.output(o).kind, spec.m)
        limit = tol.element_bound(reference, model.vs_reference, _rms(reference))
        ref_data[o] = (reference, limit, _rms(exact[o]))
    points = []
    for s in schedules:
        tiles = {fam: s.n_tiles(spec.m, ax.kernel_of_family[fam]) for fam in ax.families}
        outputs = {}
        for fam, names in ax.families.items():
            u_acc = accumulator_roundoff(s, ax.kernel_of_family[fam])
            for o in names:
                reference, limit, scale = ref_data[o]
                scale = scale or 1.0
                stored = golden.reductions[s.name][o].double()
                err = (stored - reference.double()).abs()
                if _is_global(s):
                    drift = torch.zeros(1, dtype=torch.float64)
                    bound = 0.0
                else:
                    drift = (golden.accumulated[s.name][o].double()
                             - golden.accumulated[global_of(s).name][o].double())
                    bound = float(accumulation_bound(golden.abs_partials[s.name][o].double(), tiles[fam], u_acc,
                                                     unit_roundoff(s.plan.math)).max())
                outputs[o] = OutputPoint(
                    drift_rms=_rms(drift) / scale, drift_max=float(drift.abs().max()) / scale,
                    gate=float((err / limit).max()), gate_fails=int((err > limit).sum()),
                    bound_max=bound / scale, error_rms=_rms(stored - exact[o].double()) / scale,
                    tolerance_rms=_rms(limit) / scale)
        points.append(CasePoint(spec.scale, spec.m, tuple(spec.sizes[1:]), spec.seed, s.name, tiles, outputs))
    seconds = time.perf_counter() - start
    for p in points:
        p.seconds = seconds
    return points


def _worker(args) -> list[dict]:
    spec, names = args
    keep_freed_memory()
    torch.set_num_threads(1)
    schedules = [s for s in axes(spec.operator).declared_schedules() if s.name in names]
    return [asdict(p) for p in measure_case(spec, schedules)]


def _from_dict(d: dict) -> CasePoint:
    return CasePoint(**{**d, "outputs": {o: OutputPoint(**v) for o, v in d["outputs"].items()}})


@dataclass
class StudyConfig:
    """``ms``, ``profiles``, ``shape``: empty for the operator's own (``axes``)."""
    operator: str = operators.DEFAULT   # the name ``operators.get`` finds it by
    ms: tuple = ()
    seeds: int = STUDY_SEEDS
    first_seed: int = 0
    profiles: tuple = ()
    shape: tuple = ()
    schedules: tuple = ()      # names; empty: every declared schedule
    processes: int = 0         # 0: one per CPU

    def filled(self) -> "StudyConfig":
        ax = axes(self.operator)
        return replace(self, ms=self.ms or ax.ms, profiles=self.profiles or ax.profiles, shape=self.shape or ax.shape)


def run(config: StudyConfig, progress=print) -> dict:
    """Measure every (profile, M, seed) case in worker processes (one thread each: the cases are
    small and independent, so processes use the cores better than intra-op threads); the largest
    cases first so that the last to finish are short."""
    config = config.filled()
    ax = axes(config.operator)
    names = config.schedules or tuple(s.name for s in ax.declared_schedules())
    specs = [CaseSpec(m, *config.shape, p, config.first_seed + i, operator=config.operator)
             for p in config.profiles for m in config.ms for i in range(config.seeds)]
    specs.sort(key=lambda s: -s.m)
    processes = config.processes or os.cpu_count() or 1
    start = time.perf_counter()
    points: list[CasePoint] = []
    total_rows = sum(s.m for s in specs)
    done_rows = 0
    if processes == 1:
        results = (_worker((s, names)) for s in specs)
        pool = None
    else:
        import multiprocessing
        pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
        results = pool.map(_worker, [(s, names) for s in specs])
    try:
        last = 0.0
        for spec, res in zip(specs, results):
            points.extend(_from_dict(d) for d in res)
            done_rows += spec.m
            now = time.perf_counter() - start
            if progress and (now - last > 10 or done_rows == total_rows):
                last = now
                progress(f"drift study: {done_rows / total_rows:.0%} of the rows ({len(points) // len(names)}"
                         f"/{len(specs)} cases) in {now:.0f} s")
    finally:
        if pool is not None:
            pool.shutdown()
    wall = time.perf_counter() - start
    # FP32 / FP64 math and exact BF16 casts only (no BF16 GEMM): the facts are recorded, not conditioned on
    platform = {"cpu": manifest.cpu(), "facts": platform_facts.measure(), "torch": torch.__version__}
    study = {"config": {**asdict(config), "schedules": list(names)}, "axes": axes_record(ax), "wall_s": wall,
             "platform": platform, "code": manifest.code_version(), "processes": processes, "points": [asdict(p) for p in points],
             "summary": summarize(points, ax)}
    study["table"] = crossing_table(study)
    return study


def _quantile(values: Sequence[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def fit_slope(tiles: Sequence[float], values: Sequence[float]) -> float | None:
    """Least-squares slope of log(value) on log(tiles) over the points with T >= 2 and value > 0."""
    pts = [(math.log(t), math.log(v)) for t, v in zip(tiles, values) if t >= 2 and v > 0 and math.isfinite(v)]
    if len(pts) < 3:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return None if sxx == 0 else sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def crossing(ms: Sequence[int], gate: Sequence[float]) -> dict:
    """Where the median gate ratio first exceeds 1: the grid points around it and the M
    interpolated on log-log axes between them (None when it never does)."""
    for i, (m, g) in enumerate(zip(ms, gate)):
        if g > 1:
            if i == 0:
                return {"m": m, "between": [None, m], "interpolated": None}
            m0, g0 = ms[i - 1], gate[i - 1]
            if g0 > 0:
                f = (0 - math.log(g0)) / (math.log(g) - math.log(g0))
                est = math.exp(math.log(m0) + f * (math.log(m) - math.log(m0)))
            else:
                est = None
            return {"m": m, "between": [m0, m], "interpolated": est}
    return {"m": None, "between": [ms[-1] if ms else None, None], "interpolated": None}


def axes_record(ax: StudyAxes) -> dict:
    """The axes as plain data in the study's JSON: what a reader of it (the report's figures) needs
    about the operator and its schedules, so that it reads the JSON alone."""
    schedules = {}
    for s in ax.declared_schedules():
        schedules[s.name] = {fam: {"tile_m": s.tile_m(kernel), "u_acc": unit_roundoff(s.accumulator(kernel))}
                             for fam, kernel in ax.kernel_of_family.items()}
    return {"operator": ax.operator, "dims": list(ax.dims), "acceptance_m": ax.acceptance_m,
            "families": {fam: list(names) for fam, names in ax.families.items()}, "schedules": schedules}


def study_axes(study: dict) -> StudyAxes:
    """The axes of a study's operator (a study written before it named one: the default operator)."""
    return axes(study.get("config", {}).get("operator") or operators.DEFAULT)


def summarize(points: Sequence[CasePoint], ax: StudyAxes) -> dict:
    """Per profile, schedule and family: per M the median and 10-90% band over seeds of the drift,
    gate and bound ratios; the fitted slope of the median drift against T; where the median gate
    ratio crosses 1; the values at the article's M."""
    groups: dict = {}
    for p in points:
        for fam, outputs in ax.families.items():
            groups.setdefault((p.profile, p.schedule, fam), {}).setdefault(p.m, []).append(
                (p.tiles[fam], p.family(fam, outputs)))
    summary: dict = {}
    for (profile, schedule, fam), by_m in sorted(groups.items()):
        ms = sorted(by_m)
        series = {"m": ms, "tiles": [by_m[m][0][0] for m in ms], "seeds": [len(by_m[m]) for m in ms]}
        for key in ("drift_rms", "drift_max", "gate", "bound_max", "error_rms", "tolerance_rms"):
            vals = [[f[key] for _, f in by_m[m]] for m in ms]
            series[key] = {"median": [_quantile(v, 0.5) for v in vals], "p10": [_quantile(v, BAND[0]) for v in vals],
                           "p90": [_quantile(v, BAND[1]) for v in vals]}
        series["gate_fail_share"] = [sum(f["gate"] > 1 for _, f in by_m[m]) / len(by_m[m]) for m in ms]
        article = ms.index(ax.acceptance_m) if ax.acceptance_m in ms else None
        summary.setdefault(profile, {}).setdefault(schedule, {})[fam] = {
            **series,
            "slope": fit_slope(series["tiles"], series["drift_rms"]["median"]),
            "bound_slope": fit_slope(series["tiles"], series["bound_max"]["median"]),
            "crossing": crossing(ms, series["gate"]["median"]),
            "at_article_m": None if article is None else {
                "m": ax.acceptance_m, "tiles": series["tiles"][article],
                "drift_rms": series["drift_rms"]["median"][article],
                "drift_max": series["drift_max"]["median"][article],
                "gate": series["gate"]["median"][article],
                "gate_fail_share": series["gate_fail_share"][article]},
        }
    return summary


@dataclass
class ShapeCheck:
    """The drift ratio at the acceptance case's shape beside the study's on the same M and seeds
    (``shapes`` empty: those two)."""
    operator: str = operators.DEFAULT
    ms: tuple = (8192, 32768)
    seeds: int = 3
    shapes: tuple = ()
    rows: list = field(default_factory=list)


def shape_check(check: ShapeCheck, profile: str | None = None, schedule: str | None = None) -> ShapeCheck:
    """``profile``: default the study's first; ``schedule``: a declared schedule's name (default:
    the operator's default schedule)."""
    ax = axes(check.operator)
    profile = profile or ax.profiles[0]
    schedule = schedule or ax.declaration.schedules.default_schedule().name
    sched = [s for s in ax.declared_schedules() if s.name == schedule]
    for m in check.ms:
        for shape in check.shapes or (ax.shape, ax.acceptance_shape):
            vals = {fam: [] for fam in ax.families}
            for seed in range(check.seeds):
                (p,) = measure_case(CaseSpec(m, *shape, profile, seed, operator=check.operator), sched)
                for fam, outputs in ax.families.items():
                    vals[fam].append(p.family(fam, outputs)["drift_rms"])
            check.rows.append({"m": m, "shape": list(shape), "profile": profile, "schedule": schedule,
                               **{f"{fam}_drift_rms_median": statistics.median(v) for fam, v in vals.items()}})
    return check


def _fmt(v, digits=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return f"{v:.{digits}g}"


def crossing_table(study: dict) -> list[dict]:
    """Per profile, family and schedule: where the median gate ratio crosses 1 and the values
    at the article's M."""
    rows = []
    families = study_axes(study).families
    for profile, by_sched in study["summary"].items():
        for fam in families:
            for name, fams in by_sched.items():
                f = fams.get(fam)
                if f is None:
                    continue
                c, a = f["crossing"], f["at_article_m"] or {}
                if c["m"] is None:
                    cross = f"not up to M={c['between'][0]}"
                elif c["interpolated"] is None:
                    cross = f"at or below M={c['m']}"
                else:
                    cross = f"M ~ {c['interpolated']:,.0f} (between {c['between'][0]:,} and {c['between'][1]:,})"
                rows.append({"profile": profile, "family": fam, "schedule": name, "crossing": cross,
                             "drift_rms": a.get("drift_rms"), "drift_max": a.get("drift_max"),
                             "gate": a.get("gate"), "fail_share": a.get("gate_fail_share"),
                             "tiles": a.get("tiles"), "slope": f.get("slope")})
    return rows


def markdown(study: dict) -> str:
    cfg = study["config"]
    ax = study_axes(study)
    families, shape_label = ax.families, ax.shape_label
    lines = [f"Drift study: {shape_label(cfg['shape'])}, {cfg['seeds']} seeds per M, M in "
             f"{', '.join(map(str, cfg['ms']))}; {study['wall_s']:.0f} s on {study['processes']} processes.",
             "",
             f"| profile | family | schedule | gate crossed (median ratio > 1) | rms drift / rms at M={ax.acceptance_m} "
             "| max drift / rms | gate ratio | seeds failing | fitted slope vs T |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in crossing_table(study):
        share = "-" if r["fail_share"] is None else f"{r['fail_share']:.0%}"
        lines.append(f"| {r['profile']} | {r['family']} | {r['schedule']} | {r['crossing']} | {_fmt(r['drift_rms'])} "
                     f"| {_fmt(r['drift_max'])} | {_fmt(r['gate'])} | {share} | {_fmt(r['slope'])} |")
    check = study.get("shape_check")
    if check:
        rows = check["rows"]
        lines += ["", f"Shape check ({rows[0]['schedule'] if rows else ''} schedule, {rows[0]['profile'] if rows else ''} "
                  f"scale, median rms drift / rms over {check['seeds']} seeds):", "",
                  "| M | shape | " + " | ".join(families) + " |", "|---|---|" + "---|" * len(families)]
        for r in rows:
            lines.append(f"| {r['m']} | {shape_label(r['shape'])} | "
                         + " | ".join(_fmt(r[f"{fam}_drift_rms_median"]) for fam in families) + " |")
    return "\n".join(lines) + "\n"


def write(study: dict, out) -> dict:
    """``drift.json`` and ``drift.md`` in ``out``; returns their paths."""
    import json
    from pathlib import Path

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "drift.json", "markdown": out / "drift.md"}
    paths["json"].write_text(json.dumps(study, separators=(",", ":")))
    paths["markdown"].write_text(markdown(study))
    return paths


def main(argv=None) -> int:
    """``python -m cases.drift_study -o DIR [--operator NAME] ...``: run the study, write drift.json and drift.md."""
    argv = sys.argv[1:] if argv is None else list(argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--operator", default=operators.DEFAULT)
    known, _ = pre.parse_known_args(argv)
    try:
        ax = axes(known.operator)
    except operators.OperatorNotFound as exc:
        print(f"error: --operator: {exc}", file=sys.stderr)
        return 2
    scales = ax.declaration.scales
    parser = argparse.ArgumentParser(prog="python -m cases.drift_study",
                                     description="the tile-vs-global drift of every declared schedule against M, "
                                                 "from the goldens alone (cases.drift_study)")
    parser.add_argument("--operator", default=operators.DEFAULT, metavar="NAME",
                        help=f"the operator whose schedules are studied (default: {operators.DEFAULT})")
    parser.add_argument("-o", "--out", required=True, help="directory for drift.json, drift.md, drift-db.png, "
                                                            "drift-dw.png")
    parser.add_argument("--ms", type=int, nargs="+", default=list(ax.ms), metavar="M")
    parser.add_argument("--seeds", type=int, default=STUDY_SEEDS)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--profiles", nargs="+", default=list(ax.profiles), choices=sorted(scales))
    parser.add_argument("--shape", default=",".join(map(str, ax.shape)), metavar="SIZES",
                        help=f"the sizes after M, comma-separated ({ax.shape_label(ax.shape)} by default: "
                             f"drift relative to rms does not depend on them)")
    parser.add_argument("--processes", type=int, default=0, help="worker processes (default: one per CPU)")
    parser.add_argument("--shape-check", action="store_true",
                        help=f"also measure the default schedule's drift at the acceptance case's shape "
                             f"({ax.shape_label(ax.acceptance_shape)}) beside the study's (3 seeds at M=8192 and 32768)")
    args = parser.parse_args(argv)
    try:
        shape = tuple(int(v) for v in args.shape.split(","))
    except ValueError:
        shape = ()
    if len(shape) != len(ax.shape) or min(args.ms) < 1 or args.seeds < 1 or min(shape) < 1:
        print(f"error: M and seeds must be >= 1, and --shape {len(ax.shape)} sizes >= 1 "
              f"(e.g. --shape {','.join(map(str, ax.shape))})", file=sys.stderr)
        return 2
    try:
        output_folder(args.out)
    except OutputPathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    config = StudyConfig(operator=ax.operator, ms=tuple(sorted(set(args.ms))), seeds=args.seeds, first_seed=args.first_seed,
                           profiles=tuple(args.profiles), shape=shape, processes=args.processes)
    study = run(config)
    if args.shape_check:
        start = time.perf_counter()
        check = shape_check(ShapeCheck(operator=ax.operator))
        study["shape_check"] = {"ms": list(check.ms), "seeds": check.seeds, "rows": check.rows,
                                "wall_s": time.perf_counter() - start}
    paths = write(study, args.out)
    print(markdown(study))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
