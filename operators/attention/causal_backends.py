"""The causal operator's backends: ``operators.attention.backends``'s, with the causal mask."""
from __future__ import annotations

from operators.attention.backends import make
from operators.attention.causal import FLASH, SCHEDULES, TORCH_BF16, TORCH_FLASH_CPU

torch_eager, torch_compile, torch_flash_cpu, torch_fp32, flash_emulation = make(True, SCHEDULES, FLASH, TORCH_BF16, TORCH_FLASH_CPU)
