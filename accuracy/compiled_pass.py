"""The element-wise comparison of ``accuracy.metrics.ErrorStats`` in one compiled pass.

The eager comparison makes about 35 passes over every element (error, ratios, spacings, counts,
sums, maxima, selections), each a full read and write of the slice: 13 s of the 32.9 s gate at
M=65536 on a 2-core Xeon. Here one compiled call per slice of rows computes, for the finite pairs, every
count, FP64 sum, maximum with its first index, sampled histogram and running top-k that the
eager path does, with the same FP32 arithmetic per element (so every count and selection that
the verdict reads is the same number), in one read of each input.

Why numba: it ships LLVM in its wheel, so a fresh machine with only Python and the package
registries compiles it (``torch.compile``'s C++ backend needs a system compiler), and its
``cache=True`` keeps the machine code between processes. Measured by
``benchmarks/compare_tools.py`` (docs/performance.md, "Which tool"). The eager path stays the reference:
for other devices, for slices with NaN or Inf, and in ``tests/core/test_compiled_pass.py``,
which checks both give the same record.

Vectorised: a slice runs in sub-blocks of ``SUB`` elements whose per-element values go to small
arrays, and every count, sum and maximum is a plain loop over them that LLVM vectorises; the
running maxima's first index and the running top-k selections, which kept a single loop scalar
(about 110 cycles per gated element), are looked up only in a sub-block that can change them.
``ErrorStats.update`` per element on a 2-core Xeon, one loop against sub-blocks, the same
hour: gated 21.3 against 8.9-12.0 ns, a diagnosis layer 14.2 against 4.8, the dual-only metrics
9.0 against 2.5.

Layout: a call covers whole slices of ``block`` elements (``ErrorStats``'s own slices), one
row of ``acc`` and of each top-k table per slice, filled in parallel; the caller adds the
slices' sums in order, so a record never depends on how the rows were chunked.
"""
from __future__ import annotations

import math
import os
import zlib

import numba
import numpy as np
import torch
from numba import njit, prange, types
from numba.extending import intrinsic

from contract.metric_table import SLOTS

# The slots of a slice's row of ``acc``, one module-level int each (N_VISIBLE = 0, SQ_B = 1, ...) in
# the order ``contract.metric_table.SLOTS`` declares them: numba compiles a global int as a constant.
globals().update({name: number for number, name in enumerate(SLOTS)})
N_SLOTS = len(SLOTS)
# numba's cache is keyed by this file's content and keeps each global's value as compiled
# (numba's docs, "Notes on Caching": changes to symbols defined in another file are not seen):
# cached machine code would go on writing a slot table edited in contract/ alone. The checksum
# ``_cached_layout`` was compiled with is compared with the table's at every import (``check_cache``).
SLOT_LAYOUT = zlib.crc32(" ".join(SLOTS).encode())

# ``flags`` bits
DUAL, DUAL_ONLY, EXACT, DIRECTION, ALLOWANCE, ROUNDED, BOUND, NOISE = (1 << i for i in range(8))

# ``params`` slots (float64; the FP32 thresholds are stored already rounded to FP32, as the
# eager path's comparisons of an FP32 tensor with a Python float round the float)
(P_RTOL, P_ACCEPTANCE_ATOL, P_ZERO_PASS, P_ATOL, P_SMALL, P_SMALL_ATOL, P_REL_EPS, P_SIGN_MIN, P_SIGN_MAX,
 P_BAR_WORST, P_BAR_RATIO, P_BAR_ABS, P_FIRST_SAMPLE, P_SAMPLE_STEP) = range(14)
N_PARAMS = 14

_MIN_NORMAL = 2.0 ** -126
_BF16_FRACTION = 2.0 ** -7


def _bitcast(source, target):
    """A compiled function that reads a ``source`` value's bits as a ``target`` value."""
    @intrinsic
    def cast(typingctx, x):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(target))
        return target(source), codegen
    return cast


