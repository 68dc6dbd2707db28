"""PNG plots of the report (matplotlib, Agg backend: no display needed).

Every function takes the data from ``reports.data`` / ``reports.tile_drift`` and
a path, writes one PNG and returns nothing; none of them reads records itself.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator  # noqa: E402

from reports.data import ACCEPTANCE_ATOL, ACCEPTANCE_RTOL, SOURCES, AttributionRow, Detail, DriftPanel, VacuityRow  # noqa: E402

DPI = 80
GOLDEN_STYLE = {"reference": ("#000000", "vs reference (gated)"), "fp64": ("#1f77b4", "vs FP64"),
                "faithful": ("#2ca02c", "vs faithful (declared path)"), "tiled": ("#d62728", "vs tiled emulation")}
SOURCE_COLOR = {"storage": "#8c8c8c", "tile_order": "#ff7f0e", "kernel": "#9467bd"}
SOURCE_LABEL = {"storage": "BF16 storage (faithful - FP64)", "tile_order": "tile order (tiled - faithful)",
                "kernel": "kernel (kernel - tiled)"}
# backend colours: tab10 without orange (the tile-order series) and grey (the storage series)
PALETTE = [plt.get_cmap("tab10")(i) for i in (0, 2, 3, 4, 5, 6, 8, 9)]

plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 7.5, "figure.dpi": DPI})


def _save(fig, path: Path) -> None:
    fig.savefig(path, dpi=DPI, format="png")
    plt.close(fig)


def _short(text: str, n: int = 60) -> str:
    """Shortened, and safe for matplotlib text: a "$" from a backend name would start mathtext."""
    text = str(text) if len(str(text)) <= n else str(text)[: n - 1] + "…"
    return text.replace("$", r"\$")


# --------------------------------------------------------------------------- histograms

def histograms(detail: Detail, edges: dict, path: Path) -> None:
    """log10 |error| and BF16 ULP distance of one backend x output, summed over its cases."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    plotted = [False, False]
    for g, h in detail.hist.items():
        color, label = GOLDEN_STYLE.get(g, ("k", g))
        lab = f"{label} ({h['cases']} cases)"
        le, counts = edges.get("log10_abs_err"), h.get("log10_abs_err")
        if counts and le and len(le) == len(counts) + 1 and sum(counts):
            lo = next(i for i, c in enumerate(counts) if c)
            hi = len(counts) - next(i for i, c in enumerate(reversed(counts)) if c)
            ax1.stairs(counts[lo:hi], le[lo:hi + 1], color=color, label=lab + f", {h['exact']} exact")
            plotted[0] = True
        ue, counts = edges.get("ulp"), h.get("ulp")
        if counts and ue and len(ue) == len(counts) + 1 and sum(counts):
            e = [v if math.isfinite(v) else 2 * ue[-2] for v in ue]
            hi = len(counts) - next(i for i, c in enumerate(reversed(counts)) if c)
            ax2.stairs(counts[:hi], e[:hi + 1], color=color, label=lab)
            plotted[1] = True
    ax1.set_xlabel("log10 |kernel - golden| (exact elements not shown)")
    ax1.set_ylabel("elements")
    ax1.set_title("absolute error")
    ax2.set_xscale("symlog", linthresh=1, linscale=0.6)
    ax2.set_xlabel("BF16 ULP distance (of the golden's binade); last bin = beyond 2^16")
    ax2.set_title("ULP distance")
    for ax, ok in zip((ax1, ax2), plotted):
        if ok:
            ax.set_yscale("log")
            ax.legend(loc="upper right")
        else:
            ax.text(0.5, 0.5, "no finite errors recorded", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(_short(f"{detail.backend} — {detail.output}", 90))
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.16, top=0.84, wspace=0.2)   # tight_layout costs a draw
    _save(fig, path)


# --------------------------------------------------------------------------- attribution

