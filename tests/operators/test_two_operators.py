"""Two operators in one pytest run: one results file and one report with a section per operator,
merged and diffed like a one-operator run."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from reports.page import render
from tests.operators.matrix_run import ROOT, verdicts

WRONG_TOY = "tests.operators.toy.backends:first_row_dropped"


def test_two_operators_in_one_run_give_one_results_file_and_one_report(tmp_path):
    args = ["--operator", "swiglu_backward", "--operator", "tests.operators.toy", "--profile", "none",
            "--case", "swiglu_backward:1025,96,200,unit", "--case", "toy:1500,33,unit", "--case", "toy:3,8,tiny",
            "--backend", "torch-eager", "--backend", "tiled-emulation", "--backend", WRONG_TOY,
            # the drift study of a run is tests/reports/test_run_drift_study.py's, a backend's child
            # process tests/core/test_cells_confined.py's: this test checks neither
            "--drift-seeds", "0", "--no-isolation"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "cases/", "-p", "no:xdist", "-p", "no:cacheprovider",
                           *args, "--results-dir", str(tmp_path / "r"), "--report-dir", str(tmp_path / "report")],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    text = proc.stdout[-3000:] + proc.stderr[-3000:]
    # the toy's wrong kernel does not exist for the SwiGLU backward: its cells there fail with the reason
    [results] = sorted((tmp_path / "r").glob("runs/*/results.json"))
    data = json.loads(results.read_text())
    selection = data["manifest"]["selection"]
    assert selection["operator"] == ["swiglu_backward", "tests.operators.toy"], text
    assert selection["case_operators"] == {"M1025-K96-N200-unit-s0": "swiglu_backward",
                                           "M1500-N33-unit-s0": "tests.operators.toy",
                                           "M3-N8-tiny-s0": "tests.operators.toy"}
    cells = verdicts(data["records"])
    for case in ("M1500-N33-unit-s0", "M3-N8-tiny-s0"):
        assert cells[("torch-eager", case)] == cells[("tiled-emulation", case)] == {"y": "pass", "z": "pass"}
        assert cells[(WRONG_TOY, case)] == {"y": "pass", "z": "fail"}, cells[(WRONG_TOY, case)]
    swiglu = {"dg", "dfc", "db_g", "db_fc", "dw_g", "dw_fc", "dx"}
    for name in ("torch-eager", "tiled-emulation"):
        outputs = cells[(name, "M1025-K96-N200-unit-s0")]
        assert set(outputs) == swiglu and set(outputs.values()) == {"pass"}, (name, outputs)
    assert proc.returncode == 1, text      # the wrong kernels fail the run
    page = (tmp_path / "report" / "index.html").read_text()
    assert 'id="op-swiglu_backward"' in page and 'id="op-toy"' in page
    for op in ("swiglu_backward", "toy"):
        assert (tmp_path / "report" / op / "index.html").is_file()
    # each page's verdict matrix holds its own operator's cells (row anchors "#r-<case>-<backend>-<output>")
    assert 'href="#r-m1500-n33-unit-s0-' in (tmp_path / "report" / "toy" / "index.html").read_text()
    swiglu_page = (tmp_path / "report" / "swiglu_backward" / "index.html").read_text()
    assert 'href="#r-m1025-k96-n200-unit-s0-' in swiglu_page and 'href="#r-m1500-n33-unit-s0-' not in swiglu_page
    # merged and diffed like any run
    run = results.parent
    merged = subprocess.run([sys.executable, "-m", "accuracy", "merge", str(run), "-o", str(tmp_path / "merged")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    diff = subprocess.run([sys.executable, "-m", "accuracy", "diff", str(run), str(tmp_path / "merged")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert diff.returncode == 0 and " 0 differ" in diff.stdout, diff.stdout + diff.stderr
    # a drift study heads the page of its own operator only (docs/drift: the SwiGLU backward's)
    (tmp_path / "report2" / "drift").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "drift" / "drift.json", tmp_path / "report2" / "drift" / "drift.json")
    render(run, tmp_path / "report2", heatmap=False)
    assert 'src="plots/study-db.png"' in (tmp_path / "report2" / "swiglu_backward" / "index.html").read_text()
    assert "study-db" not in (tmp_path / "report2" / "toy" / "index.html").read_text()
    # named for a page of another operator alone, it is refused
    toy_run = tmp_path / "toy-run"
    toy_run.mkdir()
    toy_data = {**data, "manifest": {**data["manifest"], "selection": {**selection, "operator": "tests.operators.toy"}},
                "records": [r for r in data["records"] if selection["case_operators"].get(r["case"]) != "swiglu_backward"]}
    (toy_run / "results.json").write_text(json.dumps(toy_data))
    with pytest.raises(FileNotFoundError, match="a drift study of operator 'swiglu_backward', not of"):
        render(toy_run, tmp_path / "report3", heatmap=False, drift_study=tmp_path / "report2" / "drift")
    # a planned cell without a record is its own operator's: counted on its page and its index row only
    lost_run = tmp_path / "lost-run"
    lost_run.mkdir()
    (lost_run / "results.json").write_text(json.dumps({**data, "missing": [{"case": "M3-N8-tiny-s0", "backend": "lost"}]}))
    render(lost_run, tmp_path / "report4", heatmap=False)
    assert "<code>M3-N8-tiny-s0 / lost</code>" in (tmp_path / "report4" / "toy" / "index.html").read_text()
    assert ">lost<" not in (tmp_path / "report4" / "swiglu_backward" / "index.html").read_text()
    index = re.sub(r">\s+<", "><", (tmp_path / "report4" / "index.html").read_text())
    zeros = '<td class="n">0</td>' * 6        # pass, fail, known failure, known failure passed, skipped, error
    assert f'<code>lost</code></td><td class="n">2</td>{zeros}<td class="n">2</td>' in index, \
        index[index.index('id="op-toy"'):][:1500]