# an FP64 value's bits (``math.frexp`` costs 16 ns a call); an FP32 value's: non-negative floats
# order as their bits, so a maximum over them is an integer maximum, which vectorises (a float
# one needs fast-math, which would also drop the NaN and Inf tests)
_bits, _from_bits = _bitcast(types.float64, types.int64), _bitcast(types.int64, types.float64)
_bits32, _from_bits32 = _bitcast(types.float32, types.int32), _bitcast(types.int32, types.float32)


_EXPONENT = 0x7FF0000000000000


@njit(inline="always")
def _spacing(v):
    """``accuracy.ulp.bf16_spacing`` of a finite FP64 value: its binade (the exponent field alone)
    x 2^-7, at least 2^-133. An FP32 value's binade is the same in FP64 except among FP32's
    subnormals, which the floor covers."""
    return max(_from_bits(_bits(v) & _EXPONENT), _MIN_NORMAL) * _BF16_FRACTION


@njit(inline="always")
def _ulp(abs_err, bk):
    """|error| in BF16 ULPs of the FP32 golden (FP32 division, as the eager path)."""
    return abs_err / np.float32(_spacing(np.float64(bk)))


@njit(inline="always")
def _scale(abs_b, rounded_k, has_rounded):
    """What rtol applies to: |golden|, plus the stored intermediate terms where there are any."""
    return abs_b + rounded_k if has_rounded else abs_b


@njit(inline="always")
def _seed_excess(abs_err, scale, rtol):
    """FP32 |error| - rtol scale as the eager path's ``torch.add(abs_err, scale, alpha=-rtol)``:
    rtol scale is exact in FP64 (two 24-bit significands), one rounding to FP32 after it."""
    return np.float32(np.float64(abs_err) - np.float64(rtol) * np.float64(scale))


@njit(inline="always")
def _margin(scale, allow_k, rtol, has_allow):
    """rtol scale + allowance in FP32 (``torch.add(allow, scale, alpha=rtol)``)."""
    if has_allow:
        return np.float32(np.float64(allow_k) + np.float64(rtol) * np.float64(scale))
    return np.float32(scale * np.float32(rtol))


_FP32_MAX = float(np.finfo(np.float32).max)


@njit(inline="always")
def _nan_to_num(x):
    """``torch.nan_to_num`` of a non-negative FP32 ratio: NaN to 0, inf to FP32's largest."""
    if not x == x:
        return np.float32(0.0)
    return np.float32(_FP32_MAX) if x == np.inf else x


@njit(inline="always")
def _rel(abs_err, abs_b):
    """|error| / |golden|: 0 where both are 0, FP32's largest where only the golden is."""
    return _nan_to_num(abs_err / abs_b)


@njit(inline="always")
def _insert(vals, idx, count, v, i):
    """Keep the ``len(vals)`` largest values seen (descending; among equal values the earliest
    stays first and the latest is dropped); NaN never enters. Returns the new count."""
    k = vals.shape[0]
    if count == k:
        if not v > vals[k - 1]:
            return count
        j = k - 1
    else:
        if not v == v:
            return count
        j = count
        count += 1
    while j > 0 and vals[j - 1] < v:
        vals[j] = vals[j - 1]
        idx[j] = idx[j - 1]
        j -= 1
    vals[j] = v
    idx[j] = i
    return count


# Elements per sub-block of a slice: its eight per-element FP32 arrays (error, excess, ratios)
# take 16 KB, within L1 beside the inputs' sub-blocks.
SUB = 512


@njit(cache=True, error_model="numpy")
def _errors(a, b, s0, m, err, abs_err, abs_b):
    """error, |error| and |golden| (FP32) of elements s0..s0+m-1; returns how many pairs are finite."""
    finite = 0
    for j in range(m):
        ak = a[s0 + j]
        bk = np.float32(b[s0 + j])
        finite += (abs(ak) <= _FP32_MAX) & (abs(bk) <= _FP32_MAX)
        e = ak - bk
        err[j] = e
        abs_err[j] = abs(e)
        abs_b[j] = abs(bk)
    return finite


@njit(cache=True, error_model="numpy")
def _max_bits(x, m):
    """The bits of the largest of the non-negative FP32 values x[:m]."""
    top = np.int32(0)
    for j in range(m):
        top = max(top, _bits32(x[j]))
    return top