def attribution(rows: Sequence[AttributionRow], backend: str, path: Path) -> None:
    """Per output: mean share of each source (left) and the max abs error of each source (right)."""
    outputs = [r.output for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    x = range(len(rows))
    bottom = [0.0] * len(rows)
    for s in SOURCES:
        vals = [r.mean_share.get(s, 0.0) for r in rows]
        ax1.bar(x, vals, bottom=bottom, color=SOURCE_COLOR[s], label=SOURCE_LABEL[s])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax1.set_xticks(list(x), outputs)
    ax1.set_ylim(0, 1.0)
    ax1.set_ylabel("mean share over cases")
    ax1.set_title("share of the error vs FP64, by source")
    ax1.legend(loc="lower left", fontsize=7)
    width = 0.27
    any_pos = False
    for i, s in enumerate(SOURCES):
        vals = [r.max_part.get(s) for r in rows]
        pos = [(j + (i - 1) * width, v) for j, v in enumerate(vals) if v is not None and v > 0]
        if pos:
            any_pos = True
            ax2.bar([p[0] for p in pos], [p[1] for p in pos], width, color=SOURCE_COLOR[s], label=SOURCE_LABEL[s])
    tot = [(j, r.max_total_vs_fp64) for j, r in enumerate(rows) if r.max_total_vs_fp64]
    if tot:
        ax2.scatter([t[0] for t in tot], [t[1] for t in tot], marker="_", s=400, color="k", zorder=3,
                    label="kernel vs FP64 (max abs)")
    if any_pos or tot:
        ax2.set_yscale("log")
    ax2.set_xticks(list(x), outputs)
    ax2.set_ylabel("max abs error, max over cases")
    ax2.set_title("size of each source")
    fig.suptitle(_short(f"error attribution — {backend}", 90))
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.1, top=0.84, wspace=0.22)
    _save(fig, path)


# --------------------------------------------------------------------------- drift vs M

_KIND_ORDER = {"tile_order": 0, "storage": 1, "backend": 2, "bound": 3}


def _style(series, colors: dict):
    if series.kind == "tile_order":
        return dict(color="#ff7f0e", lw=2.2, marker="o", ls="-", zorder=5, ms=7, mfc="none", mew=2)
    if series.kind == "storage":
        return dict(color="#8c8c8c", lw=1.2, marker=".", ls=":")
    c = colors.setdefault(series.source, PALETTE[len(colors) % len(PALETTE)])
    if series.kind == "bound":
        return dict(color=c, lw=1.0, ls="--", marker=None, alpha=0.8)
    return dict(color=c, lw=1.4, marker="s" if series.reference == "global" else "^",
                ls="-" if series.reference == "global" else "-.", ms=4)


