"""The tiled golden's emulations of the reference schedules, served as backends.

A kernel that follows the article's schedule exactly should be indistinguishable from
``tiled_emulation``; the hardened schedule (FP32 accumulators across tiles) from
``tiled_emulation_hardened``. Where the article's schedule fails the gate (its BF16
accumulators across tiles, at its own case), it is the schedule that fails, not a kernel.
"""
from __future__ import annotations

from goldens.emulation import ScheduleEmulation
from operators.swiglu_backward.schedule import ARTICLE, HARDENED
from operators.swiglu_backward import OPERATOR

# each a kernel whose outputs are stored once in BF16; a case evaluation serves them from its own
# golden pass instead of calling them (``goldens.emulation``)
tiled_emulation = ScheduleEmulation(OPERATOR, ARTICLE, "tiled_emulation")
tiled_emulation_hardened = ScheduleEmulation(OPERATOR, HARDENED, "tiled_emulation_hardened")
