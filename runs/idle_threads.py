"""OpenMP threads that wait sleep instead of spinning, in a run of several worker processes.

libgomp, the OpenMP runtime of torch's CPU kernels and of numba's parallel loops, lets a thread
that waits at a barrier spin before it sleeps (``OMP_WAIT_POLICY``'s default). That pays off when
each thread has a core of its own. Two xdist workers of two threads each on two cores do not:
a waiting thread spins through the time slice of the thread it waits for, at every barrier of
every chunk. Measured on a 2-core AMD EPYC (AVX2), one evaluation of M=131072, K=96, N=200 with
three backends (``tests/mutants/test_localized_bugs.py``'s case): alone 34.8 s by default and
36.5 s passive; two at once 250 s each by default (324 s with one thread each) and 52 s passive.

The policy is read once, when the runtime loads, so it is set in the environment the workers
start with (``pytest_configure`` of a controller with more than one worker), and it reaches the
processes they start. A value the user set is kept; the run manifest says which (``state``).
Speed only: values, golden bits and verdicts do not depend on how a thread waits.
"""
from __future__ import annotations

import os

VARIABLE = "OMP_WAIT_POLICY"
ONE_PROCESS = {"set": False, "why": "one process: the default policy"}
_state: dict = ONE_PROCESS


def sleep_while_waiting(workers: int, environ=os.environ) -> dict:
    """``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` for a run of ``workers`` processes (more than
    one), unless it is set already; returns ``state()``."""
    global _state
    if VARIABLE in environ:
        _state = {"set": False, "why": f"set in the environment: {VARIABLE}={environ[VARIABLE]}"}
    elif workers > 1:
        environ[VARIABLE] = "PASSIVE"
        _state = {"set": True, "value": "PASSIVE", "workers": workers}
    else:
        _state = ONE_PROCESS
    return state()


def state() -> dict:
    return dict(_state)