def drift(panels: Sequence[DriftPanel], title: str, tile_rows: int | None, path: Path,
          ylabel: str = "max |error| / rms(golden)") -> None:
    """Max abs error vs M (log-log), one subplot per scale profile; top axis: tiles of ``tile_rows``."""
    n = len(panels)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.5 * rows + 1.1), squeeze=False)
    colors: dict = {}
    handles = {}
    for ax, panel in zip(axes.flat, panels):
        notes = []
        for s in panel.series:
            st = _style(s, colors)
            if s.points:
                (line,) = ax.plot([p[0] for p in s.points], [p[1] for p in s.points], label=s.label, **st)
                handles.setdefault(s.label, (_KIND_ORDER.get(s.kind, 9), s.source, s.reference, line))
            if s.nonfinite and s.kind != "bound":
                notes.append(f"NaN/Inf: {_short(s.source, 24)} at M={','.join(map(str, s.nonfinite[:4]))}"
                             + ("…" if len(s.nonfinite) > 4 else ""))
            if s.zeros and s.kind in ("tile_order", "backend"):
                notes.append(f"exact: {_short(s.source, 24)}{'' if s.reference == 'global' else ' vs FP64'} "
                             f"at M={','.join(map(str, s.zeros[:4]))}" + ("…" if len(s.zeros) > 4 else ""))
        ax.set_xscale("log")
        if ax.lines:
            ax.set_yscale("log")
        ax.set_title(f"{panel.scale} scale")
        ax.set_xlabel("M (rows)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.3)
        if tile_rows:
            top = ax.secondary_xaxis("top", functions=(lambda m, t=tile_rows: m / t, lambda k, t=tile_rows: k * t))
            top.set_xlabel(f"tiles of {tile_rows} rows", fontsize=8)
            top.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            top.xaxis.set_minor_locator(NullLocator())    # unlabelled anyway: 0.8 s a figure to place
        if notes:
            ax.text(0.02, 0.02, "\n".join(notes[:4]), transform=ax.transAxes, fontsize=6.5, va="bottom",
                    bbox=dict(facecolor="white", alpha=0.8, lw=0))
        if not ax.lines:
            ax.text(0.5, 0.5, "no finite non-zero errors", ha="center", va="center", transform=ax.transAxes)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title)
    handles = dict(sorted(handles.items(), key=lambda kv: kv[1][:3]))
    handles = {label: v[3] for label, v in handles.items()}
    if handles:
        fig.legend(list(handles.values()), [_short(h, 70) for h in handles], loc="lower center",
                   ncol=min(3, len(handles)), fontsize=7.5, frameon=False)
    height = fig.get_figheight()
    legend_in = 0.2 + 0.17 * math.ceil(len(handles) / 3)
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 1.05 / height, bottom=(0.5 + legend_in) / height,
                        hspace=0.75, wspace=0.3)
    _save(fig, path)


# --------------------------------------------------------------------------- per-tile heatmap

def heatmap(td, path: Path) -> None:
    """Tile x column-block heatmap of log10 max |acc - S| per output, and per-tile max drift vs bound."""
    outputs = [o for o in td.drift if td.drift.get(o)]
    fig, axes = plt.subplots(2, len(outputs), figsize=(max(3.6 * len(outputs), 7.2), 7.2), squeeze=False)
    for j, o in enumerate(outputs):
        data = [[v if v > 0 else float("nan") for v in row] for row in td.drift[o]]
        flat = [v for row in data for v in row if v == v and math.isfinite(v)]
        ax = axes[0][j]
        if flat:
            im = ax.imshow(data, aspect="auto", origin="lower", interpolation="nearest", cmap="viridis",
                           norm=LogNorm(vmin=min(flat), vmax=max(flat)),
                           extent=(-0.5, len(data[0]) - 0.5, 0.5, len(data) + 0.5))
            fig.colorbar(im, ax=ax, label="max |acc - S| in block")
        else:
            ax.text(0.5, 0.5, "no drift (exact)", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"{o}: tiles of {td.tile_rows.get(o)} rows")
        ax.set_xlabel(f"column block ({td.block} columns, max over the output's rows)")
        ax.set_ylabel("after tile")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax2 = axes[1][j]
        t = list(range(1, len(td.max_drift[o]) + 1))
        for vals, label, st in ((td.max_drift[o], "max |drift|", dict(color="#d62728")),
                                (td.mean_drift[o], "mean |drift|", dict(color="#ff7f0e", ls=":")),
                                (td.max_bound[o], "bound (max over elements)", dict(color="k", ls="--"))):
            pts = [(a, b) for a, b in zip(t, vals) if b and b > 0 and math.isfinite(b)]
            if pts:
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=label, marker=".", **st)
        if ax2.lines:
            ax2.set_yscale("log")
            ax2.legend(fontsize=7)
        util = [u for u in td.utilisation[o] if u == u]
        if util:
            ax2.set_title(f"max drift / bound: {max(util):.2g}", fontsize=9)
        ax2.set_xlabel("tile index (1 = first)")
        ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax2.set_ylabel("|BF16 running value - FP32 running sum|")
        ax2.grid(True, alpha=0.3)
    fig.suptitle(_short(f"where the drift accumulates: {td.schedule} schedule, case {td.case}", 110))
    fig.tight_layout()
    _save(fig, path)


