"""The canonical row blocks every golden is cut in: reductions over M summed block by block and
row products computed per block, so that a golden's bits depend on the case alone, never on
the chunk a row streamed in or on the other layers of the pass."""
from __future__ import annotations

import torch


def operand_sum(lhs: torch.Tensor | None, rhs: torch.Tensor) -> torch.Tensor:
    """A reduction's partial over some rows from its operands (``ChunkGolden.operands``):
    ``(None, rhs)`` sums the rows of rhs, ``(lhs, rhs)`` is lhs^T rhs."""
    return rhs.sum(0, keepdim=True) if lhs is None else lhs.t() @ rhs


# The canonical block of rows every reduction over M is summed in, and every row product computed
# in (``goldens.stream``). 1024 rows: the b and x kernels' tile and a divisor of the w kernel's
# (2048), so the tiled layers of the article's schedule share the canonical block partials at no
# extra cost.
REDUCTION_BLOCK = 1024


def blocks(rows: int, block: int = REDUCTION_BLOCK) -> list[slice]:
    """The canonical blocks of ``rows`` rows whose first is a block edge: ``block`` rows each,
    the last one shorter. Every reduction over M and every row product is cut here, so that
    the goldens' and the own recomputation's bits never depend on the chunk a row streamed in."""
    return [slice(a, min(a + block, rows)) for a in range(0, rows, block)]


def row_product(lhs: torch.Tensor, rhs: torch.Tensor, block: int) -> torch.Tensor:
    """lhs @ rhs for a chunk of rows whose first row is a block edge, one matmul per ``block`` rows.
    oneDNN chooses its blocking, and so each row's summation order, by the whole product's shape:
    at K=2048..4096, N=11008, one 2048-row FP32 product and two 1024-row ones differ in 3.5M-7.0M
    of 8.4M elements, at K=4096, N=8192 likewise (0 in the shapes tried with K <= 1536 or
    N <= 4096). Per canonical block, a row's bits depend on the case alone, never on the chunk it
    streamed in."""
    if lhs.shape[0] <= block:
        return lhs @ rhs
    out = torch.empty(lhs.shape[0], rhs.shape[1], dtype=torch.promote_types(lhs.dtype, rhs.dtype), device=lhs.device)
    for rows in blocks(lhs.shape[0], block):
        torch.matmul(lhs[rows], rhs, out=out[rows])
    return out