@njit(cache=True, error_model="numpy")
def _first_at(x, m, v):
    """The first index of value ``v`` in x[:m] (it is there)."""
    for j in range(m):
        if x[j] == v:
            return j
    return -1


@njit(cache=True, error_model="numpy")
def _running_max(x, m, s0, best, at):
    """The running maximum ``best`` (first reached at ``at``) after the sub-block x[:m] that
    starts at element s0: its first index is looked up only where the sub-block beats it."""
    peak = _from_bits32(_max_bits(x, m))
    if peak > best:
        return peak, s0 + _first_at(x, m, peak)
    return best, at


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _golden_sums(abs_b, m, small_atol, zero_pass):
    """sum |golden|^2 (FP64), how many |golden| exceed the small-value atol, how many pass as zero."""
    sq = 0.0
    visible = zero = 0
    for j in range(m):
        v = np.float64(abs_b[j])
        sq += v * v
        visible += abs_b[j] > small_atol
        zero += abs_b[j] <= zero_pass
    return sq, visible, zero


@njit(cache=True, error_model="numpy")
def _ulps(abs_err, abs_b, m, out):
    for j in range(m):
        out[j] = _ulp(abs_err[j], abs_b[j])     # the spacing reads the exponent alone: |b|'s is b's


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _dual_sums(abs_err, abs_b, ulp, m, small, small_atol, rel_eps):
    """msprobe's metrics (``accuracy.dual``): small-value counts, the normal elements' error sums
    and largest relative error, and how many are over one ULP."""
    n_small = n_small_err = n_over_1 = 0
    sum_sq = sum_rel = 0.0
    top = np.int32(0)
    for j in range(m):
        is_small = abs_b[j] <= small
        n_small += is_small
        n_small_err += is_small & (abs_err[j] > small_atol)
        normal_err = np.float32(0.0) if is_small else abs_err[j]
        sum_sq += np.float64(normal_err) * np.float64(normal_err)
        rel = normal_err / (abs_b[j] + rel_eps)
        sum_rel += rel
        top = max(top, _bits32(rel))
        n_over_1 += ulp[j] > 1
    return n_small, n_small_err, sum_sq, sum_rel, top, n_over_1


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _error_sums(a, b, s0, err, abs_err, m):
    """Signed counts and the FP64 sums of error, |error|, a b, a^2 and b^2."""
    n_pos = n_neg = 0
    sum_err = sum_abs = dot = sq_a = sq_b = 0.0
    for j in range(m):
        n_pos += err[j] > 0
        n_neg += err[j] < 0
        sum_err += err[j]
        sum_abs += abs_err[j]
        a64 = np.float64(a[s0 + j])
        b64 = np.float64(np.float32(b[s0 + j]))
        dot += a64 * b64
        sq_a += a64 * a64
        sq_b += b64 * b64
    return n_pos, n_neg, sum_err, sum_abs, dot, sq_a, sq_b


@njit(cache=True, error_model="numpy")
def _excesses(abs_err, scale, rtol, m, out):
    for j in range(m):
        out[j] = _seed_excess(abs_err[j], scale[j], rtol)


@njit(cache=True, error_model="numpy")
def _count_over(x, m, threshold):
    count = 0
    for j in range(m):
        count += x[j] > threshold
    return count


@njit(cache=True, error_model="numpy")
def _less_allowance(excess, abs_err, allow, s0, m):
    """excess - allowance in place; returns the bits of the largest |error| / allowance."""
    top = np.int32(0)
    for j in range(m):
        lk = allow[s0 + j]
        excess[j] = excess[j] - lk
        top = max(top, _bits32(_nan_to_num(abs_err[j] / lk)))
    return top


@njit(cache=True, error_model="numpy")
def _rels(abs_err, abs_b, m, out):
    for j in range(m):
        out[j] = _rel(abs_err[j], abs_b[j])


