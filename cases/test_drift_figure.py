"""The drift figure of a run that writes a report: a small drift study of each operator of the
run (``cases.drift_study``: the operator's own M grid at its acceptance profile, ``--drift-seeds``
seeds), made beside the cells and written into the run folder (``RUN/drift/<operator>``), so the
report's drift section is this run's, of this code, never a stale study's."""
from __future__ import annotations

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