# --------------------------------------------------------------------------- gate vacuity

def vacuity(rows: Sequence[VacuityRow], path: Path) -> None:
    """max |golden| per case and output against the article's atol: below the line, zeros pass."""
    fig, ax = plt.subplots(figsize=(10, 3.4))
    threshold = ACCEPTANCE_ATOL / (1 - ACCEPTANCE_RTOL)
    any_pt = False
    for i, r in enumerate(rows):
        for pts, color, label in ((r.checked, "#2ca02c", "checked (some |golden| > atol)"),
                                  (r.vacuous, "#d62728", "vacuous (all-zero output passes)")):
            ys = [mx for _, mx in pts if mx is not None and mx > 0 and math.isfinite(mx)]
            if ys:
                any_pt = True
                jitter = [i + 0.3 * ((k * 0.618) % 1 - 0.5) for k in range(len(ys))]
                ax.scatter(jitter, ys, s=12, color=color, alpha=0.7, label=label)
    ax.axhline(threshold, color="k", ls="--", lw=1)
    ax.text(-0.45, threshold, "atol 1e-4 / (1 - 1/128)", va="bottom", ha="left", fontsize=7.5)
    if any_pt:
        ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [r.output for r in rows])
    ax.set_ylabel("max |golden| of a case")
    ax.set_title("the article's gate (rtol 1/128, atol 1e-4) accepts an all-zero output below the line")
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.1, top=0.9)
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    if uniq:
        ax.legend(uniq.values(), uniq.keys(), loc="upper right", fontsize=7.5)
    _save(fig, path)


def _main(argv=None) -> int:
    """``python -m reports.plots JOBFILE``: run a pickled list of (function, args, path) jobs
    (the render's plot workers; the job file is written by ``reports.page`` itself)."""
    import pickle
    import sys
    argv = sys.argv[1:] if argv is None else argv
    for name, args, path in pickle.loads(Path(argv[0]).read_bytes()):
        globals()[name](*args, path)
    return 0



# --------------------------------------------------------------------------- drift study

STUDY_DPI = 100   # 1200 x 860 px: fits a laptop screen at 100% zoom, 10-pt text is 14 px tall
SCHEDULE_COLOR = {"article": "#d62728", "hardened": "#1f77b4", "torch-bf16": "#2ca02c"}


def _band(ax, xs, series, color, label, **line):
    med = [v if v > 0 else float("nan") for v in series["median"]]
    lo = [v if v > 0 else float("nan") for v in series["p10"]]
    hi = [v if v > 0 else float("nan") for v in series["p90"]]
    ax.fill_between(xs, lo, hi, color=color, alpha=0.18, lw=0)
    return ax.plot(xs, med, color=color, label=label, **line)[0]


def _note(ax, lines: Sequence[str]) -> None:
    if lines:
        ax.text(0.02, 0.97, "\n".join(lines), transform=ax.transAxes, fontsize=9.5, va="top",
                bbox=dict(facecolor="white", alpha=0.85, lw=0))


def study_shape_label(study: dict, shape) -> str:
    """A drift study's sizes after M with their names: "K=64, N=128"."""
    return ", ".join(f"{d}={v}" for d, v in zip(study["axes"]["dims"], shape))


