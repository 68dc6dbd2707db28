"""The rendered page: files, escaping, offline, baseline diff, CLI; from records of the real pipeline."""
from __future__ import annotations

import json
import re
import subprocess
import sys


from reports import render
from tests.reports.helpers import HOSTILE

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _srcs(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]*)"', html)


def test_package_render_stays_the_function_after_its_submodules_are_imported():
    """``import reports.X`` binds ``reports.X`` to the submodule; a submodule named ``render`` would
    replace the package's ``render`` function for every later ``from reports import render``
    (CI's workers failed so, depending on which test file a worker ran first)."""
    import importlib
    import pkgutil
    import types

    import reports
    for module in pkgutil.iter_modules(reports.__path__):
        if module.name != "__main__":
            importlib.import_module(f"reports.{module.name}")
    assert isinstance(reports.render, types.FunctionType)


def test_page_and_plots_exist(rendered):
    html = rendered.read_text()
    out = rendered.parent
    imgs = re.findall(r'<img[^>]+src="([^"]+)"', html)
    assert len(imgs) >= 10
    for src in imgs:
        assert not src.startswith(("/", "http:", "https:", "file:")), src     # relative: the page can move
        data = (out / src).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, src
    for section in ("matrix", "vacuity", "attribution", "drift", "tile-heatmap", "details"):
        assert f'id="{section}"' in html
    assert "tile-drift-heatmap.png" in html                     # from the records' per-tile drift


def test_no_network_resources(rendered):
    html = rendered.read_text()
    for ref in _srcs(html):
        assert ref.startswith(("#", "plots/", "data:")), ref
    assert "<script" not in html.replace("&lt;script", "")     # no scripts at all, ours or injected
    assert not re.search(r"@import|url\(\s*['\"]?https?:", html)


def test_hostile_backend_name_is_escaped(rendered, real_records):
    html = rendered.read_text()
    assert any(r["backend"] == HOSTILE for r in real_records)
    assert HOSTILE not in html and "<script>alert" not in html
    assert "my.pkg:kernel&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;&amp;amp;" in html


def test_wrong_kernel_fails_in_the_matrix_and_links_to_its_row(rendered):
    html = rendered.read_text()
    # the wrong db_g cell is a failure whose link target exists on the page
    fails = re.findall(r'<td class="st-fail"><a href="#([^"]+)" title="([^"]+)"', html)
    db = [a for a, title in fails if "db_g" in title and "kernel&lt;script" in title]
    assert db, "the 5% wrong db_g of the hostile kernel is not a failed cell"
    for anchor, _ in fails:
        assert f'id="{anchor}"' in html


def test_saturating_case_shows_nan(rendered):
    html = rendered.read_text()
    assert "M3-K8-N16-saturating-s0" in html
    assert "NaN" in html or "nan" in html.lower()


def test_baseline_diff_section(tmp_path):
    from tests.reports.helpers import cell
    now = (cell(1, HOSTILE, "db_g", "fail", max_abs_err=0.05) + cell(1, "torch-eager", "dx", "pass", max_abs_err=1e-2)
           + cell(2, "torch-eager", "dx", "pass"))
    base = (cell(1, HOSTILE, "db_g", "pass", max_abs_err=1e-4) + cell(1, "torch-eager", "dx", "pass", max_abs_err=1e-3)
            + cell(2, "torch-eager", "dx", "fail"))
    for name, recs in (("now", now), ("prev", base)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"schema": 1, "records": recs}))
    path = render(tmp_path / "now", tmp_path / "out", baseline=tmp_path / "prev", heatmap=False)
    html = path.read_text()
    assert 'id="baseline"' in html and HOSTILE not in html
    section = html[html.index('id="baseline"'):]
    new = section[section.index("New failures"):section.index("Fixed failures")]
    assert "db_g" in new and "kernel&lt;script" in new
    fixed = section[section.index("Fixed failures"):section.index("Worse beyond noise")]
    assert "M2-K8-N16-unit-s0" in fixed
    worse = section[section.index("Worse beyond noise"):]
    assert "torch-eager" in worse and "max abs err 0.001 -&gt; 0.01 (x10)" in worse


def test_cli(tmp_path):
    from tests.reports.helpers import cell
    results = tmp_path / "results"
    results.mkdir()
    (results / "results.json").write_text(json.dumps({"records": cell(2, "k", "dx", "pass")}))
    proc = subprocess.run([sys.executable, "-m", "reports", str(results), "-o", str(tmp_path / "cli"),
                           "--no-heatmap"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cli" / "index.html").exists()
    bad = subprocess.run([sys.executable, "-m", "reports", str(tmp_path / "missing"), "-o", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_renders_without_optional_fields(tmp_path):
    """Old or partial records: no metrics, no case_spec, strings for floats."""
    recs = [{"case": "M5-K8-N16-unit-s0", "backend": "k", "output": "dx", "golden": "faithful", "gated": True,
             "status": "fail", "metrics": {"max_abs_err": "inf", "ulp_p99": "nan", "worst": [{"index": None}]}},
            {"case": "weird", "backend": "k", "output": "*", "golden": "*", "status": "error"},
            {"backend": "golden:tiled:article", "output": "db_g", "golden": "faithful:faithful", "metrics": None},
            "not a record"]
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"records": recs}))
    html = render(f, tmp_path / "out", heatmap=False).read_text()
    assert "M5-K8-N16-unit-s0" in html and "st-error" in html


def test_names_matplotlib_would_misread(tmp_path):
    """A "$" in a backend name must not start matplotlib's mathtext (which fails on unbalanced $)."""
    from tests.reports.helpers import cell
    name = "pkg.mod:k$1_{x}^$$"
    recs = cell(2, name, "db_g", "pass", ulp_hist=[1, 2], log10_abs_err_hist=[3])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.json").write_text(json.dumps({"records": recs}))
    html = render(tmp_path / "r", tmp_path / "out", heatmap=False).read_text()
    assert name in html
