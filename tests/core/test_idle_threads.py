"""OpenMP's waiting threads sleep in a run of several workers (``runs.idle_threads``), a policy
the user set is kept, and the run manifest says which."""
from __future__ import annotations

import os
import subprocess
import sys

from runs import idle_threads
from tests.operators.matrix_run import ROOT


def test_several_workers_get_the_passive_policy_and_one_process_keeps_the_default():
    env: dict[str, str] = {}
    assert idle_threads.sleep_while_waiting(2, env) == {"set": True, "value": "PASSIVE", "workers": 2}
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}
    alone: dict[str, str] = {}
    assert idle_threads.sleep_while_waiting(1, alone) == idle_threads.ONE_PROCESS and alone == {}


def test_a_policy_the_user_set_is_kept():
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    state = idle_threads.sleep_while_waiting(2, env)
    assert env == {"OMP_WAIT_POLICY": "ACTIVE"}
    assert state == {"set": False, "why": "set in the environment: OMP_WAIT_POLICY=ACTIVE"}


def test_the_workers_of_a_run_start_with_it(tmp_path):
    """Through two xdist workers: each reports the policy its process started with."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import os\n\ndef test_policy(worker_id):\n"
                     "    print('POLICY', worker_id, os.environ.get('OMP_WAIT_POLICY'))\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-rP", "-p", "cases.plugin",
                           "--rootdir", str(tmp_path), str(probe)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "POLICY gw0 PASSIVE" in proc.stdout or "POLICY gw1 PASSIVE" in proc.stdout, proc.stdout[-3000:]
    assert " None" not in "".join(l for l in proc.stdout.splitlines() if l.startswith("POLICY")), proc.stdout
