"""Render a results directory into one self-contained HTML page with PNG plots.

    render(results_dir, out_dir, baseline=None) -> Path of out_dir/index.html

The page is ``index.html`` plus ``plots/*.png`` next to it, linked relatively:
no network resource, it works from the file system and moved to another
machine. HTML comes from a Jinja2 template with autoescaping on, so every
string from the results (case ids, backend import paths) is escaped.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

import operators
from accuracy.dual import RATIO_LIMITS
from accuracy.metrics import histogram_edges
from contract.declared import unless_absent
from contract.records import records_of
from reports import data as D
from reports import plots as P
from reports import tile_drift
from reports.drift_study_figures import StudyUnreadable, draw, load_study
from reports.plots import study_shape_label
from runs.results import DRIFT_STUDIES, load_records, load_results, write_text_atomic

TEMPLATES = Path(__file__).parent / "templates"
PLOTS = "plots"


# --------------------------------------------------------------------------- loading

def load(results: str | os.PathLike) -> list[dict]:
    """Records of a results file, a run folder, or a results directory's latest run
    (``runs.results.resolve_results``)."""
    path = Path(results)
    if not path.exists():
        raise FileNotFoundError(f"results directory {path} does not exist")
    return [r for r in load_records(path) if isinstance(r, Mapping)]


def _run_info(data: Mapping) -> dict:
    """Which file and run the page shows, and what the run lacks (missing cells, unreadable shards)."""
    return {"source": data.get("source"), "run": data.get("run"), "missing": data.get("missing") or [],
            "unreadable": data.get("unreadable_shards") or []}


# --------------------------------------------------------------------------- formatting filters

def fmt_num(v, digits: int = 3) -> str:
    x = D.num(v)
    if x is None:
        return "–"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if x == int(x) and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.{digits}g}"


def fmt_pct(v) -> str:
    x = D.num(v)
    if x is None:
        return "–"
    if x == 0:
        return "0"
    return f"{100 * x:.3g}%"


def fmt_index(v) -> str:
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(str(i) for i in v) + ")"
    return "–" if v is None else str(v)


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=fmt_num, pct=fmt_pct, idx=fmt_index)
    return env


# --------------------------------------------------------------------------- helpers

def _edges() -> dict:
    try:
        return histogram_edges()
    except Exception:   # noqa: BLE001 - the report still renders without histograms
        return {}


def _title(op) -> str:
    return f"{op.title or op.name}: accuracy report"


def _tile_rows(op) -> dict[str, int | None]:
    """Each reduction's tile under the operator's default schedule (the drift plots' top axis)."""
    try:
        sched = op.schedules.default_schedule()
        return {o: sched.tile_m(op.output(o).kernel) for o in op.reduction_outputs}
    except Exception:   # noqa: BLE001 - the plots lose their tile axis, nothing else
        return {}


def _tile_drift(idx: D.Index, op):
    """The default schedule's per-tile drift, as the golden pass recorded it (``reports.tile_drift``)."""
    return tile_drift.from_records(idx, op.schedules.default_schedule().name, op)


def _plot_job(job) -> None:
    name, args, path = job
    getattr(P, name)(*args, path)


PARALLEL_MIN_JOBS = 12   # below this, starting worker processes costs more than it saves
PARALLEL_MIN_CPUS = 4


def _run_plot_jobs(jobs: list, processes: int | None) -> int:
    """Run the plot jobs; returns the number of processes used. In parallel, each worker is a fresh
    ``python -m reports.plots JOBFILE`` (no fork of a process holding torch's threads, no re-import
    of the caller's ``__main__``); a chunk whose worker fails is redone here."""
    if processes is None:
        cpus = os.cpu_count() or 1
        # worker start-up (a fresh interpreter importing matplotlib) only pays off with cores to spare
        processes = min(8, cpus) if len(jobs) >= PARALLEL_MIN_JOBS and cpus >= PARALLEL_MIN_CPUS else 1
    processes = max(1, min(processes, len(jobs)))
    if processes == 1:
        for job in jobs:
            _plot_job(job)
        return 1
    import pickle
    import subprocess
    import sys
    order = sorted(jobs, key=lambda j: j[0] != "drift")      # biggest figures first, dealt round-robin
    chunks = [order[i::processes] for i in range(processes)]
    with tempfile.TemporaryDirectory(prefix="report-plots-") as tmp:
        procs = []
        for i, chunk in enumerate(chunks):
            job_file = Path(tmp) / f"jobs-{i}.pickle"
            job_file.write_bytes(pickle.dumps(chunk))
            procs.append((chunk, subprocess.Popen([sys.executable, "-m", "reports.plots", str(job_file)],
                                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
        for chunk, proc in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                for job in chunk:
                    _plot_job(job)
    return processes


def _drift_study(out: Path, source, img, op, strict: bool, results_file: str | None = None) -> dict | None:
    """The drift study's figures (drawn from its JSON next to the page) and crossing table, when
    there is one of ``op``: the one named, else ``OUT/drift``, else the run's own (made beside its
    cells for its report, ``RUN/drift/<operator>``); a study of another operator is left out, or
    refused where ``strict`` (one asked for by name on a page of one operator)."""
    folder = Path(source) if source is not None else out / "drift"
    if source is None and not (folder / "drift.json").is_file() and results_file:
        folder = Path(results_file).parent / DRIFT_STUDIES / operators.key(op)
    if source is None and not (folder / "drift.json").is_file():
        return None
    try:
        study = load_study(folder)
    except StudyUnreadable as exc:
        raise FileNotFoundError(str(exc)) from None
    owner = study["axes"]["operator"]
    if owner != operators.key(op):
        if strict:
            raise FileNotFoundError(f"{folder}: a drift study of operator {owner!r}, not of {operators.key(op)!r}")
        return None
    figures = []
    for fam, path in draw(study, out / PLOTS).items():
        rel = img(f"study-{fam}")
        path.replace(out / rel)
        figures.append({"family": fam, "src": rel})
    cfg = study["config"]
    return {"figures": figures, "table": study["table"], "config": cfg, "shape": study_shape_label(study, cfg["shape"]),
            "wall_s": study.get("wall_s"), "source": str(folder), "shape_check": study.get("shape_check"),
            "run": study.get("run")}


# --------------------------------------------------------------------------- render

def _expectations_dir(op) -> str | None:
    """Where the known failures of the operator live, relative to the project."""
    folder = op.expectations
    if folder is None:
        return None
    try:
        return str(Path(folder).resolve().relative_to(Path(__file__).resolve().parents[1])) + "/"
    except ValueError:      # an operator package outside the project
        return str(folder) + "/"


def render(results_dir: str | os.PathLike, out_dir: str | os.PathLike, baseline: str | os.PathLike | None = None,
           *, heatmap: bool = True, title: str | None = None, processes: int | None = None,
           drift_study: str | os.PathLike | None = None) -> Path:
    """Render ``results_dir`` (a results directory or a results JSON file) into ``out_dir/index.html``
    (+ ``out_dir/plots/*.png``); ``baseline``: a previous results directory to diff against.
    ``heatmap``: the per-tile drift of the operator's default schedule at the largest case whose
    records carry it (``reports.tile_drift``; recorded by the golden pass, nothing is recomputed).
    ``processes``: plot in that many processes (default: up to 8 when there are >= 12 plots and >= 4 CPUs;
    1: serially). ``drift_study``: the directory of a drift study (``python -m cases.drift_study -o DIR``);
    default ``out_dir/drift`` when it holds one. Its figures and crossing table head the drift section."""
    t_start = time.perf_counter()
    if not Path(results_dir).exists():
        raise FileNotFoundError(f"results directory {results_dir} does not exist")
    data = load_results(results_dir)          # read once: records, manifest and run facts
    # the run's own operators (its manifest's selection): their outputs, schedules and titles
    selection = (data.get("manifest") or {}).get("selection") or {}
    chosen = selection.get("operator") or operators.DEFAULT
    options = dict(heatmap=heatmap, title=title, processes=processes, drift_study=drift_study)
    if isinstance(chosen, str):
        path, _, _ = _render_operator(data, operators.get(chosen), Path(out_dir), results_dir, baseline,
                                      None if baseline is None else load(baseline), t_start,
                                      study_strict=drift_study is not None, **options)
        return path
    return _render_sections(data, chosen, selection.get("case_operators") or {}, Path(out_dir), results_dir,
                            baseline, **options)


def _render_sections(data: dict, keys: list, case_operators: Mapping, out: Path, results_dir, baseline,
                     **options) -> Path:
    """A run of several operators: one page per operator (``OUT/<operator>/index.html``, its records
    alone) and ``OUT/index.html`` with a section per operator: its verdict counts and its page. A
    drift study (``OUT/drift`` or the one named) heads the page of its own operator."""
    previous = load(baseline) if baseline is not None else None
    if options["drift_study"] is None and (out / "drift" / "drift.json").is_file():
        options = {**options, "drift_study": out / "drift"}
    sections = []
    for key in keys:
        op = operators.get(key)
        mine = records_of(data["records"], case_operators, key)
        base = None if previous is None else records_of(previous, case_operators, key)
        _, idx, counts = _render_operator({**data, "records": mine}, op, out / op.name, results_dir, baseline, base,
                                          time.perf_counter(), study_strict=False, **options)
        sections.append({"name": op.name, "title": op.title or op.name, "href": f"{op.name}/index.html",
                         "cases": len(idx.cases), "backends": idx.backends, "counts": counts})
    html = environment().get_template("operators.html.j2").render(
        title=options.get("title") or "accuracy report: " + ", ".join(s["title"] for s in sections),
        results_dir=str(results_dir), sections=sections,
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    path = out / "index.html"
    write_text_atomic(path, html)
    return path


def _render_operator(data: dict, op, out: Path, results_dir, baseline, baseline_records: list | None,
                     t_start: float, *, study_strict: bool, heatmap: bool = True, title: str | None = None,
                     processes: int | None = None, drift_study=None) -> tuple[Path, D.Index, dict]:
    """One operator's page from its records (``data``: the loaded results, its records only;
    ``baseline_records``: the baseline's records of the same operator, named ``baseline``).
    Returns the page, the records' index and the verdict counts per backend."""
    cpu_start = time.process_time()
    timings: dict[str, float] = {}
    plots = out / PLOTS
    plots.mkdir(parents=True, exist_ok=True)
    for old in plots.glob("*.png"):
        old.unlink()
    t0 = time.perf_counter()
    records = [r for r in data["records"] if isinstance(r, Mapping)]
    platform = D.platform_summary(data.get("manifest"))
    run_info = _run_info(data)
    idx = D.index(records, op)
    cells = D.verdict_cells(idx)
    counts = D.status_counts(cells, idx.backends)
    details = D.details(idx)
    attribution = D.attribution_split(idx)
    vac_rows, vac_table = D.vacuity(idx)
    panels = D.drift_panels(idx)
    dual = D.dual_tables(idx)
    diff = None
    if baseline_records is not None:
        diff = D.baseline_diff(idx, D.index(baseline_records, op))
    timings["data"] = time.perf_counter() - t0

    t0, c0 = time.perf_counter(), time.process_time()
    images: dict[str, str] = {}
    jobs: list[tuple[str, tuple, Path]] = []    # (plots function, args, path): run serially or in a pool

    def img(name: str) -> str:
        rel = f"{PLOTS}/{name}.png"
        images[name] = rel
        return rel

    edges = _edges()
    hist_img = {}
    for d in details:
        name = "hist-" + D.slug(d.backend, d.output)
        jobs.append(("histograms", (d, edges), out / img(name)))
        hist_img[d.anchor] = images[name]
    att_img = {}
    for backend in idx.backends:
        rows = [r for r in attribution if r.backend == backend]
        if rows:
            name = "attribution-" + D.slug(backend)
            jobs.append(("attribution", (rows, backend), out / img(name)))
            att_img[backend] = images[name]
    vac_img = None
    if any(r.cases for r in vac_rows):
        jobs.append(("vacuity", (vac_rows,), out / img("vacuity")))
        vac_img = images["vacuity"]
    tiles = _tile_rows(op)
    drift_imgs = []
    by_fig: dict[tuple, list] = {}
    for p in panels:
        by_fig.setdefault((p.output, p.shape), []).append(p)
    for (output, shape), ps in by_fig.items():
        ps = [p for p in ps if any(s.points for s in p.series)]    # a panel with no point says nothing
        if not ps:
            continue
        name = "drift-" + D.slug(output, *(v for _, v in shape))
        at = ", ".join(f"{d}={v}" for d, v in shape)
        jobs.append(("drift", (ps, f"{output} at {at}: max |error| / rms(golden) vs M, per scale profile "
                                  f"(max over seeds)", tiles.get(output)), out / img(name)))
        drift_imgs.append({"output": output, "shape": at, "src": images[name]})
    workers = _run_plot_jobs(jobs, processes)
    timings["plot workers"] = workers
    timings["plots"] = time.perf_counter() - t0
    timings["plots CPU"] = time.process_time() - c0

    td, td_why, td_img = None, "", None
    if heatmap:
        try:
            td, td_why = _tile_drift(idx, op)
            if td is not None:
                t0 = time.perf_counter()
                P.heatmap(td, out / img("tile-drift-heatmap"))
                td_img = images["tile-drift-heatmap"]
                timings["heatmap plot"] = time.perf_counter() - t0
        except Exception as exc:   # noqa: BLE001 - the rest of the page is still worth having
            td, td_why = None, f"the tile drift heatmap failed: {type(exc).__name__}: {exc}"

    study = _drift_study(out, drift_study, img, op, study_strict, data.get("source"))

    skipped = [{"case": idx.cases[c], "backend": b, "status": str(r.status),
                "message": str(unless_absent(r.message, "")), "anchor": D.row_anchor(c, b, "*")}
               for (c, b), r in sorted(idx.cell_status.items(), key=lambda kv: (idx.cases[kv[0][0]].sort_key, kv[0][1]))]

    t0 = time.perf_counter()
    env = environment()
    html = env.get_template("report.html.j2").render(
        title=title or _title(op), results_dir=str(results_dir), baseline_dir=None if baseline is None else str(baseline),
        generated=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), n_records=idx.n_records,
        cases=idx.case_list(), backends=idx.backends, outputs=idx.outputs, cells=cells, counts=counts,
        details=details, hist_img=hist_img, attribution=attribution, att_img=att_img,
        vac_rows=vac_rows, vac_table=vac_table, vac_img=vac_img, drift_imgs=drift_imgs, panels=panels,
        td=td, td_why=td_why, td_img=td_img, diff=diff, skipped=skipped, seed_rtol=D.ACCEPTANCE_RTOL,
        seed_atol=D.ACCEPTANCE_ATOL, noise_ulp=D.NOISE_ULP_P99, noise_abs=D.NOISE_MAX_ABS_FACTOR,
        sources=D.SOURCES, timings=timings, tiles=tiles, platform=platform, run_info=run_info,
        dual=dual, dual_limits=RATIO_LIMITS, study=study, expectations_dir=_expectations_dir(op))
    timings["html"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    timings["total CPU"] = time.process_time() - cpu_start
    html = html.replace("@@RENDER_SECONDS@@", f"{timings['total']:.1f}")
    path = out / "index.html"
    write_text_atomic(path, html)
    return path, idx, counts
