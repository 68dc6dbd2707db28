"""The metrics' one declaration (``contract.metric_table``) and what is made from it agree: the
keys ``ErrorStats.finalize`` writes, in their order and in both forms; the fields of the typed
records; the compiled pass's accumulator slots (each written by the pass and read back); the
report's detail columns. And numba's cache of the compiled pass, which does not see an edit of
the table, is refused when the table's slots changed under it."""
import importlib
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from accuracy import compiled_pass, metrics
from accuracy.metrics import ErrorStats
from accuracy.tolerances import Tolerance
from contract import metric_table as T
from contract.records import Aggregate, DualMetrics, Metrics

# the module, not the function ``reports.data`` exports under its name
report_details = importlib.import_module("reports.data.details")
ROOT = Path(__file__).resolve().parents[2]
TABLES = {"metrics": T.METRICS, "aggregate": T.AGGREGATE, "dual": T.DUAL}


def _records(compiled: bool) -> tuple[dict, dict]:
    """A full record (FP64 values, an allowance, a bound, the dual metrics) and a dual-only one."""
    g = torch.Generator().manual_seed(0)
    exact = torch.randn(64, 48, generator=g, dtype=torch.float64)
    reference = exact.to(torch.bfloat16)
    actual = (exact * (1 + 2 ** -8 * torch.randn(64, 48, generator=g, dtype=torch.float64))).to(torch.bfloat16)
    out = []
    for kwargs, extra in (({"dual": True}, {"exact": exact, "allowance": (exact.abs() * 2 ** -9).float(),
                                            "bound": (exact.abs() * 2 ** -7).float()}),
                          ({"dual_only": True}, {})):
        st = ErrorStats(Tolerance(1 / 128, 1e-4), (64, 48), **kwargs)
        if not compiled:
            st._update_compiled = lambda *a, **k: False
        st.update(actual, reference, **extra)
        out.append(st.finalize())
    return out[0], out[1]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "eager"])
def test_finalize_writes_the_declared_keys_in_their_order(compiled):
    full, dual_only = _records(compiled)
    assert tuple(full) == T.keys(T.METRICS, T.FULL)
    assert tuple(dual_only) == T.keys(T.METRICS, T.DUAL_ONLY)
    assert tuple(full["aggregate"]) == T.keys(T.AGGREGATE)
    assert tuple(full["dual"]) == tuple(dual_only["dual"]) == T.keys(T.DUAL)


def test_a_computed_key_the_table_lacks_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"\['rmse'\] declared and not computed, \['rmse_new'\] computed"):
        T.ordered(T.DUAL, {("rmse_new" if k == "rmse" else k): 0 for k in T.keys(T.DUAL)})


def test_the_typed_records_declare_the_table_keys():
    every_form = {name: tuple(m.key for m in table) for name, table in TABLES.items()}
    assert Metrics.keys() == every_form["metrics"]
    assert Aggregate.keys() == every_form["aggregate"]
    assert DualMetrics.keys() == every_form["dual"]
    assert {k: v.keys() for k, v in Metrics.NESTED.items() if k in T.NESTED_TABLES} == {
        k: tuple(m.key for m in table) for k, table in T.NESTED_TABLES.items()}


@pytest.mark.parametrize("name", TABLES)
def test_each_key_is_declared_once_with_a_meaning_and_its_forms(name):
    table = TABLES[name]
    assert len({m.key for m in table}) == len(table)
    for m in table:
        assert m.meaning.strip() and "\n" not in m.meaning, m.key
        assert m.forms and set(m.forms) <= set(T.FORMS), m.key


def test_the_compiled_pass_numbers_the_declared_slots():
    assert len(set(T.SLOTS)) == len(T.SLOTS) == compiled_pass.N_SLOTS
    assert [getattr(compiled_pass, name) for name in T.SLOTS] == list(range(len(T.SLOTS)))
    named = {s for table in TABLES.values() for m in table for s in m.slots}
    assert named <= set(T.SLOTS), named - set(T.SLOTS)


@pytest.mark.parametrize("slot", T.SLOTS)
def test_every_slot_is_written_by_the_pass_and_read_back(slot):
    written = inspect.getsource(compiled_pass.compare_slices.py_func)
    read = inspect.getsource(metrics.ErrorStats._update_compiled)
    assert f"row[{slot}]" in written
    assert re.search(rf"compiled_pass\.{slot}\b", read), slot


def test_the_detail_columns_are_declared_metrics_in_one_order():
    columns = T.detail_columns()
    assert [c.place for _, c in columns] == list(range(1, len(columns) + 1))
    paths = {}
    for path, c in columns:
        table = T.METRICS if len(path) == 1 else T.NESTED_TABLES[path[0]]
        assert path[-1] in {m.key for m in table}, path
        assert c.band is None or c.band in {m.key for m in table}, (path, c.band)
        assert c.format in T.FORMATS and c.golden in T.COLUMN_GOLDENS, path
        for key in (path[-1], c.band):
            assert paths.setdefault(key, path[:-1]) == path[:-1], key    # the report keys values by name
    assert report_details.DETAIL_COLUMNS == columns


def test_a_detail_row_shows_the_declared_columns_of_a_record():
    full, _ = _records(compiled=True)
    values = report_details._detail_values(Metrics.from_json(full))
    row = report_details.DetailRow(None, "pass", "", "reference", values, values, [])
    assert [c.column for c in row.cells] == [c for _, c in T.detail_columns()]
    assert values["ulp_max"] == full["ulp_max"] and values["scale_beta"] == full["aggregate"]["scale_beta"]


def _import_compiled_pass(tree: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "NUMBA_CACHE_DIR": ""}
    return subprocess.run([sys.executable, "-c", "import accuracy.compiled_pass"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


def test_machine_code_cached_with_other_slots_is_refused(tmp_path):
    """numba's cache follows the compiled pass's own file: slots reordered in the table alone would
    leave the cached code writing the old slots. The import refuses it; an edit of the pass's file
    recompiles."""
    for package, module in (("accuracy", "compiled_pass.py"), ("contract", "metric_table.py")):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        shutil.copy(ROOT / package / module, tmp_path / package / module)
    assert _import_compiled_pass(tmp_path).returncode == 0        # compiled and cached
    table = tmp_path / "contract" / "metric_table.py"
    table.write_text(table.read_text().replace('"N_VISIBLE", "SQ_B",', '"SQ_B", "N_VISIBLE",'))
    stale = _import_compiled_pass(tmp_path)
    assert stale.returncode != 0 and "StaleCache" in stale.stderr, stale.stderr
    source = tmp_path / "accuracy" / "compiled_pass.py"
    source.write_text(source.read_text() + "\n")
    assert _import_compiled_pass(tmp_path).returncode == 0, "an edit of the pass's file recompiles it"
