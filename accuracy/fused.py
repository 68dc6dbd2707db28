"""The element-wise comparison of ``accuracy.metrics.ErrorStats`` in one compiled pass.

The eager comparison makes about 35 passes over every element (error, ratios, spacings, counts,
sums, maxima, selections), each a full read and write of the slice: 13 s of the 32.9 s gate at
M=65536 on a 2-core Xeon. Here one loop per slice of rows computes, for the finite pairs, every
count, FP64 sum, maximum with its first index, sampled histogram and running top-k that the
eager path does, with the same FP32 arithmetic per element (so every count and selection that
the verdict reads is the same number), in one read of each input.

Why numba: it ships LLVM in its wheel, so a fresh machine with only Python and the package
registries compiles it (``torch.compile``'s C++ backend needs a system compiler), and its
``cache=True`` keeps the machine code between processes. Measured by
``benchmarks/compare_tools.py`` (README, "Which tool"): ``ErrorStats.update`` 45.9 -> 28.5 ns
per gated element on a 2-core Xeon. The loop is scalar; its running maxima with their index and
its selections keep it so. The eager path stays the reference:
for other devices, for slices with NaN or Inf, and in ``tests/core/test_fused_metrics.py``,
which checks both give the same record.

Layout: a call covers whole slices of ``block`` elements (``ErrorStats``'s own slices), one
row of ``acc`` and of each top-k table per slice, filled in parallel; the caller adds the
slices' sums in order, so a record never depends on how the rows were chunked.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

# slots of a slice's row of ``acc`` (float64; counts are exact there up to 2^53)
(N_VISIBLE, SQ_B, MAX_GOLDEN, N_ZERO_PASSES, N_OVER_SEED, MAX_NOISE_RATIO,
 MAX_ABS, MAX_ABS_AT, MAX_REL, MAX_REL_AT, MAX_ULP, MAX_ULP_AT, N_MISMATCH,
 SUM_ERR, SUM_ABS_ERR, N_POS, N_NEG, DOT, SQ_A, SQ_B_PAIRS,
 N_SMALL, N_SMALL_ERR, N_ULP_OVER_1, SUM_SQ_ERR_NORMAL, SUM_REL_NORMAL, MAX_REL_NORMAL,
 SUM_EB, SUM_BB, SUM_STORE, SUM_NOISE, N_COUNTED, N_TOWARD,
 MAX_UTIL, MAX_UTIL_AT, N_OVER_BOUND, SUM_BOUND, N_SAMPLED, N_NONFINITE, N_FINITE, N_UP) = range(40)
N_SLOTS = 40

# ``flags`` bits
DUAL, DUAL_ONLY, EXACT, DIRECTION, ALLOWANCE, ROUNDED, BOUND, NOISE = (1 << i for i in range(8))

# ``params`` slots (float64; the FP32 thresholds are stored already rounded to FP32, as the
# eager path's comparisons of an FP32 tensor with a Python float round the float)
(P_RTOL, P_SEED_ATOL, P_ZERO_PASS, P_ATOL, P_SMALL, P_SMALL_ATOL, P_REL_EPS, P_SIGN_MIN, P_SIGN_MAX,
 P_BAR_WORST, P_BAR_RATIO, P_BAR_ABS, P_FIRST_SAMPLE, P_SAMPLE_STEP) = range(14)
N_PARAMS = 14

_MIN_NORMAL = 2.0 ** -126
_BF16_FRACTION = 2.0 ** -7


@intrinsic
def _bits(typingctx, x):
    """The bits of an FP64 value as an int64 (a bitcast: ``math.frexp`` costs 16 ns a call)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, x):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


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


