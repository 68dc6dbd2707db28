"""The Ray launcher (``cases/ray_launch.py``) on a local Ray cluster with two pretend NPUs:
device assignment, the merged shards against a local run, a shard that dies."""
from __future__ import annotations

import time

import pytest

from cases.ray_launch import device_env, launch, parse_resources

ray = pytest.importorskip("ray", reason="the Ray extra is not installed: pip install -e '.[ray]'")
pytestmark = pytest.mark.xdist_group("ray-cluster")     # one local cluster per session, on one worker

# four small cases, one per shard of 4 (cases/shards.py's hash); backends in-process (no child
# process per backend: the shards' pytest start-up is what this costs)
SELECT = ["-k", "M1-K512 or M2-K96 or M1-K96 or M1024-K96-N200-cancellation", "--benchmark", "none", "-p", "no:xdist", "--no-isolation",
          "--backend", "torch-eager", "--backend", "tests.reports.kernels:wrong_db_g"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, resources={"NPU": 2}, include_dashboard=False, log_to_driver=False,
             object_store_memory=256 << 20)
    yield ray.cluster_resources()
    ray.shutdown()


def test_resources_parse_and_refuse():
    assert parse_resources(["NPU=1", "CPU=2", "CPU=1"]) == {"NPU": 1.0, "CPU": 3.0}
    for bad in (["NPU"], ["NPU=0"], ["=1"], ["GPU=x"]):
        with pytest.raises(ValueError, match="NAME=AMOUNT"):
            parse_resources(bad)
    # ids ascend (CANN), a kind not asked for but present is hidden, an absent kind is left alone
    assert device_env({"NPU": ["10", "2"]}, {"NPU": 2}, {"NPU": 16}) == {"ASCEND_RT_VISIBLE_DEVICES": "2,10"}
    assert device_env({}, {"CPU": 1}, {"NPU": 16, "GPU": 8}) == {"ASCEND_RT_VISIBLE_DEVICES": "",
                                                                 "CUDA_VISIBLE_DEVICES": ""}
    assert device_env({}, {"CPU": 1}, {"CPU": 2}) == {}


def test_concurrent_npu_shards_see_different_devices(cluster):
    @ray.remote(resources={"NPU": 1}, num_cpus=1)
    def probe():
        time.sleep(0.5)        # both tasks hold their NPU at once
        return device_env(ray.get_runtime_context().get_accelerator_ids(), {"NPU": 1}, cluster)

    seen = ray.get([probe.remote(), probe.remote()])
    assert sorted(s["ASCEND_RT_VISIBLE_DEVICES"] for s in seen) == ["0", "1"]


def test_ray_shards_merge_to_the_local_run(cluster, tmp_path):
    import subprocess
    import sys

    from runs.results import load_results
    from cases.ray_launch import ROOT
    summary = launch(SELECT, 4, {"CPU": 1}, tmp_path / "merged", echo=lambda line: None)
    assert summary["lost"] == {} and summary["empty"] == [] and summary["missing"] == 0 and summary["planned"] == 8
    local = subprocess.run([sys.executable, "-m", "pytest", "cases/", "-q", "-p", "no:cacheprovider",
                            "--results-dir", str(tmp_path / "local"), *SELECT], cwd=ROOT, capture_output=True)
    assert local.returncode == 1        # the wrong kernel fails, in both

    def verdicts(path):
        return sorted((r["case"], r["backend"], r["output"], r["golden"], r.get("status"))
                      for r in load_results(path)["records"])
    assert verdicts(tmp_path / "merged") == verdicts(tmp_path / "local")
    failing = {(c, b) for c, b, _, _, status in verdicts(tmp_path / "local") if status in ("fail", "error")}
    assert summary["failing_cells"] == len(failing) > 0      # streamed progress counted them


def test_a_shard_that_dies_twice_is_recorded_missing(cluster, tmp_path):
    select = ["-k", "M2-K96 or M1-K512", "--benchmark", "none", "-p", "no:xdist", "--no-isolation",
              "--backend", "tests.core.dying_kernels:die_at_m2"]
    summary = launch(select, 1, {"CPU": 1}, tmp_path / "merged", echo=lambda line: None)
    assert list(summary["lost"]) == [0] and "exited with 7" in summary["lost"][0]
    from runs.results import load_results
    merged = load_results(tmp_path / "merged")
    assert {(m["case"], m["backend"]) for m in merged["missing"]} == {
        ("M2-K96-N200-unit-s0", "tests.core.dying_kernels:die_at_m2"),
        ("M1-K512-N1024-seed-s0", "tests.core.dying_kernels:die_at_m2")}
