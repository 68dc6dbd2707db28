"""A sweep of hostile inputs: kernels, attacks on the harness and user errors (``python -m benchmarks.hostile_sweep``)."""
