"""The article's schedule for the three PyPTO kernels: the one source of truth for
their tile sizes and accumulator dtypes, read by the kernels and by the tiled golden.

Numbers from the article (PyPTO-Gym fused_swiglu_grad): tile_m 1024 for b and x,
2048 for w (its [K,N] output makes fewer, wider tiles cheaper); db and dw
accumulate in place into their zeroed BF16 outputs, ``out[:] = out + cast(partial, BF16)``.
Importing this module does not import pypto.
"""
import torch

from operators.swiglu_backward.schedule import RoundingPlan, TiledSchedule

ARTICLE = TiledSchedule(
    name="article",
    tile_m_b=1024, tile_m_w=2048, tile_m_x=1024,
    db_accumulator=torch.bfloat16, dw_accumulator=torch.bfloat16,
    plan=RoundingPlan(sigmoid="exp_ratio"),
)

# The hardened variant: stable sigmoid and FP32 accumulators for db and dw,
# rounded to BF16 once after the last tile.
HARDENED = TiledSchedule(
    name="hardened",
    tile_m_b=1024, tile_m_w=2048, tile_m_x=1024,
    db_accumulator=torch.float32, dw_accumulator=torch.float32,
    plan=RoundingPlan(sigmoid="stable"),
)