@njit(cache=True, error_model="numpy")
def _floor_ratios(scale, abs_b, allow, s0, m, rtol, has_allow, out):
    """The floor's margin / |golden| (+inf for a zero golden, never a candidate)."""
    for j in range(m):
        lk = allow[s0 + j] if has_allow else np.float32(0.0)
        r = _margin(scale[j], lk, rtol, has_allow) / abs_b[j]
        out[j] = r if abs_b[j] > 0 else np.float32(np.inf)


@njit(cache=True, error_model="numpy")
def _count_below(x, m, bar):
    count = 0
    for j in range(m):
        count += x[j] < bar
    return count


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _exact_sums(a, exact, noise, s0, m, has_noise, direction, sign_min, sign_max):
    """The aggregate tests' sums against the FP64 values: sum e x, sum x^2, the store variance
    (spacing x)^2, the noise variance x^2, and the rounding-direction counts."""
    sum_eb = sum_bb = sum_store = sum_noise = 0.0
    n_counted = n_toward = n_up = 0
    for j in range(m):
        xk = exact[s0 + j]
        e = np.float64(a[s0 + j]) - xk
        sp = _spacing(xk)
        sum_eb += e * xk
        sum_bb += xk * xk
        store = sp * xk
        sum_store += store * store
        if has_noise:
            sum_noise += noise[s0 + j] * (xk * xk)
        if direction:
            ulps = e / sp
            size = abs(ulps)
            counted = (size >= sign_min) & (size <= sign_max)
            n_counted += counted
            n_toward += counted & (ulps * xk < 0)
            n_up += counted & (e > 0)
    return sum_eb, sum_bb, sum_store, sum_noise, n_counted, n_toward, n_up


@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _bound_sums(abs_err, bound, s0, m, util):
    """|error| / bound per element (``util``), how many exceed 1, and sum bound (FP64)."""
    over = 0
    total = 0.0
    for j in range(m):
        bd = bound[s0 + j]
        u = _nan_to_num(abs_err[j] / bd)
        util[j] = u
        over += u > 1
        total += bd
    return over, total