def drift_study(study: dict, family: str, path: Path) -> None:
    """One reduction family of a drift study (``cases.drift_study``, read from its JSON): per scale profile, top the
    rms drift (tiled accumulator - global sum) / rms(FP64) against M with its 10-90% band over
    seeds, the model u_acc sqrt(T/2), the deterministic bound and the gate's rms tolerance;
    bottom the gate's element-wise ratio (fails above 1) for every schedule."""
    from matplotlib.lines import Line2D

    axes_of = study["axes"]
    ARTICLE_M, FAMILIES = axes_of["acceptance_m"], axes_of["families"]
    summary = study["summary"]
    profiles = list(summary)
    schedules = axes_of["schedules"]      # name -> family -> tile_m, u_acc
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    with plt.rc_context({"font.size": 10, "axes.titlesize": 11, "legend.fontsize": 10}):
        fig, axes = plt.subplots(2, len(profiles), figsize=(6.0 * len(profiles), 8.6), squeeze=False,
                                 sharex=True)
        labels: dict[str, dict] = {}       # schedule -> {"slopes": [...], "drift": bool}
        for col, profile in enumerate(profiles):
            top, bottom = axes[0][col], axes[1][col]
            notes, gate_notes = [], []
            tile_rows = None
            for name, fams in summary[profile].items():
                fam = fams.get(family)
                if fam is None:
                    continue
                info = labels.setdefault(name, {"slopes": [], "drift": False, "tiled": False})
                color = SCHEDULE_COLOR.get(name, "#7f7f7f")
                ms, tiles = fam["m"], fam["tiles"]
                sched = schedules.get(name, {}).get(family)
                if sched is not None and sched["tile_m"]:
                    tile_rows = sched["tile_m"]
                _band(bottom, ms, fam["gate"], color, name, marker="o", ms=4, lw=1.8)
                if not any(v > 0 for v in fam["gate"]["median"]):
                    gate_notes.append(f"{name}: equal to the reference (ratio 0) at every M")
                if fam["crossing"]["interpolated"]:
                    bottom.axvline(fam["crossing"]["interpolated"], color=color, ls=":", lw=1.2)
                if all(t <= 1 for t in tiles):
                    continue      # one global sum: no tile drift by construction
                info["tiled"] = True
                if not any(v > 0 for v in fam["drift_rms"]["median"]):
                    notes.append(f"{name}: drift exactly 0 at every M")
                    continue
                info["drift"] = True
                _band(top, ms, fam["drift_rms"], color, name, marker="o", ms=4, lw=1.8)
                info["slopes"].append(f"{fam['slope']:.2f} {profile}" if fam.get("slope") is not None else "-")
                if sched is not None:
                    # the accumulator's own unit roundoff: 2^-8 for BF16, 2^-24 for an FP32 accumulator
                    # whose drift is the FP32 order of the tile partials' additions; the model of a
                    # random-sign sum over T tiles, u_acc sqrt(T/2) (``cases.drift_study.probabilistic_model``)
                    top.plot(ms, [sched["u_acc"] * math.sqrt(t / 2) for t in tiles], color=color, ls="--", lw=1.2)
                top.plot(ms, [v if v > 0 else float("nan") for v in fam["bound_max"]["median"]], color=color,
                         ls=":", lw=1.2)
            # the gate's level in drift units: rms of the element tolerance (the same for every schedule)
            any_fam = next(f[family] for f in summary[profile].values() if family in f)
            top.plot(any_fam["m"], any_fam["tolerance_rms"]["median"], color="#555555", lw=2.2, alpha=0.7)
            bottom.axhline(1.0, color="#555555", lw=2.2, alpha=0.7)
            for ax in (top, bottom):
                ax.set_xscale("log")
                ax.set_yscale("log")
                ax.grid(True, which="major", alpha=0.3)
                ax.axvline(ARTICLE_M, color="#999999", lw=0.8, ls="-.")
            bottom.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            bottom.yaxis.set_major_formatter(plain)
            bottom.yaxis.set_minor_formatter(NullFormatter())
            _note(bottom, gate_notes)
            bottom.text(ARTICLE_M, 0.02, f"M={ARTICLE_M} ", transform=bottom.get_xaxis_transform(), fontsize=9,
                        ha="right", va="bottom", color="#666666")
            outputs = " + ".join(FAMILIES[family])
            top.set_title(f"{outputs}, {profile} scale", pad=34)
            top.set_ylabel("rms(tiled - global) / rms(FP64)")
            bottom.set_ylabel("gate ratio (the gate fails above 1)")
            bottom.set_xlabel("M (rows)")
            _note(top, notes)
            if tile_rows:
                sec = top.secondary_xaxis("top", functions=(lambda m, t=tile_rows: m / t, lambda k, t=tile_rows: k * t))
                sec.set_xlabel(f"tiles T of {tile_rows} rows", fontsize=9.5)
                sec.xaxis.set_major_formatter(plain)
                sec.xaxis.set_minor_formatter(NullFormatter())
        handles, texts = [], []
        for name, info in labels.items():
            color = SCHEDULE_COLOR.get(name, "#7f7f7f")
            handles.append(Line2D([], [], color=color, marker="o", ms=4, lw=1.8))
            extra = (f"drift slope vs T {', '.join(info['slopes'])}" if info["drift"] else
                     "drift exactly 0" if info["tiled"] else "no tile drift")
            texts.append(f"{name}: median and 10-90% over seeds; {extra}")
        for style, text in ((dict(ls="--"), "model u_acc sqrt(T/2) (sqrt: slope 0.5)"),
                            (dict(ls=":"), "deterministic bound, max element (slope >= 1)"),
                            (dict(lw=2.2, alpha=0.7, color="#555555"),
                             "gate: top rms(element tolerance) / rms(FP64); bottom ratio 1")):
            handles.append(Line2D([], [], **{"color": "#333333", "lw": 1.2, **style}))
            texts.append(text)
        cfg = study["config"]
        fig.suptitle(f"{family}: tile-vs-global drift and the gate against M ({study_shape_label(study, cfg['shape'])}, "
                     f"{cfg['seeds']} seeds per M)", fontsize=12.5, y=0.995)
        fig.legend(handles, texts, loc="lower center", ncol=2, frameon=False)
        rows = math.ceil(len(handles) / 2)
        fig.subplots_adjust(left=0.08, right=0.98, top=0.87, bottom=(0.55 + 0.25 * rows) / 8.6, hspace=0.08,
                            wspace=0.22)
        fig.savefig(path, dpi=STUDY_DPI, format="png")
        plt.close(fig)


