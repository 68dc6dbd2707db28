"""The article's three PyPTO kernels (b, w, x) for the fused SwiGLU backward."""
