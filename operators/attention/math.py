"""Attention's forward and backward for one head, written once against ``ops`` (``accuracy.derived``).

Inputs: q [M, D] (M queries), kt and vt [D, N] (N keys, held transposed: the framework's sums
over the M query rows are lhs^T rhs with lhs a row input, and dK^T = Q^T dS, dV^T = dO^T P have
one), do [M, D] (the gradient of O). One kernel call runs the forward and the backward from its
own stored O and LSE, as a training step does.

Forward: S = Q K^T / sqrt(D) (causal: key j > query i masked), m the row's max, P~ = exp(S - m),
l = rowsum(P~), O = (P~ V) / l, LSE = m + log l. With the plan's ``key`` loop (``Plan.loops``)
the forward is FlashAttention's online softmax over key blocks of that size: a running max, the
running sum and the O accumulator rescaled by exp(m_old - m_new) when it grows, all in FP32, each
block's P~ stored at the plan's ``p`` point before its P~ V.
Backward (FlashAttention-2's): P = exp(S - LSE) recomputed from the forward's LSE,
dP = dO V^T, delta = rowsum(dO * O), dS = P (dP - delta), dQ = dS K / sqrt(D),
dK^T = Q^T dS / sqrt(D), dV^T = dO^T P.

Legitimate choices, as rounding points (everything else FP32 math in any accurate form, any
FP32 order within a block, any valid online order of the softmax statistics):
"""
from __future__ import annotations

import math as _math

import torch

POINTS = {
    "p": "P~ = exp(S - m) stored in BF16 before P~ V, at any running max m",
    "o_in": "delta = rowsum(dO * O) from O as stored in BF16, or from O recomputed in FP32",
    "p_bwd": "P recomputed from LSE stored in BF16 before dV's matmul",
    "ds": "dS stored in BF16 before its matmuls (dQ and dK)",
}
# the forward operator's one point: its LSE is FP32 math throughout
FORWARD_POINTS = {"p": POINTS["p"]}
# A masked score: exp(MASKED - m) is 0 in FP32 and FP64, and the rounding model's FP32 ulp of it
# (6e22) times exp's derivative there (0) is 0; -inf would give inf * 0.
MASKED = -1e30


def _scores(ops, t, causal: bool):
    q, kt = t["q"], t["kt"]
    d = ops.value(q).shape[1]
    s = ops.matmul(q, kt) * (1 / _math.sqrt(d))
    if causal:
        n = ops.value(kt).shape[1]
        keep = torch.arange(n).unsqueeze(0) <= ops.value(t["row"])
        s = ops.where(keep, s, MASKED)
    return s


def _forward_global(ops, s, vt):
    m = ops.max(s, -1)
    p = ops.exp(s - m)
    l = ops.sum(p, -1)
    p_stored = ops.store("p", p, rescaled=True)
    o = ops.matmul(p_stored, vt.t()) / l
    return o, m + ops.log(l), (p_stored, l)


def _forward_online(ops, s, vt, block: int):
    """FlashAttention's forward loop over key blocks (``ops`` on tensors: a golden replaying it)."""
    rows, n = s.shape
    m = torch.full((rows, 1), float("-inf"), dtype=s.dtype)
    l = torch.zeros((rows, 1), dtype=s.dtype)
    acc = torch.zeros((rows, vt.shape[0]), dtype=s.dtype)
    for j in range(0, n, block):
        sj = s[:, j:j + block]
        m_new = torch.maximum(m, sj.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        pj = torch.exp(sj - m_new)
        l = alpha * l + pj.sum(-1, keepdim=True)
        acc = alpha * acc + ops.store("p", pj, rescaled=True) @ vt[:, j:j + block].t()
        m = m_new
    return acc / l, m + torch.log(l), None


def _delta(ops, do, o, dp, forward_p):
    """delta = rowsum(dO * O), O at the ``o_in`` point. With the forward's stored P~ and its l
    (the global forward) it is written as rowsum(P~ dP) / l plus rowsum(dO * (O at o_in - O)): the
    same value (O = P~ V / l, so rowsum(dO * O) = rowsum(P~ (dO V^T)) / l), in the form whose
    rounding model sees each stored P~_ij once, times dP_ij. Through O the model would see them
    only as O's D columns' spreads, which share those roundings, and add them as if correlated:
    at M1025-N1024-D128-unit that made dq's modelled spread 7 times the legitimate kernels'
    errors (their errors / the model's sd: standard deviation 0.145, largest 1.07)."""
    if forward_p is None:       # the online forward (a golden's replay, no rounding model)
        return ops.sum(do * ops.store("o_in", o), -1)
    p_stored, l = forward_p
    o_value = ops.value(o)
    return ops.sum(p_stored * dp, -1) / l + ops.sum(do * (ops.store("o_in", o_value) - o_value), -1)


def attention(ops, t, causal: bool = False):
    """``t``: q, kt, vt, do by name (and ``row``, each query's index, when causal). Returns the row
    outputs o, dq and the reductions' operands: dkt = q^T (dS / sqrt(D)), dvt = do^T P."""
    q, kt, vt, do = t["q"], t["kt"], t["vt"], t["do"]
    s = _scores(ops, t, causal)
    block = ops.loop("key")
    o, lse, forward_p = _forward_global(ops, s, vt) if block is None else _forward_online(ops, s, vt, block)
    p = ops.exp(s - lse)
    p_stored = ops.store("p_bwd", p)
    dp = ops.matmul(do, vt)
    delta = _delta(ops, do, o, dp, forward_p)
    ds = ops.store("ds", p * (dp - delta))
    scale = 1 / _math.sqrt(ops.value(q).shape[1])
    dq = ops.matmul(ds, kt.t()) * scale
    return {"o": o, "dq": dq}, {"dkt": (q, ds * scale), "dvt": (do, p_stored)}


def forward(ops, t, causal: bool = False):
    """The forward alone (``operators.attention.forward``): O and LSE = m + log l, the statistic a
    split-KV combine or the backward reads, as row outputs; no reductions. LSE carries no stored
    point: its legitimate spread is the FP32 math's (the scores, exp, the sum over the keys in any
    order, log), the running max taken as exact (``Spread.max``: LSE does not depend on the max
    subtracted to first order, d LSE / d m = 1 - sum_j P_j = 0)."""
    s = _scores(ops, t, causal)
    block = ops.loop("key")
    o, lse, _ = _forward_global(ops, s, t["vt"]) if block is None else _forward_online(ops, s, t["vt"], block)
    return {"o": o, "lse": lse}, {}


def non_causal(ops, t):
    return attention(ops, t, causal=False)


def causal(ops, t):
    return attention(ops, t, causal=True)


def forward_non_causal(ops, t):
    return forward(ops, t, causal=False)


def forward_causal(ops, t):
    return forward(ops, t, causal=True)
