"""Attention's scale profiles, sequence-length edges, shapes and acceptance cases.

Each profile takes the case's seeded ``torch.Generator`` and (M queries, N keys, D) and returns
q [M, D], kt [D, N], vt [D, N] and do [M, D] (``cases.spec.make_inputs`` rounds them to BF16).
The causal operator's cases have N = M. Never the global RNG.
"""
from __future__ import annotations

import math

import torch

# The reference flash schedule's blocks (``operators.attention.SCHEDULES``): 128 queries by 128 keys
BLOCK = 128
# The M axis (queries; the causal operator's sequence length). Why each M:
# 1, 2         - one query (decoding) and two: no query tile to cut, a causal row with one key
# 127..129     - either side of the 128-query tile that cuts dK, dV's sums over queries (and,
#                causal, the 128-key block edge at the diagonal)
# 257          - three query tiles, a one-row tail; causal: 2 Bc + 1 keys on the last row
# 1025         - nine tiles, a one-row tail
# 2048         - the acceptance case (16 tiles)
M_EDGES = (1, 2, 127, 128, 129, 257, 1025, 2048)
# (N, D) for the non-causal operator: key counts either side of the 128-key block (the online
# softmax's rescale, the last block's padding), one key, 2 Bc + 1, at head dims 64 and 128
SHAPES = ((129, 64), (127, 128), (1, 64), (257, 128), (128, 64))
CAUSAL_SHAPES = ((64,), (128,))
# A LLaMA-style head (D = 128) over a 2048-token context: the sequence length FlashAttention-2's
# paper benchmarks its forward and backward at in the middle of its range (512 ... 16k), one head
# per case (heads are independent; B * H heads are B * H cases): (M, N, D, scale, seed)
ACCEPTANCE_CASE = (2048, 2048, 128, "unit", 0)
CAUSAL_ACCEPTANCE_CASE = (2048, 128, "unit", 0)

# The operators over heads (``operators.attention.heads``): H after the one-head sizes. Few and small
# cases, each of 2 to 8 heads: what they add is the heads' layout (a head stride, K and V of the
# wrong head, sums across heads), which any head count from 2 exposes; the numerics per head are
# the one-head matrix's. M: one query, either side of the 128-query tile, three tiles.
HEAD_M_EDGES = (1, 127, 129, 257)
HEAD_SHAPES = ((129, 64, 3), (128, 128, 2))
HEAD_CAUSAL_SHAPES = ((64, 3), (128, 2))
# eight heads (B x H = 8, the head count the memory target of the largest case names) at a
# LLaMA-style head dim over 257 keys: three key blocks, the last of one key
HEAD_ACCEPTANCE_CASE = (257, 257, 128, 8, "unit", 0)
HEAD_CAUSAL_ACCEPTANCE_CASE = (257, 128, 8, "unit", 0)
HEAD_RANGE_CASES = ((129, 129, 64, 2, "above_fp16", 0),)
HEAD_CAUSAL_RANGE_CASES = ((129, 64, 2, "above_fp16", 0),)


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def _inputs(q, k, v, do):
    return {"q": q, "kt": k.t().contiguous(), "vt": v.t().contiguous(), "do": do}


def _unit(gen, m, n, d):
    """Order-one q, k, v, dO: scores S = q k / sqrt(D) of order one."""
    return _inputs(_randn(gen, m, d), _randn(gen, n, d), _randn(gen, n, d), _randn(gen, m, d))


def _large_logits(gen, m, n, d):
    """q, k of standard deviation 5: scores of standard deviation 25 (softmax saturates: one key
    takes nearly all of a row), and the last query aligned with key 0 (which every query sees,
    causal or not) at a score of 100: past 88.7 exp(S) overflows FP32, so a kernel that does not
    subtract the max fails at every size, not only where a random score happens to pass it."""
    q, k = 5 * _randn(gen, m, d), 5 * _randn(gen, n, d)
    q[-1] = k[0] * (100 * math.sqrt(d) / k[0].square().sum())
    return _inputs(q, k, _randn(gen, n, d), _randn(gen, m, d))


def _near_uniform(gen, m, n, d):
    """q, k of size 0.01: every score near 0, P near 1/N (the sum l carries the row; a rescale
    or normalisation error is not hidden by one dominant key)."""
    return _inputs(0.01 * _randn(gen, m, d), 0.01 * _randn(gen, n, d), _randn(gen, n, d), _randn(gen, m, d))


def _cancellation(gen, m, n, d):
    """Every value row a common vector plus 1%: O is near that vector, dP_j = dO . v_j is near
    delta = dO . O for every key, and dS = P (dP - delta) is the 1% left after cancellation."""
    common = _randn(gen, 1, d)
    v = common + 0.01 * _randn(gen, n, d)
    return _inputs(_randn(gen, m, d), _randn(gen, n, d), v, _randn(gen, m, d))


def _tiny(gen, m, n, d):
    """dO near the bottom of the normal range (2^-120): dQ, dK, dV among the BF16 subnormals."""
    t = _unit(gen, m, n, d)
    t["do"] = t["do"] * 2.0 ** -120
    return t


def _outliers(gen, m, n, d):
    """A few keys with 8x the norm (attention sinks) and a few value entries at 64x: rows
    dominated by one key beside near-uniform ones, and P V's sums led by outlying terms."""
    q, k, v, do = _randn(gen, m, d), _randn(gen, n, d), _randn(gen, n, d), _randn(gen, m, d)
    sinks = torch.randperm(n, generator=gen)[: max(1, n // 64)]
    k[sinks] *= 8
    big = torch.rand(n, d, generator=gen) < 0.002
    v = torch.where(big, 64 * v, v)
    return _inputs(q, k, v, do)


def _above_fp16(gen, m, n, d):
    """v entries at 2^17 (1 + |randn|), above FP16's 65504: a kernel that stages V or O through
    FP16 overflows to inf; BF16 holds them (its range is FP32's)."""
    t = _unit(gen, m, n, d)
    t["vt"] = 2.0 ** 17 * (1 + _randn(gen, d, n).abs()) * torch.sign(_randn(gen, d, n))
    return t


SCALES = {"unit": _unit, "large_logits": _large_logits, "near_uniform": _near_uniform,
          "cancellation": _cancellation, "tiny": _tiny, "outliers": _outliers, "above_fp16": _above_fp16}
RANGE_CASES = ((129, 129, 64, "above_fp16", 0),)
CAUSAL_RANGE_CASES = ((129, 64, "above_fp16", 0),)


def _self_attention(profile):
    """A profile over (M, D) with N = M keys: the causal operator's self-attention."""
    def draw(gen, m, d):
        return profile(gen, m, m, d)
    draw.__doc__ = profile.__doc__
    return draw


CAUSAL_SCALES = {name: _self_attention(p) for name, p in SCALES.items()}


def softmax_scale(d: int) -> float:
    return 1 / math.sqrt(d)