@njit(parallel=True, cache=True, error_model="numpy", nogil=True)
def compare_slices(a, b, rounded, allow, exact, noise, bound, block, flags, params, ulp_edges, log_edges,
                   acc, ulp_hist, log_hist, worst_v, worst_i, worst_n, ratio_v, ratio_i, ratio_n,
                   absb_v, absb_i, absb_n):
    """One row of the tables per slice of ``block`` elements of the flat ``a`` (FP32 kernel
    values) against ``b`` (the golden, rounded to FP32 by the caller). Optional inputs are arrays of the full
    length, flagged in ``flags`` (one of length 1 where the flag is off). A slice with a
    non-finite pair is only marked (``N_NONFINITE``): the caller compares it on the eager path.
    Selections: ``worst`` the largest excess beyond ``P_BAR_WORST``; ``ratio`` the smallest
    margin / |golden| below ``P_BAR_RATIO`` (stored negated); ``absb`` the largest |golden|
    beyond ``P_BAR_ABS``; zero goldens are never floor candidates.

    Each slice runs in sub-blocks of ``SUB`` elements: the per-element values go to small
    arrays, then every count, sum and maximum is a loop over them (vectorised; the FP64 sums
    reassociated, the maxima over FP32 bits); a maximum's first index, a selection's candidates
    and the sampled histograms are looked up only where a sub-block can change them."""
    n = a.shape[0]
    n_blocks = acc.shape[0]
    dual = (flags & DUAL) != 0
    dual_only = (flags & DUAL_ONLY) != 0
    has_exact = (flags & EXACT) != 0
    direction = (flags & DIRECTION) != 0
    has_allow = (flags & ALLOWANCE) != 0
    has_rounded = (flags & ROUNDED) != 0
    has_bound = (flags & BOUND) != 0
    has_noise = (flags & NOISE) != 0
    rtol = params[P_RTOL]
    seed_atol = np.float32(params[P_ACCEPTANCE_ATOL])
    zero_pass = np.float32(params[P_ZERO_PASS])
    atol = np.float32(params[P_ATOL])
    small = np.float32(params[P_SMALL])
    small_atol = np.float32(params[P_SMALL_ATOL])
    rel_eps = np.float32(params[P_REL_EPS])
    sign_min, sign_max = params[P_SIGN_MIN], params[P_SIGN_MAX]
    bar_worst, bar_ratio, bar_abs = params[P_BAR_WORST], params[P_BAR_RATIO], params[P_BAR_ABS]
    first_sample = int(params[P_FIRST_SAMPLE])
    sample_step = int(params[P_SAMPLE_STEP])
    n_ulp_bins = ulp_hist.shape[1]
    n_log_bins = log_hist.shape[1]
    k_worst, k_floor = worst_v.shape[1], ratio_v.shape[1]
    for blk in prange(n_blocks):
        lo = blk * block
        hi = min(n, lo + block)
        err = np.empty(SUB, dtype=np.float32)
        abs_err = np.empty(SUB, dtype=np.float32)
        abs_b = np.empty(SUB, dtype=np.float32)
        ulp = np.empty(SUB, dtype=np.float32)
        excess = np.empty(SUB, dtype=np.float32)
        rel = np.empty(SUB, dtype=np.float32)
        aux = np.empty(SUB, dtype=np.float32)
        scale = np.empty(SUB, dtype=np.float32) if has_rounded else abs_b
        n_nonfinite = n_finite = n_visible = n_zero = n_over_seed = n_mismatch = 0
        n_pos = n_neg = n_small = n_small_err = n_ulp_over_1 = n_counted = n_toward = n_up = 0
        n_over_bound = n_sampled = 0
        sq_b = sum_sq_normal = sum_rel_normal = sum_eb = sum_bb = sum_store = sum_noise = 0.0
        sum_err = sum_abs_err = dot = sq_a = sq_b_pairs = sum_bound = 0.0
        top_golden = top_noise = top_rel_normal = np.int32(0)
        max_abs = max_rel = max_ulp = max_util = np.float32(-1.0)
        at_abs = at_rel = at_ulp = at_util = -1
        n_worst = n_ratio = n_absb = 0
        wv, wi = worst_v[blk], worst_i[blk]
        rv, ri = ratio_v[blk], ratio_i[blk]
        av, ai = absb_v[blk], absb_i[blk]
        for s0 in range(lo, hi, SUB):
            m = min(hi, s0 + SUB) - s0
            if _errors(a, b, s0, m, err, abs_err, abs_b) < m:
                n_nonfinite += 1
                break
            n_finite += m
            sq, visible, zero = _golden_sums(abs_b, m, small_atol, zero_pass)
            sq_b += sq
            n_zero += zero
            top_golden = max(top_golden, _max_bits(abs_b, m))
            _ulps(abs_err, abs_b, m, ulp)
            if dual:
                n_visible += visible
                ns, nse, ssq, srel, top_r, n1 = _dual_sums(abs_err, abs_b, ulp, m, small, small_atol, rel_eps)
                n_small += ns
                n_small_err += nse
                sum_sq_normal += ssq
                sum_rel_normal += srel
                top_rel_normal = max(top_rel_normal, top_r)
                n_ulp_over_1 += n1
            p, q, se, sa, d, qa, qb = _error_sums(a, b, s0, err, abs_err, m)
            n_pos += p
            n_neg += q
            if dual_only:
                continue
            sum_err += se
            sum_abs_err += sa
            dot += d
            sq_a += qa
            sq_b_pairs += qb
            if has_rounded:
                for j in range(m):
                    scale[j] = _scale(abs_b[j], rounded[s0 + j], True)
            _excesses(abs_err, scale, rtol, m, excess)
            n_over_seed += _count_over(excess, m, seed_atol)
            if has_allow:
                top_noise = max(top_noise, _less_allowance(excess, abs_err, allow, s0, m))
            _rels(abs_err, abs_b, m, rel)
            if has_exact:
                _floor_ratios(scale, abs_b, allow, s0, m, rtol, has_allow, aux)
                bar_r = bar_ratio if n_ratio < k_floor else min(bar_ratio, -rv[k_floor - 1])
                bar_a = max(bar_abs, 0.0) if n_absb < k_floor else max(bar_abs, av[k_floor - 1], 0.0)
                if _count_below(aux, m, bar_r) + _count_over(abs_b, m, bar_a):
                    for j in range(m):
                        if abs_b[j] > 0:
                            if aux[j] < bar_ratio:
                                n_ratio = _insert(rv, ri, n_ratio, -np.float64(aux[j]), s0 + j)
                            if abs_b[j] > bar_abs:
                                n_absb = _insert(av, ai, n_absb, np.float64(abs_b[j]), s0 + j)
                seb, sbb, sst, sno, nc, nt, nu = _exact_sums(a, exact, noise, s0, m, has_noise, direction,
                                                             sign_min, sign_max)
                sum_eb += seb
                sum_bb += sbb
                sum_store += sst
                sum_noise += sno
                n_counted += nc
                n_toward += nt
                n_up += nu
            max_abs, at_abs = _running_max(abs_err, m, s0, max_abs, at_abs)
            max_rel, at_rel = _running_max(rel, m, s0, max_rel, at_rel)
            max_ulp, at_ulp = _running_max(ulp, m, s0, max_ulp, at_ulp)
            n_mismatch += _count_over(excess, m, atol)
            bar_w = bar_worst if n_worst < k_worst else max(bar_worst, wv[k_worst - 1])
            if _count_over(excess, m, bar_w):
                for j in range(m):
                    if excess[j] > bar_worst:
                        n_worst = _insert(wv, wi, n_worst, np.float64(excess[j]), s0 + j)
            if has_bound:
                over, total = _bound_sums(abs_err, bound, s0, m, aux)
                n_over_bound += over
                sum_bound += total
                max_util, at_util = _running_max(aux, m, s0, max_util, at_util)
        if n_nonfinite == 0 and not dual_only:
            # the sampled histograms: first_sample + multiples of sample_step
            i = first_sample if lo <= first_sample else lo + (first_sample - lo) % sample_step
            while i < hi:
                bk = np.float32(b[i])
                e_abs = abs(a[i] - bk)
                n_sampled += 1
                j = np.searchsorted(ulp_edges, np.float64(_ulp(e_abs, bk)), side="right") - 1
                ulp_hist[blk, min(max(j, 0), n_ulp_bins - 1)] += 1
                if e_abs != 0:
                    j = np.searchsorted(log_edges, math.log10(np.float64(e_abs)), side="right") - 1
                    log_hist[blk, min(max(j, 0), n_log_bins - 1)] += 1
                i += sample_step
        row = acc[blk]
        row[N_NONFINITE], row[N_FINITE], row[N_VISIBLE], row[SQ_B] = n_nonfinite, n_finite, n_visible, sq_b
        row[MAX_GOLDEN], row[N_ZERO_PASSES], row[N_OVER_SEED] = _from_bits32(top_golden), n_zero, n_over_seed
        row[MAX_NOISE_RATIO] = _from_bits32(top_noise)
        row[MAX_ABS], row[MAX_ABS_AT], row[MAX_REL], row[MAX_REL_AT] = max_abs, at_abs, max_rel, at_rel
        row[MAX_ULP], row[MAX_ULP_AT], row[N_MISMATCH] = max_ulp, at_ulp, n_mismatch
        row[SUM_ERR], row[SUM_ABS_ERR], row[N_POS], row[N_NEG] = sum_err, sum_abs_err, n_pos, n_neg
        row[DOT], row[SQ_A], row[SQ_B_PAIRS] = dot, sq_a, sq_b_pairs
        row[N_SMALL], row[N_SMALL_ERR], row[N_ULP_OVER_1] = n_small, n_small_err, n_ulp_over_1
        row[SUM_SQ_ERR_NORMAL], row[SUM_REL_NORMAL] = sum_sq_normal, sum_rel_normal
        row[MAX_REL_NORMAL] = _from_bits32(top_rel_normal)
        row[SUM_EB], row[SUM_BB], row[SUM_STORE], row[SUM_NOISE] = sum_eb, sum_bb, sum_store, sum_noise
        row[N_COUNTED], row[N_TOWARD], row[N_UP] = n_counted, n_toward, n_up
        row[MAX_UTIL], row[MAX_UTIL_AT], row[N_OVER_BOUND], row[SUM_BOUND] = max_util, at_util, n_over_bound, sum_bound
        row[N_SAMPLED] = n_sampled
        worst_n[blk] = n_worst
        ratio_n[blk] = n_ratio
        absb_n[blk] = n_absb