@njit(parallel=True, cache=True, error_model="numpy", nogil=True)
def compare_slices(a, b, rounded, allow, exact, noise, bound, block, flags, params, ulp_edges, log_edges,
                   acc, ulp_hist, log_hist, worst_v, worst_i, worst_n, ratio_v, ratio_i, ratio_n,
                   absb_v, absb_i, absb_n):
    """One row of the tables per slice of ``block`` elements of the flat ``a`` (FP32 kernel
    values) against ``b`` (the golden, FP32 or FP64). Optional inputs are arrays of the full
    length or of length 1 (one value for every element), flagged in ``flags``. Non-finite pairs
    are only counted (``N_NONFINITE``): the caller compares such a slice on the eager path.
    Selections: ``worst`` the largest excess beyond ``P_BAR_WORST``; ``ratio`` the smallest
    margin / |golden| below ``P_BAR_RATIO`` (stored negated); ``absb`` the largest |golden|
    beyond ``P_BAR_ABS``; zero goldens are never floor candidates."""
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
    r_step = 1 if rounded.shape[0] == n else 0
    l_step = 1 if allow.shape[0] == n else 0
    x_step = 1 if exact.shape[0] == n else 0
    v_step = 1 if noise.shape[0] == n else 0
    d_step = 1 if bound.shape[0] == n else 0
    rtol = params[P_RTOL]
    seed_atol = np.float32(params[P_SEED_ATOL])
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
    for blk in prange(n_blocks):
        lo = blk * block
        hi = min(n, lo + block)
        # accumulators in locals (registers), counts added as 0/1
        n_nonfinite = n_finite = n_visible = n_zero = n_over_seed = n_mismatch = 0
        n_pos = n_neg = n_small = n_small_err = n_ulp_over_1 = n_counted = n_toward = n_up = 0
        n_over_bound = n_sampled = 0
        sq_b = sum_sq_normal = sum_rel_normal = sum_eb = sum_bb = sum_store = sum_noise = 0.0
        sum_err = sum_abs_err = dot = sq_a = sq_b_pairs = sum_bound = 0.0
        max_golden = max_noise = max_rel_normal = np.float32(0.0)
        max_abs = max_rel = max_ulp = max_util = np.float32(-1.0)
        at_abs = at_rel = at_ulp = at_util = -1
        n_worst = n_ratio = n_absb = 0
        wv, wi = worst_v[blk], worst_i[blk]
        rv, ri = ratio_v[blk], ratio_i[blk]
        av, ai = absb_v[blk], absb_i[blk]
        # the first sampled index at or after lo: first_sample + a multiple of sample_step
        next_sample = first_sample if lo <= first_sample else lo + (first_sample - lo) % sample_step
        for i in range(lo, hi):
            sampled = i == next_sample
            if sampled:
                next_sample += sample_step
            ak = a[i]
            bk = np.float32(b[i])
            if not (math.isfinite(ak) and math.isfinite(bk)):
                n_nonfinite += 1
                continue
            n_finite += 1
            err = ak - bk
            abs_err = abs(err)
            abs_b = abs(bk)
            # the golden's sums
            max_golden = max(max_golden, abs_b)
            n_visible += dual and abs_b > small_atol
            sq_b += np.float64(abs_b) * np.float64(abs_b)
            n_zero += abs_b <= zero_pass
            ulp = _ulp(abs_err, bk)
            if dual:
                is_small = abs_b <= small
                n_small += is_small
                n_small_err += is_small and abs_err > small_atol
                normal_err = np.float32(0.0) if is_small else abs_err
                sum_sq_normal += np.float64(normal_err) * np.float64(normal_err)
                rel_n = normal_err / (abs_b + rel_eps)
                sum_rel_normal += rel_n
                max_rel_normal = max(max_rel_normal, rel_n)
                n_ulp_over_1 += ulp > 1
            n_pos += err > 0
            n_neg += err < 0
            if dual_only:
                continue
            scale = _scale(abs_b, rounded[i * r_step], has_rounded)
            excess = _seed_excess(abs_err, scale, rtol)
            n_over_seed += excess > seed_atol
            lk = np.float32(0.0)
            if has_allow:
                lk = allow[i * l_step]
                excess = excess - lk
                max_noise = max(max_noise, _nan_to_num(abs_err / lk))
            rel = _rel(abs_err, abs_b)
            if has_exact and abs_b > 0:
                floor_ratio = _margin(scale, lk, rtol, has_allow) / abs_b
                if floor_ratio < bar_ratio:
                    n_ratio = _insert(rv, ri, n_ratio, -np.float64(floor_ratio), i)
                if abs_b > bar_abs:
                    n_absb = _insert(av, ai, n_absb, np.float64(abs_b), i)
            if has_exact:
                xk = exact[i * x_step]
                e = np.float64(ak) - xk
                sp = _spacing(xk)
                sum_eb += e * xk
                sum_bb += xk * xk
                store = sp * xk
                sum_store += store * store
                if has_noise:
                    sum_noise += noise[i * v_step] * (xk * xk)
                if direction:
                    ulps = e / sp
                    size = abs(ulps)
                    counted = size >= sign_min and size <= sign_max
                    n_counted += counted
                    n_toward += counted and ulps * xk < 0
                    n_up += counted and e > 0
            if abs_err > max_abs:
                max_abs = abs_err
                at_abs = i
            if rel > max_rel:
                max_rel = rel
                at_rel = i
            if ulp > max_ulp:
                max_ulp = ulp
                at_ulp = i
            n_mismatch += excess > atol
            if excess > bar_worst:
                n_worst = _insert(wv, wi, n_worst, np.float64(excess), i)
            sum_err += err
            sum_abs_err += abs_err
            a64 = np.float64(ak)
            b64 = np.float64(bk)
            dot += a64 * b64
            sq_a += a64 * a64
            sq_b_pairs += b64 * b64
            if sampled:
                n_sampled += 1
                j = np.searchsorted(ulp_edges, np.float64(ulp), side="right") - 1
                ulp_hist[blk, min(max(j, 0), n_ulp_bins - 1)] += 1
                if abs_err != 0:
                    j = np.searchsorted(log_edges, math.log10(np.float64(abs_err)), side="right") - 1
                    log_hist[blk, min(max(j, 0), n_log_bins - 1)] += 1
            if has_bound:
                bd = bound[i * d_step]
                util = _nan_to_num(abs_err / bd)
                if util > max_util:
                    max_util = util
                    at_util = i
                n_over_bound += util > 1
                sum_bound += bd
        row = acc[blk]
        row[N_NONFINITE], row[N_FINITE], row[N_VISIBLE], row[SQ_B] = n_nonfinite, n_finite, n_visible, sq_b
        row[MAX_GOLDEN], row[N_ZERO_PASSES], row[N_OVER_SEED], row[MAX_NOISE_RATIO] = max_golden, n_zero, n_over_seed, max_noise
        row[MAX_ABS], row[MAX_ABS_AT], row[MAX_REL], row[MAX_REL_AT] = max_abs, at_abs, max_rel, at_rel
        row[MAX_ULP], row[MAX_ULP_AT], row[N_MISMATCH] = max_ulp, at_ulp, n_mismatch
        row[SUM_ERR], row[SUM_ABS_ERR], row[N_POS], row[N_NEG] = sum_err, sum_abs_err, n_pos, n_neg
        row[DOT], row[SQ_A], row[SQ_B_PAIRS] = dot, sq_a, sq_b_pairs
        row[N_SMALL], row[N_SMALL_ERR], row[N_ULP_OVER_1] = n_small, n_small_err, n_ulp_over_1
        row[SUM_SQ_ERR_NORMAL], row[SUM_REL_NORMAL], row[MAX_REL_NORMAL] = sum_sq_normal, sum_rel_normal, max_rel_normal
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
def excess_over(a, b, rounded, allow, flags, rtol, lo, hi, threshold):
    """The excess of the elements lo..hi-1 that is above ``threshold``, in element order, as the
    loop above computes it (FP32): what a comparison keeps while its atol is still unknown."""
    out = np.empty(hi - lo, dtype=np.float32)
    count = 0
    for i in range(lo, hi):
        excess = _element(i, a, b, rounded, allow, flags, rtol)[5]
        if excess > threshold:
            out[count] = excess
            count += 1
    return out[:count]


def set_threads(n: int) -> None:
    """numba's threads follow torch's (one per xdist worker, all cores in one process)."""
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
