"""The drift figure of a run that writes a report: a small drift study of each operator of the
run (``cases.drift_study``: the operator's own M grid at its acceptance profile, ``--drift-seeds``
seeds), made beside the cells and written into the run folder (``RUN/drift/<operator>``), so the
report's drift section is this run's, of this code, never a stale study's."""
from __future__ import annotations

from cases import loop_drift
from cases.drift_study import StudyConfig, axes, run, write
from cases.plugin import run_folder, run_id
from runs.results import DRIFT_STUDIES


def test_drift_study(request, study_operator):
    """Collected only for a run with --report-dir and --drift-seeds > 0 (``cases.plugin``)."""
    config = request.config
    seeds = config.getoption("--drift-seeds")
    ax = axes(study_operator)
    study = run(StudyConfig(operator=study_operator, seeds=seeds, profiles=ax.profiles[:1], processes=1),
                progress=None)
    study["run"] = run_id(config)
    paths = write(study, run_folder(config) / DRIFT_STUDIES / study_operator)
    assert paths["json"].is_file()


def test_loop_drift_study(request, loop_operator):
    """Collected, like the drift study, only for a run with --report-dir and --drift-seeds > 0, for
    each of its operators with a row-local loop over key blocks (``cases.loop_drift.applies``): the
    online softmax's drift at the unit profile, N up to 32768."""
    config = request.config
    study = loop_drift.run(seeds=config.getoption("--drift-seeds"), profiles=("unit",), processes=1, progress=None,
                           operator=loop_operator)
    study["run"] = run_id(config)
    paths = loop_drift.write(study, run_folder(config) / DRIFT_STUDIES / loop_operator)
    assert paths["json"].is_file()
