"""The causal forward operator's backends: ``operators.attention.forward_backends``'s, with the causal mask."""
from __future__ import annotations

from operators.attention.forward_backends import make
from operators.attention.forward_causal import REFERENCE, SCHEDULES

(torch_eager, torch_compile, torch_flash_cpu, torch_fp32, flash_emulation, triton_flash, torch_flash_cuda,
 torch_efficient_cuda) = make(True, SCHEDULES, REFERENCE)
