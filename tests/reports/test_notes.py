"""The report's notes say what the gate compares with and where known failures live."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_report_notes_name_the_reference_and_the_expectations_folder(tmp_path):
    """They said the gate compares with the faithful golden and pointed at cases/expectations/."""
    from reports import render
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"records": [{"case": "M5-K8-N16-unit-s0", "backend": "k", "output": "*",
                                          "golden": "*", "status": "error"}],
                             "manifest": {"facts": {}}}))
    html = render(f, tmp_path / "out", heatmap=False).read_text()
    notes = html.split('id="notes"', 1)[1]
    assert "The gate compares with the reference" in notes and "compares with the faithful golden" not in notes
    assert "cases/expectations/" not in html
    import operators
    assert f"Known failures (<code>{operators.get().expectations.relative_to(ROOT)}/</code>)" in html