@njit(inline="always")
def _element(i, a, b, rounded, allow, flags, rtol):
    """Element ``i`` as the loop above computes it: (FP32 golden, |error|, |golden|, rtol's scale,
    allowance, excess over rtol scale and the allowance)."""
    has_rounded = (flags & ROUNDED) != 0
    has_allow = (flags & ALLOWANCE) != 0
    bk = np.float32(b[i])
    abs_err = abs(a[i] - bk)
    abs_b = abs(bk)
    scale = _scale(abs_b, rounded[i if rounded.shape[0] == a.shape[0] else 0], has_rounded)
    lk = allow[i if allow.shape[0] == a.shape[0] else 0] if has_allow else np.float32(0.0)
    excess = _seed_excess(abs_err, scale, rtol)
    if has_allow:
        excess = excess - lk
    return bk, abs_err, abs_b, scale, lk, excess


@njit(cache=True, error_model="numpy")
def fields_at(index, a, b, rounded, allow, flags, rtol):
    """Per selected element (``index``): |error|, rel, ULP, excess, |golden| and the floor's
    margin, as the loop above computes them; one row each, FP32 values in FP64."""
    has_allow = (flags & ALLOWANCE) != 0
    out = np.empty((index.shape[0], 6))
    for j in range(index.shape[0]):
        bk, abs_err, abs_b, scale, lk, excess = _element(index[j], a, b, rounded, allow, flags, rtol)
        out[j, 0] = abs_err
        out[j, 1] = _rel(abs_err, abs_b)
        out[j, 2] = _ulp(abs_err, bk)
        out[j, 3] = excess
        out[j, 4] = abs_b
        out[j, 5] = _margin(scale, lk, rtol, has_allow)
    return out


