"""The drift study (``cases.drift_study``): its numbers come from the golden pass and agree with
the gate; its figures load in a real browser at 100% zoom on a laptop-sized window."""
from __future__ import annotations

import json
import math

import pytest

from cases.evaluate import evaluate_case, records_for
from cases.spec import CaseSpec
from kernels.registry import resolve
from cases import drift_study as S
from reports.browser import check_page, find_chromium
from operators.swiglu_backward import OPERATOR as SWIGLU


SMALL = S.StudyConfig(ms=(1024, 2049, 8192, 16384), seeds=3, profiles=("seed", "unit"), shape=(16, 32), processes=1)


@pytest.fixture(scope="module")
def study():
    return S.run(SMALL, progress=None)


def _family(study, profile, schedule, fam):
    return study["summary"][profile][schedule][fam]


def test_every_planned_case_is_measured_once(study):
    keys = [(p["profile"], p["m"], p["seed"], p["schedule"]) for p in study["points"]]
    assert len(keys) == len(set(keys)) == 2 * 4 * 3 * 3


def test_drift_is_zero_for_one_global_sum_and_grows_with_the_bf16_tiles(study):
    for profile in SMALL.profiles:
        for fam in S.axes(SWIGLU).families:
            torch_path = _family(study, profile, "torch-bf16", fam)
            assert set(torch_path["drift_rms"]["median"]) == {0.0}      # no tiles: nothing to drift
            article = _family(study, profile, "article", fam)["drift_rms"]["median"]
            assert article[-1] > 1.5 * article[0] > 0, article
            # FP32 accumulators: the drift is FP32 rounding, four orders of magnitude below BF16's
            hardened = _family(study, profile, "hardened", fam)["drift_rms"]["median"]
            assert max(hardened) < 1e-4 * article[-1], (hardened, article)
    # the hardened db tiles are the golden's own 1024-row blocks, both summed in FP32: the same sums
    assert set(_family(study, "seed", "hardened", "db")["drift_rms"]["median"]) == {0.0}


def test_the_study_counts_what_the_gate_counts():
    """A backend that computes exactly the article's tiled emulation, through the matrix's own
    evaluation: its dw mismatch count is the study's gate_fails at the same case."""
    # gate ratios 1.5-2.1 on all four outputs here: far enough above 1 that another CPU's FP32
    # summation order cannot turn a failure into a pass
    spec = CaseSpec(220000, 16, 32, "unit", 2)
    article = [s for s in S.axes(SWIGLU).declared_schedules() if s.name == "article"]
    (point,) = S.measure_case(spec, article)
    backend = resolve(SWIGLU, "tiled-emulation")
    outcome = evaluate_case(spec, [backend], benchmark=None)
    gated = {r["output"]: r["metrics"]["mismatches"] for r in records_for(outcome, backend.name)
             if r.get("golden") == "reference"}
    for o in ("db_g", "db_fc", "dw_g", "dw_fc"):
        assert gated[o] == point.outputs[o].gate_fails, (o, gated[o], point.outputs[o])
    assert all(point.outputs[o].gate_fails > 0 for o in ("db_g", "db_fc", "dw_g", "dw_fc"))   # failures exercised


def test_slope_and_crossing_arithmetic():
    tiles = [1, 2, 4, 8, 16, 32]
    assert S.fit_slope(tiles, [3e-3 * math.sqrt(t) for t in tiles]) == pytest.approx(0.5)
    assert S.fit_slope(tiles, [1e-3 * t for t in tiles]) == pytest.approx(1.0)
    assert S.fit_slope([1, 2], [1.0, 2.0]) is None                     # too few points with T >= 2
    c = S.crossing([1000, 4000, 16000], [0.5, 0.5, 2.0])
    assert c["between"] == [4000, 16000] and c["interpolated"] == pytest.approx(8000)
    assert S.crossing([1000, 4000], [0.5, 0.9])["m"] is None


def test_cli_writes_the_json_the_table_and_both_figures(tmp_path):
    from PIL import Image

    from reports.__main__ import main as reports_main
    out = tmp_path / "drift"
    assert S.main(["-o", str(out), "--ms", "1024", "4096", "8192", "--seeds", "2", "--shape", "8,16",
                   "--processes", "1"]) == 0
    study = json.loads((out / "drift.json").read_text())
    assert study["config"]["seeds"] == 2 and len(study["points"]) == 2 * 3 * 2 * 3
    assert study["config"]["operator"] == "swiglu_backward" and set(study["axes"]["families"]) == {"db", "dw"}
    assert "| seed | dw | article |" in (out / "drift.md").read_text()
    assert reports_main(["drift", str(out)]) == 0           # the figures, from the JSON alone
    for fam in ("db", "dw"):
        width, height = Image.open(out / f"drift-{fam}.png").size
        assert (width, height) == (1200, 860)     # fits a 1366-px laptop screen at 100% zoom
    assert S.main(["-o", str(out), "--seeds", "0"]) == 2
    assert S.main(["-o", str(out), "--shape", "8"]) == 2      # SwiGLU has two sizes after M
    assert S.main(["-o", str(out), "--operator", "nosuchop"]) == 2
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "drift.json").write_text(json.dumps({"config": {}, "summary": {}}))
    assert reports_main(["drift", str(tmp_path / "old")]) == 2      # written before the study kept its axes


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (/usr/bin/chromium); "
                                                    "install it with: apt-get install -y chromium")
def test_study_heads_the_drift_section_in_a_browser(tmp_path, study, results_dir):
    from reports.page import render
    S.write(study, tmp_path / "report" / "drift")
    page = render(results_dir, tmp_path / "report", heatmap=False)
    html = page.read_text()
    assert html.index("study-db") < html.index("Per case: the cells this run evaluated")
    res = check_page(page, width=1366, height=768)
    study_imgs = [i for i in res.images if "study-" in i["src"]]
    assert len(study_imgs) == 2 and not res.broken_images and not res.errors, (res.images, res.errors)
    for img in study_imgs:     # shown at its own size: nothing shrinks the legend's 10-pt text
        assert img["width"] <= 1366 and img["shown_width"] == img["width"], img
