"""Triton backends of the fused SwiGLU backward (``backend.py``). Importing this package
imports neither triton nor any kernel; ``backend.py`` imports triton only when a case runs."""
