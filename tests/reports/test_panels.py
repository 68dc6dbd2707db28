"""A report panel is one module (its data and plot jobs) plus its template block, listed once in
``reports.panels.order``: the page renders whatever that list holds, in its order."""
from __future__ import annotations

import json

from jinja2 import ChoiceLoader, FileSystemLoader

from reports import data as D
from reports import page
from reports.panels import Context, Panel, order
from tests.reports.helpers import cell

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_every_panel_has_its_template_block():
    names = [p.name for p in order.PANELS]
    assert len(set(names)) == len(names), names
    missing = [p.template for p in order.PANELS if not (page.TEMPLATES / p.template).is_file()]
    assert missing == []


def _cases(context: Context) -> dict:
    return {"cases": len(context.idx.cases), "src": context.image("cases-panel")}


def _cases_plot(context: Context, data: dict) -> list:
    return [("vacuity", (D.vacuity(context.idx)[0],), context.out / data["src"])]


CASES_PANEL = Panel("cases_panel", _cases, _cases_plot)
CASES_BLOCK = '\n<h2 id="cases-panel">Cases</h2>\n<p class="note">{{ data.cases }} case(s)</p>\n<img src="{{ data.src }}">\n'


def test_a_panel_is_a_module_and_its_block_listed_once(tmp_path, monkeypatch):
    """A panel registered after the gate vacuity shows its block there, with its data and its
    plot, drawn in the same one pool as every other panel's."""
    (tmp_path / "templates" / "panels").mkdir(parents=True)
    (tmp_path / "templates" / CASES_PANEL.template).write_text(CASES_BLOCK)
    real_environment = page.environment

    def environment():
        env = real_environment()
        env.loader = ChoiceLoader([env.loader, FileSystemLoader(str(tmp_path / "templates"))])
        return env

    pools = []

    def one_pool(jobs, processes):
        pools.append([name for name, _, _ in jobs])
        return real_pool(jobs, processes)

    real_pool = page._run_plot_jobs
    after = [p.name for p in order.PANELS].index("vacuity") + 1
    monkeypatch.setattr(order, "PANELS", order.PANELS[:after] + (CASES_PANEL,) + order.PANELS[after:])
    monkeypatch.setattr(page, "environment", environment)
    monkeypatch.setattr(page, "_run_plot_jobs", one_pool)
    (tmp_path / "r").mkdir()
    records = cell(1, "k", "dx", "pass") + cell(2, "k", "dx", "fail")
    (tmp_path / "r" / "results.json").write_text(json.dumps({"records": records}))

    html = page.render(tmp_path / "r", tmp_path / "out", heatmap=False).read_text()
    assert html.index('id="vacuity"') < html.index('id="cases-panel"') < html.index('id="attribution"')
    assert '<p class="note">2 case(s)</p>' in html
    assert (tmp_path / "out" / "plots" / "cases-panel.png").read_bytes().startswith(PNG_MAGIC)
    assert len(pools) == 1 and {"vacuity", "histograms"} <= set(pools[0]) and pools[0].count("vacuity") == 2
