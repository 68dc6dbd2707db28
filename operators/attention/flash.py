"""A FlashAttention-2-style kernel emulated in PyTorch: forward and backward for one head, block
by block, as the kernel's loops run them.

Forward: per key block of ``bc`` keys (the last one padded with zero keys and masked), the
scores in FP32, a running max, P~ = exp(S - m_running) stored in BF16 before P~ V, the running
sum and the O accumulator rescaled by exp(m_old - m_new) in FP32; O = acc / l stored in BF16,
LSE = m + log l kept in FP32. Backward: per key block, P = exp(S - LSE) recomputed and stored in
BF16 before dV's matmul, dP = dO V^T, delta = rowsum(dO * O) from the stored O, dS = P (dP - delta)
stored in BF16, dQ accumulated over key blocks and dK, dV over query tiles of ``br`` rows, in FP32.
Every query row is independent in the forward, so all rows run at once per key block; dK and dV
add their query tiles' partials one tile at a time.

``Flash`` holds the schedule and the switches the wrong kernels flip
(``operators.attention.mutants``): a correct kernel is ``Flash()``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

BF16 = torch.bfloat16
F32 = torch.float32


@dataclass(frozen=True)
class Flash:
    br: int = 128                       # query rows per tile (dK, dV's partials)
    bc: int = 128                       # keys per block (the online softmax)
    rescale: bool = True                # rescale l and acc when the running max grows
    sum_dtype: torch.dtype = F32        # the running sum's register
    subtract_max: bool = True           # exp(S - m), not exp(S)
    diagonal_extra_key: bool = False    # causal: the diagonal block's mask lets key i + 1 in
    mask_padding: bool = True           # the last key block's zero padding masked
    lse_with_max: bool = True           # LSE = m + log l, not log l
    ds_with_delta: bool = True          # dS = P (dP - delta), not P dP
    dv_normalized: bool = True          # dV from P, not from P~ = exp(S - m)
    scale_power: float = 0.5            # the softmax scale D^-scale_power
    dkdv_tiles: int | None = None       # dK, dV summed over this many query tiles (None: all)
    dkdv_bf16: bool = False             # dK, dV's query-tile partials added in BF16
    o_truncated: bool = False           # O's BF16 store rounds toward zero
    lse_bf16: bool = False              # LSE rounded through BF16 before it is returned in FP32
    lse_base2: bool = False             # LSE in base 2 (an exp2 kernel's log2(e) m + log2 l), not converted
    max_offset: float = 0.0             # subtract the running max plus this (a unified max above the scores)
    bwd_unmasked: bool = False          # causal: the backward recomputes P without the mask
    skip_diagonal_tile: bool = False    # causal: dK, dV leave out the query tile on the diagonal


def _keep(rows: int, j0: int, bc: int, n: int, causal: bool, cfg: Flash) -> torch.Tensor:
    """[rows, bc] True where key j0 + c is attended by query r (padding and the causal mask)."""
    key = torch.arange(j0, j0 + bc).unsqueeze(0)
    keep = key < n if cfg.mask_padding else torch.ones(1, bc, dtype=torch.bool)
    if causal:
        query = torch.arange(rows).unsqueeze(1)
        limit = query
        if cfg.diagonal_extra_key:    # in the block on the diagonal, key i + 1 let in as well
            limit = torch.where(query // bc == j0 // bc, query + 1, query)
        keep = keep & (key <= limit)
    return keep.expand(rows, bc)


def _truncate(x: torch.Tensor) -> torch.Tensor:
    """x rounded toward zero to BF16 (its low 16 bits dropped)."""
    return (x.contiguous().view(torch.int32) & -65536).view(torch.float32).to(BF16)


def _padded(t: torch.Tensor, bc: int) -> torch.Tensor:
    """[N, D] padded with zero rows to a whole number of key blocks."""
    n = t.shape[0]
    pad = -n % bc
    return torch.cat([t, t.new_zeros(pad, t.shape[1])]) if pad else t


class _Blocks:
    """The key blocks of one head: K and V padded to whole blocks in FP32, and each block's scores."""

    def __init__(self, q, kt, vt, causal: bool, cfg: Flash):
        self.rows, d = q.shape
        self.n, self.causal, self.cfg = kt.shape[1], causal, cfg
        self.scale = d ** -cfg.scale_power
        self.qf = q.float()
        self.k = _padded(kt.t().float(), cfg.bc)
        self.v = _padded(vt.t().float(), cfg.bc)
        self.starts = range(0, self.k.shape[0], cfg.bc)

    def scores(self, j0: int, masked: bool | None = None) -> torch.Tensor:
        cfg = self.cfg
        s = (self.qf @ self.k[j0:j0 + cfg.bc].t()) * self.scale
        keep = _keep(self.rows, j0, cfg.bc, self.n, self.causal if masked is None else masked, cfg)
        return torch.where(keep, s, float("-inf"))


