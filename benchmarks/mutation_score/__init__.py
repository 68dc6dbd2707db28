"""The gate's mutation score over a plain kernel (``python -m benchmarks.mutation_score``)."""