# --------------------------------------------------------------------------- loop drift study

def loop_drift(study: dict, path: Path) -> None:
    """A row-local loop's drift study (``cases.loop_drift``, from its JSON): per scale profile, the
    element-wise gate ratio of the block-by-block outputs and of each wrong kernel, and the rms
    drift of the online pass from the global one, against the number of key blocks."""
    summary = study["summary"]
    profiles = list(summary)
    fig, axes = plt.subplots(1, len(profiles), figsize=(6.5 * len(profiles), 4.6), squeeze=False)
    colors = {"o": "tab:blue", "dq": "tab:green"}
    for ax, profile in zip(axes[0], profiles):
        for o, quantities in summary[profile].items():
            ns = sorted(quantities["drift_rms"], key=int)
            blocks = [int(n) / study["block"] for n in ns]
            c = colors.get(o, "tab:gray")
            ax.plot(blocks, [quantities["gate_loop"][n]["median"] for n in ns], "-o", color=c,
                    label=f"{o}: online softmax, gate ratio")
            # one block has no drift (exactly 0): left off the log axis
            ax.plot(blocks, [quantities["drift_rms"][n]["median"] or float("nan") for n in ns], ":", color=c,
                    label=f"{o}: online vs global, rms drift / rms")
            for name in study["kernels"]:
                ax.plot(blocks, [quantities[f"gate_{name}"][n]["median"] for n in ns], "--x", color=c,
                        label=f"{o}: {name}, gate ratio")
        ax.axhline(1.0, color="black", lw=1)
        ax.text(blocks[0], 1.1, "gate (ratio 1)", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"key blocks of {study['block']} (N = blocks x {study['block']})")
        ax.set_ylabel("median over seeds")
        ax.set_title(f"attention, M={study['queries']} D={study['head_dim']}, {profile}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="center left")
    fig.tight_layout()
    fig.savefig(path, dpi=STUDY_DPI, format="png")
    plt.close(fig)


if __name__ == "__main__":      # last: a worker's jobs may name any function above
    raise SystemExit(_main())