def _forward(b: _Blocks) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The online softmax over key blocks: O stored in BF16, LSE in FP32 and the running max m."""
    cfg, m_rows, d = b.cfg, b.rows, b.qf.shape[1]
    m = torch.full((m_rows, 1), float("-inf"))
    l = torch.zeros((m_rows, 1), dtype=cfg.sum_dtype)
    acc = torch.zeros((m_rows, d))
    for j0 in b.starts:
        s = b.scores(j0)
        if cfg.subtract_max:
            m_new = torch.maximum(m, s.amax(-1, keepdim=True) + cfg.max_offset)
            alpha = torch.exp(m - m_new) if cfg.rescale else torch.ones_like(m)
            alpha = torch.where(torch.isfinite(m_new), alpha, 1.0)
            p = torch.exp(s - torch.where(torch.isfinite(m_new), m_new, 0.0))
            m = m_new
        else:
            m = torch.zeros_like(m)
            alpha, p = torch.ones_like(m), torch.exp(s)
        l = (alpha * l.float() + p.sum(-1, keepdim=True)).to(cfg.sum_dtype)
        acc = alpha * acc + p.to(BF16).float() @ b.v[j0:j0 + cfg.bc]
    l = l.float()
    o = _truncate(acc / l) if cfg.o_truncated else (acc / l).to(BF16)
    lse = (m + torch.log(l)) if cfg.lse_with_max else torch.log(l)
    return o, lse, m


def forward(q, kt, vt, *, causal: bool, cfg: Flash = Flash()) -> dict[str, torch.Tensor]:
    """The forward alone: O [M, D] in BF16 and LSE [M, 1] in FP32, as a forward kernel returns them."""
    o, lse, _ = _forward(_Blocks(q, kt, vt, causal, cfg))
    if cfg.lse_base2:
        lse = lse * (1 / math.log(2))
    if cfg.lse_bf16:
        lse = lse.to(BF16).float()
    return {"o": o, "lse": lse}


def run(q, kt, vt, do, *, causal: bool, cfg: Flash = Flash()) -> dict[str, torch.Tensor]:
    """Forward and backward: O, dQ, dK^T and dV^T in BF16, from its own O and LSE."""
    b = _Blocks(q, kt, vt, causal, cfg)
    o, lse, m = _forward(b)
    m_rows, d, n, scale, qf, dof, k, v = b.rows, b.qf.shape[1], b.n, b.scale, b.qf, do.float(), b.k, b.v
    blocks, scores = b.starts, b.scores

    # backward
    of = o.float()
    delta = (dof * of).sum(-1, keepdim=True)
    dq = torch.zeros((m_rows, d))
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    tiles = list(range(0, m_rows, cfg.br))[: cfg.dkdv_tiles]
    for j0 in blocks:
        s = scores(j0, causal and not cfg.bwd_unmasked)
        p = torch.exp(s - lse) if cfg.dv_normalized else torch.exp(s - m)
        p_b = p.to(BF16).float()
        dp = dof @ v[j0:j0 + cfg.bc].t()
        ds = p * (dp - delta) if cfg.ds_with_delta else p * dp
        if not cfg.dv_normalized:    # the bug is in dV alone: dS from the normalised P
            p_n = torch.exp(s - lse)
            ds = p_n * (dp - delta)
        ds_b = ds.to(BF16).float()
        dq += (ds_b @ k[j0:j0 + cfg.bc]) * scale
        for i0 in tiles:
            if cfg.skip_diagonal_tile and i0 // cfg.br == j0 // cfg.bc:
                continue
            rows = slice(i0, i0 + cfg.br)
            dk[j0:j0 + cfg.bc] += (ds_b[rows].t() @ qf[rows]) * scale
            dv[j0:j0 + cfg.bc] += p_b[rows].t() @ dof[rows]
            if cfg.dkdv_bf16:
                dk[j0:j0 + cfg.bc] = dk[j0:j0 + cfg.bc].to(BF16).float()
                dv[j0:j0 + cfg.bc] = dv[j0:j0 + cfg.bc].to(BF16).float()
    return {"o": o, "dq": dq.to(BF16), "dkt": dk[:n].t().contiguous().to(BF16),
            "dvt": dv[:n].t().contiguous().to(BF16)}