@njit(cache=True, error_model="numpy")
def excess_over(a, b, rounded, allow, flags, rtol, lo, hi, threshold, ceiling):
    """The excess of the elements lo..hi-1 that is above ``threshold`` and at or below
    ``ceiling``, in element order, as the loop above computes it (FP32): what a comparison keeps
    while its atol is still unknown (the values above the ceiling it only counts)."""
    out = np.empty(hi - lo, dtype=np.float32)
    count = 0
    for i in range(lo, hi):
        excess = _element(i, a, b, rounded, allow, flags, rtol)[5]
        if excess > threshold and excess <= ceiling:
            out[count] = excess
            count += 1
    return out[:count]


@njit(cache=True)
def _cached_layout():
    """The slot table's checksum as the cached machine code of this file has it."""
    return SLOT_LAYOUT


class StaleCache(RuntimeError):
    """numba's cache of this file was compiled with another slot table."""


def check_cache() -> None:
    """Refuse machine code cached with another slot table (``SLOT_LAYOUT``): it would write every
    slice's sums into the wrong slots."""
    if _cached_layout() != SLOT_LAYOUT:
        where = numba.config.CACHE_DIR or os.path.join(os.path.dirname(__file__), "__pycache__")
        raise StaleCache(f"numba's cache of {__file__} was compiled with another contract.metric_table.SLOTS "
                         f"(numba sees edits of that file only): remove its compiled_pass.*.nbi and .nbc "
                         f"files under {where} to recompile it")


check_cache()


def set_threads(n: int) -> None:
    """numba's threads follow torch's (one per xdist worker, all cores in one process). numba's
    OpenMP layer shares torch's OpenMP runtime, and launching its pool sets that runtime's thread
    count to numba's maximum: a process that set torch to 1 thread ran the rest of its products
    on 2 (measured, 2 cores), so torch's count is put back as it was."""
    torch_threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)
