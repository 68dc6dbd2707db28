"""SwiGLU backward's golden computation for one chunk of rows under one rounding plan.

The framework (``goldens.stream.GoldenPass``) streams M in chunks, casts each chunk's row
inputs once per math dtype and calls ``chunk`` per plan; it accumulates the reductions
itself from the operands returned here (a sum over the rows of ``rhs``, or ``lhs^T rhs``),
cut at canonical blocks and at each schedule's tiles. Here is only what SwiGLU computes:

    dg, dfc   element-wise (``operators.swiglu_backward.math.elementwise``), stored per the plan;
    dx        dg w_g^T + dfc w_fc^T from the stored dg, dfc (each product stored where the plan says);
    db        the rows of dg / dfc as computed ("math") or as stored, by ``plan.db_input``;
    dw        x^T times the stored dg / dfc.

With ``terms`` (the reference layer's pass), the chunk also feeds the allowance's term sums
(``operators.swiglu_backward.terms.TermSums``)."""
from __future__ import annotations

from collections.abc import Mapping

import torch

from goldens.rounding import round_to
from contract.operator import ROUNDED_TERMS, ChunkGolden
from goldens.blocks import blocks, row_product
from operators.swiglu_backward.math import elementwise
from operators.swiglu_backward.terms import TermSums


def term_sums(inputs: Mapping[str, torch.Tensor]) -> TermSums:
    return TermSums(inputs)


def chunk(rows: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor], plan, *, want_rows: bool,
          terms: TermSums | None = None, raw: Mapping[str, torch.Tensor] | None = None,
          block: int = 1024, start: int = 0) -> ChunkGolden:
    """``rows``: this chunk's row inputs (x, dy, g, fc) in the plan's math dtype; ``weights``:
    w_g, w_fc in it; ``raw``: the chunk's BF16 row inputs (for ``terms``); ``block``: the
    canonical reduction block the term sums are accumulated in."""
    dg_m, dfc_m = elementwise(rows["dy"], rows["g"], rows["fc"], plan)
    dg_s = round_to(dg_m, plan.rounding("dg"))
    dfc_s = round_to(dfc_m, plan.rounding("dfc"))
    out = {"dg": dg_s, "dfc": dfc_s}
    if want_rows:
        p_g = round_to(row_product(dg_s, weights["w_g"].t(), block), plan.rounding("dx_product"))
        p_fc = round_to(row_product(dfc_s, weights["w_fc"].t(), block), plan.rounding("dx_product"))
        out["dx"] = dx = round_to(p_g + p_fc, plan.rounding("dx"))
        if plan.rounding("dx_product") is not None:
            # a rounding flip at a stored product moves dx by one ULP of the product
            out["dx" + ROUNDED_TERMS] = p_g.abs() + p_fc.abs()
    row_terms = None
    if terms is not None:
        var_g, var_fc = terms.rounding_variance(raw["dy"], raw["g"], raw["fc"], dg_m, dfc_m, raw["x"], block)
        if want_rows:
            row_terms = terms.rows(dg_m, dfc_m, var_g, var_fc, p_g, p_fc, dx, block)
        x = raw["x"]
        for cut in blocks(x.shape[0], block):
            terms.add_block(x[cut], dg_m[cut], dfc_m[cut], var_g[cut], var_fc[cut])
    # db: the b kernel sums dg/dfc in the math dtype, before the store rounds them
    db_g_in, db_fc_in = (dg_m, dfc_m) if plan.db_input == "math" else (dg_s, dfc_s)
    operands = {"db_g": (None, db_g_in), "db_fc": (None, db_fc_in),
                # dw: the w kernel reads the stored dg/dfc and multiplies in the math dtype
                "dw_g": (rows["x"], dg_s), "dw_fc": (rows["x"], dfc_s)}
    return ChunkGolden(out, operands, row_terms)
