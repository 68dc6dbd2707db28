"""The schedule protocol's old address: ``contract.schedule`` holds ``RoundingPlan``,
``TiledSchedule`` and ``ScheduleSet``; an operator's reference schedules are read from its
declaration (``operator.schedules.FP64_GLOBAL``, ...)."""
from contract.schedule import RoundingPlan, ScheduleSet, TiledSchedule  # noqa: F401
