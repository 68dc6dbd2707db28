"""Plain plug-in kernels written as a user would write them: torch only, nothing declared.

The correct ones take different legitimate paths through the operator (which intermediates
are stored in BF16, where db is summed from); the wrong ones are wrong in ways no tile
loop mutant covers. The gate must pass every correct one and fail every wrong one, on
their numbers alone: ``bf16_math`` even declares its BF16 math, and still fails.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from operators.swiglu_backward.schedule import RoundingPlan, TiledSchedule

BF16 = torch.bfloat16


def _backward(x, w_g, w_fc, dy, g, fc, *, math=torch.float32, store_intermediates=False,
              db_from_stored=True, dx_products_stored=False, store: Callable = None,
              store_downstream: Callable = None, sigmoid: Callable = torch.sigmoid,
              factor_g: Callable = None):
    """dg/dfc in ``math``, stored with ``store`` (BF16 round to nearest by default); db, dw, dx
    from the stored values (or db from the unrounded ones) as FP32 (or ``math``) matmuls, stored
    with ``store_downstream`` (``store`` by default); ``factor_g``: what g becomes in dg's factor
    1 + g (1 - s) (itself by default)."""
    store = store or (lambda t: t.to(BF16))
    out = store_downstream or store
    dy, g, fc = (t.to(math) for t in (dy, g, fc))
    s = sigmoid(g)
    dy_fc = dy * fc
    silu_g = g * s
    if store_intermediates:     # what PyTorch autograd materialises between its ops
        dy_fc, silu_g = dy_fc.to(BF16).to(math), silu_g.to(BF16).to(math)
    g_in_factor = g if factor_g is None else factor_g(g)
    dg_m = dy_fc * (s * (1 + g_in_factor * (1 - s)))
    dfc_m = dy * silu_g
    dg, dfc = store(dg_m), store(dfc_m)
    acc = torch.float32 if math == torch.float32 else math
    dg_a, dfc_a, x_a = dg.to(acc), dfc.to(acc), x.to(acc)
    db_g = (dg_a if db_from_stored else dg_m.to(acc)).sum(0, keepdim=True)
    db_fc = (dfc_a if db_from_stored else dfc_m.to(acc)).sum(0, keepdim=True)
    p_g, p_fc = dg_a @ w_g.to(acc).t(), dfc_a @ w_fc.to(acc).t()
    if dx_products_stored:
        p_g, p_fc = p_g.to(BF16).to(acc), p_fc.to(BF16).to(acc)
    return {"dg": dg, "dfc": dfc, "db_g": out(db_g), "db_fc": out(db_fc),
            "dw_g": out(x_a.t() @ dg_a), "dw_fc": out(x_a.t() @ dfc_a), "dx": out(p_g + p_fc)}


def _round_toward_zero(t: torch.Tensor) -> torch.Tensor:
    """FP32 -> BF16 by dropping the low 16 bits: truncation, a common hand-written cast."""
    bits = t.float().contiguous().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32).to(BF16)


def _round_toward_positive(t: torch.Tensor) -> torch.Tensor:
    """FP32 -> BF16 rounding toward +inf (a ceil cast): up one BF16 step where the low 16 bits
    are not zero and the value is positive, truncated otherwise."""
    bits = t.float().contiguous().view(torch.int32)
    truncated = bits & ~0xFFFF
    up = (bits & 0xFFFF != 0) & (bits > 0)
    return torch.where(up, truncated + 0x10000, truncated).view(torch.float32).to(BF16)


# ---------------------------------------------------------------------------- correct
def plain(*, x, w_g, w_fc, dy, g, fc):
    """FP32 math, stable sigmoid, dg/dfc stored in BF16, db/dw/dx from the stored values."""
    return _backward(x, w_g, w_fc, dy, g, fc)


def plain_db_unrounded(*, x, w_g, w_fc, dy, g, fc):
    """As ``plain`` but db summed from the FP32 dg/dfc before their store (the article's b kernel)."""
    return _backward(x, w_g, w_fc, dy, g, fc, db_from_stored=False)


def stores_every_intermediate(*, x, w_g, w_fc, dy, g, fc):
    """dy*fc, silu(g), dg, dfc and dx's two products all stored in BF16 (PyTorch autograd's path)."""
    return _backward(x, w_g, w_fc, dy, g, fc, store_intermediates=True, dx_products_stored=True)


# ---------------------------------------------------------------------------- wrong
def round_toward_zero_stores(*, x, w_g, w_fc, dy, g, fc):
    """Every store truncates to BF16 instead of rounding to nearest: at most one ULP per element,
    always toward zero."""
    return _backward(x, w_g, w_fc, dy, g, fc, store=_round_toward_zero)


def round_up_stores(*, x, w_g, w_fc, dy, g, fc):
    """Every store rounds toward +inf: at most one ULP per element, up whatever the sign, so on
    values of both signs as often toward zero as away from it."""
    return _backward(x, w_g, w_fc, dy, g, fc, store=_round_toward_positive)


def round_up_downstream_stores(*, x, w_g, w_fc, dy, g, fc):
    """dg and dfc right; db, dw and dx (the reductions and the products) stored rounding toward
    +inf: a ceil cast in the kernels after the element-wise one, every element within one ULP."""
    return _backward(x, w_g, w_fc, dy, g, fc, store_downstream=_round_toward_positive)


def bf16_math(*, x, w_g, w_fc, dy, g, fc):
    """All math in BF16 (sigmoid, products, matmul accumulation), and it says so."""
    return _backward(x, w_g, w_fc, dy, g, fc, math=BF16)


bf16_math.schedule = TiledSchedule(name="bf16-math", tile_m_b=None, tile_m_w=None, tile_m_x=None,
                                   db_accumulator=BF16, dw_accumulator=BF16, plan=RoundingPlan(math=BF16))


def uniform_scale_error(*, x, w_g, w_fc, dy, g, fc):
    """Every output 1/128 too large: each element within rtol of the reference, all in one direction."""
    out = _backward(x, w_g, w_fc, dy, g, fc)
    return {k: (v.float() * (1 + 1 / 128)).to(BF16) for k, v in out.items()}


def _through_fp16(name: str) -> Callable:
    def kernel(**inputs):
        staged = dict(inputs, **{name: inputs[name].half().to(BF16)})   # exact in FP16's normal range only
        return _backward(**staged)
    kernel.__name__ = kernel.__qualname__ = f"{name}_through_fp16"
    kernel.__doc__ = (f"{name} staged through FP16 (a half() cast on the way in): right wherever {name} is "
                      f"inside FP16's normal range (6.1e-5 .. 65504), zero, coarse or inf outside it")
    return kernel


dy_through_fp16, g_through_fp16, fc_through_fp16, x_through_fp16, w_g_through_fp16, w_fc_through_fp16 = (
    _through_fp16(n) for n in ("dy", "g", "fc", "x", "w_g", "w_fc"))


def tanh_sigmoid(*, x, w_g, w_fc, dy, g, fc):
    """sigmoid(g) as 0.5 (1 + tanh(g / 2)) in FP32: exact in value, but 1 + tanh cancels for g below
    about -12 and keeps about one bit at g = -15."""
    return _backward(x, w_g, w_fc, dy, g, fc, sigmoid=lambda t: 0.5 * (1 + torch.tanh(t / 2)))


def g_through_fp16_in_dg(*, x, w_g, w_fc, dy, g, fc):
    """g staged through FP16 in dg's factor 1 + g (1 - s) only: exact for |g| <= 65504 and, below
    FP16's normal range, off by less than a BF16 ULP of the factor (g enters it next to 1); beyond
    65504 g becomes inf, and inf * (1 - s) = inf * 0 = NaN."""
    return _backward(x, w_g, w_fc, dy, g, fc, factor_g=lambda t: t.half().to(t.dtype))


# ---------------------------------------------------------------------------- wrong in a part
# Errors that a test of the whole output dilutes: each is the correct ``plain`` kernel's output
# with one part wrong by one to two rtol (1/128, 1/64), the size of a tiled kernel's usual bug.
TILE_ROWS = 1024


def _edited(output: str, name: str, doc: str, edit: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
    """``plain``'s outputs with ``output`` replaced by ``edit`` of its FP32 values, stored in BF16."""
    def kernel(*, x, w_g, w_fc, dy, g, fc):
        out = plain(x=x, w_g=w_g, w_fc=w_fc, dy=dy, g=g, fc=fc)
        out[output] = edit(out[output].float()).to(BF16)
        return out
    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = doc
    return kernel


def _one_tile(output: str, factor: float) -> Callable:
    def edit(t):
        tile = (t.shape[0] // 2 // TILE_ROWS) * TILE_ROWS    # the tile at the middle row
        t[tile:tile + TILE_ROWS] *= factor
        return t
    return _edited(output, f"one_tile_{output}",
                   f"One {TILE_ROWS}-row tile of {output} (the middle one) times {factor}.", edit)


def _every_96th_column(output: str, factor: float) -> Callable:
    def edit(t):
        t[..., ::96] *= factor
        return t
    return _edited(output, f"every_96th_column_{output}",
                   f"Columns 0, 96, 192, ... of {output} times {factor} (1/96 of its columns).", edit)


def _column_tile(output: str, factor: float, width: int = 8) -> Callable:
    def edit(t):
        first = t.shape[-1] // 2
        t[..., first:first + width] *= factor
        return t
    return _edited(output, f"column_tile_{output}",
                   f"{width} columns of {output} (from the middle one) times {factor}.", edit)


def _random_sign(output: str, size: float) -> Callable:
    def edit(t):
        gen = torch.Generator().manual_seed(1234)
        sign = torch.randint(0, 2, t.shape, generator=gen).float().mul_(2).sub_(1)
        return t * (1 + size * sign)
    return _edited(output, f"random_sign_{output}",
                   f"Every element of {output} times 1 +- {size}, the sign random per element.", edit)


db_offset = _edited("db_fc", "db_offset", "db_fc plus one rtol x rms(db_fc) on every element: a constant offset.",
                    lambda t: t + t.square().mean().sqrt() / 128)


LOCALIZED_BUGS: dict[str, Callable] = {f.__name__: f for f in (
    _one_tile("dx", 1 + 1 / 128), _one_tile("dg", 1 - 1 / 128), _one_tile("dfc", 1 + 1 / 128),
    _every_96th_column("db_g", 1 + 1 / 64), _every_96th_column("dw_fc", 1 - 1 / 64), _column_tile("dfc", 1 + 1 / 128),
    _random_sign("dx", 1 / 128), _random_sign("dg", 1 / 128), db_offset)}


CORRECT: dict[str, Callable] = {f.__name__: f for f in (plain, plain_db_unrounded, stores_every_intermediate)}
# Wrong only outside the ranges the other profiles draw: the operator's range cases catch them
RANGE_BUGS: dict[str, Callable] = {f.__name__: f for f in (dy_through_fp16, g_through_fp16, fc_through_fp16,
                                                           x_through_fp16, w_g_through_fp16, w_fc_through_fp16,
                                                           g_through_fp16_in_dg, tanh_sigmoid)}
WRONG: dict[str, Callable] = {f.__name__: f for f in (round_toward_zero_stores, round_up_stores,
                                                      round_up_downstream_stores, bf16_math, uniform_scale_error)}
