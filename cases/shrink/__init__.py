"""A failing cell shrunk to the smallest case that fails the same output by the same test.

``failure``: which of the gate's tests an output fails; ``cell``: the failing cell of a run read
from its records; ``probe``: one case judged in process by the matrix's own evaluation, with a
time limit; ``search``: the order the case is shrunk in (M, the other dimensions, the scale
profile, the seed) under a time budget; ``python -m accuracy shrink RESULTS CELL``
(``cases.shrink.__main__``): the command.
"""
