"""Error metrics of one output against one golden, accumulated chunk by chunk.

``ErrorStats.update`` takes rows of the kernel's output, the golden's and
(optionally) the rounding-model bound; ``finalize`` returns a JSON-ready dict.
Nothing here raises on bad values: NaN, Inf, zeros and empty chunks are data.
Only ``accuracy.gate`` turns these numbers into a verdict.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from accuracy import compiled_pass
from accuracy.allowance import (SCALE_BIAS, SIGN_MAX_ULP, SIGN_MIN_ULP, TAIL_SIGMAS, direction_allowed,
                                direction_counts)
from accuracy.dual import REL_EPS, SMALL_VALUE, SMALL_VALUE_ATOL
from accuracy.localized import LocalSums
from goldens.threads import compiled_pass_threads
from accuracy.tolerances import Tolerance
from accuracy.ulp import bf16_spacing
from contract.metric_table import AGGREGATE, DUAL, DUAL_ONLY, METRICS, ordered

WORST_K = 8
FLOOR_K = 64
# "Excess" values (|err| - rtol|golden| - allowance) above a lower bound of the atol, kept to count
# mismatches exactly at an atol known only after the last chunk; 4M float32 = 16 MiB. When more
# are held, the largest half is counted and let go (the kept values' ceiling falls): the count
# stays exact while the final atol is at or below that ceiling (a kernel far off: its excess is
# mostly far above the atol), and becomes a range otherwise.
EXCESS_CAP = 1 << 22
HIST_SAMPLE = 1 << 20
# Rows are compared in slices of about this many elements (1 MiB in FP32): each of the ~40
# element-wise passes then reuses the slice from cache instead of faulting in a fresh 32 MiB
# buffer (8192 x 1024 FP32: 14.6 ms per subtraction; in 2^18-element slices, 0.65 ms per 2^23
# elements, measured on a 2-core EPYC).
SLICE_ELEMENTS = 1 << 18


def slice_rows(width: int) -> int:
    """Rows per element-wise slice (``SLICE_ELEMENTS``) of an output ``width`` elements wide."""
    return max(1, SLICE_ELEMENTS // max(1, width))


def row_slices(shape, elements: int) -> list[slice]:
    """The rows of an output of ``shape`` in slices of about ``elements`` elements, each a whole
    number of ``ErrorStats.update``'s own slices: updating slice by slice (with ``row_offset``)
    gives the same record, bit for bit, as one update of the whole output."""
    rows, width = (shape[0], shape[-1]) if len(shape) > 1 else (1, 1)
    step = slice_rows(width) * max(1, elements // (slice_rows(width) * max(1, width)))
    return [slice(a, min(a + step, rows)) for a in range(0, max(rows, 1), step)]
# ULP histogram: 1/8-ULP bins up to 16 ULP, then 8 bins per octave up to 2^16 ULP.
ULP_EDGES = torch.cat([torch.arange(0, 16, 0.125, dtype=torch.float64),
                       torch.exp2(torch.arange(4, 16.001, 0.125, dtype=torch.float64)),
                       torch.tensor([math.inf], dtype=torch.float64)])
LOG10_EDGES = torch.arange(-45.0, 5.001, 0.25, dtype=torch.float64)
_ULP_EDGES_NP, _LOG10_EDGES_NP = ULP_EDGES.numpy(), LOG10_EDGES.numpy()


def _histogram(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Counts per [edges[i], edges[i+1]); values beyond the last edge land in the last bin."""
    idx = torch.bucketize(values, edges, right=True) - 1
    idx = idx.clamp(0, len(edges) - 2)
    return torch.bincount(idx, minlength=len(edges) - 1)


def _percentile(counts: torch.Tensor, edges: torch.Tensor, q: float) -> float | None:
    total = int(counts.sum())
    if total == 0:
        return None
    cum = torch.cumsum(counts, 0)
    i = int(torch.searchsorted(cum, torch.tensor(math.ceil(q * total), dtype=cum.dtype)))
    return float(edges[min(i + 1, len(edges) - 1)])


# A strided sample this large fixes a first bar for the selections below: its k-th best value is
# no better than the chunk's, so every element of the chunk's true top k passes the bar.
SELECTION_SAMPLE = 1 << 16


def _best_indices(values: torch.Tensor, k: int, largest: bool, bar: float | None) -> torch.Tensor:
    """Indices of the ``k`` largest (or smallest) values, exactly, ranking only the elements at or
    beyond ``bar`` (the k-th best from earlier chunks, else from a strided sample), so a chunk of
    millions costs one comparison pass instead of a full ``topk``. NaN is never selected."""
    n = values.numel()
    k = min(k, n)
    if k == 0:
        return torch.zeros(0, dtype=torch.long, device=values.device)
    if bar is None and n > SELECTION_SAMPLE:
        sample = values[:: n // SELECTION_SAMPLE]
        sample = sample[~torch.isnan(sample)]
        if sample.numel() >= k:
            bar = float(torch.topk(sample, k, largest=largest).values[-1])
    if bar is None:
        idx = torch.nonzero(~torch.isnan(values)).squeeze(1)
    else:
        idx = torch.nonzero(values >= bar if largest else values <= bar).squeeze(1)
    picked = torch.topk(values[idx], min(k, idx.numel()), largest=largest).indices
    return idx[picked]


def _index(flat: int, row_offset: int, width: int) -> list[int]:
    return [row_offset + flat // width, flat % width]


class _Slice(NamedTuple):
    """One slice's arguments of ``ErrorStats._update_slice``, in its order."""
    actual: torch.Tensor
    expected: torch.Tensor
    bound: torch.Tensor | None
    row_offset: int
    rounded_terms: torch.Tensor | None
    allowance: torch.Tensor | None
    exact: torch.Tensor | None
    noise_var: torch.Tensor | None
    shared_var: torch.Tensor | None
    shared_axis: int | None
    shared_total: float
    direction: bool


class ErrorStats:
    """Streaming comparison of kernel output ``actual`` with golden ``expected``."""

    def __init__(self, tol: Tolerance, shape: tuple[int, int], *, dual: bool = False, dual_only: bool = False,
                 scale_rms: float | None = None):
        """``dual``: also keep msprobe's benchmark-standard metrics (``accuracy.dual``); ``dual_only``:
        keep only those (and the golden's sums): a quarter of the passes.
        ``scale_rms``: the rms that sets the magnitude-aware atol (the output's reference), known
        before the first element: every mismatch is then counted exactly as it streams past.
        Without it the atol follows the rms given to ``settle_atol`` after the last chunk, or this
        golden's own, and the count comes from the kept excess: every value above the atol's lower
        bound known so far (``raise_excess_floor``; 0 without one) and at or below a ceiling that
        falls when more than ``EXCESS_CAP`` values are held (those above it are counted): exact
        while the final atol is at or below the ceiling, a range otherwise (``overflowed``)."""
        self.tol = tol
        self.dual = dual or dual_only
        self.dual_only = dual_only
        self.atol_known = None if scale_rms is None else tol.effective_atol(scale_rms)
        self.scale_rms = scale_rms
        self.n_mismatch_known = 0
        self.n_small = self.n_small_err = self.n_normal = self.n_ulp_over_1 = 0
        self.n_golden_visible = 0   # finite |golden| above msprobe's small-value atol (what zeros get wrong)
        self.sum_sq_err_normal = self.sum_rel_normal = 0.0
        self.max_rel_normal = 0.0
        self.shape = list(shape)
        self.n = 0
        self.n_compared = 0         # both finite
        self.nonfinite = {"nan_both": 0, "nan_actual_only": 0, "nan_expected_only": 0,
                          "inf_match": 0, "inf_mismatch": 0}
        self.first_nonfinite: dict | None = None   # first element whose NaN/Inf the other side lacks
        self.max_abs = (-1.0, None)
        self.max_rel = (-1.0, None)
        self.max_ulp = (-1.0, None)
        self.worst: list[dict] = []
        self.excess_kept: list[torch.Tensor] = []
        self.n_excess_kept = 0
        self.excess_floor = 0.0     # an FP32 value at or below the atol: only excess above it is kept
        self.excess_sieved_at = 0.0  # the floor the kept values were last sieved at
        self.excess_ceiling = math.inf   # excess above it is counted (n_excess_above), not kept
        self.n_excess_above = 0
        self.n_excess_dropped = 0   # excess above the floor neither kept nor counted (ties at a full cap)
        self.n_over_seed = 0
        self.sum_err = self.sum_abs_err = 0.0
        self.n_pos = self.n_neg = 0
        self.dot = self.sq_a = self.sq_b = 0.0
        self.n_golden_finite = 0
        self.sq_b_pairs = 0.0
        self.hist_weight = 0
        self.n_zero_passes = 0      # |golden| small enough that 0 passes the seed gate
        self.max_golden = 0.0
        self.ulp_hist = torch.zeros(len(ULP_EDGES) - 1, dtype=torch.int64)
        self.log10_hist = torch.zeros(len(LOG10_EDGES) - 1, dtype=torch.int64)
        self.n_exact = 0
        self.bound_seen = False
        self.max_noise_ratio = 0.0
        self.max_util = (-1.0, None)
        self.n_over_bound = 0
        self.sum_bound = 0.0
        self.allowance_seen = False
        self.floor_candidates: torch.Tensor | None = None   # [|golden|, rtol|golden| + allowance] rows
        self.aggregate_seen = False
        self.direction_seen = True
        self.toward_zero_seen = True    # every update tested the share toward zero too
        self.sum_eb = self.sum_bb = self.sum_vbb = 0.0
        self.scale_bias: float | None = None   # the fitted scale's rounding bias on this data (None: SCALE_BIAS)
        self.local_bias: dict | None = None    # its numerators per row and column (``TermSums.local_bias``)
        self.n_toward = self.n_away = 0
        self.n_up = 0               # of the counted errors, those above the FP64 value
        self.local: LocalSums | None = None    # the localized tests' sums (``accuracy.localized``)

    def update(self, actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | None = None,
               row_offset: int = 0, rounded_terms: torch.Tensor | None = None,
               allowance: torch.Tensor | None = None,
               exact: torch.Tensor | None = None, noise_var: torch.Tensor | None = None,
               shared_var: torch.Tensor | None = None, shared_axis: int | None = None,
               shared_total: float = 0.0, direction: bool = True, toward_zero: bool = True,
               shared_rows: torch.Tensor | None = None, element_var: torch.Tensor | None = None) -> None:
        """``rounded_terms``: per element, the magnitude of intermediate values the dtype path
        stores in BF16 before the final rounding (dx's two products); rtol applies to
        |golden| + rounded_terms, since each rounding point can flip once and a flip at a
        product moves the result by the product's ULP.
        ``allowance``: per element, what the operator's legitimate choices may add
        (``accuracy.allowance``), added to the tolerance.
        ``exact``, ``noise_var``, ``shared_var``/``shared_axis`` and ``direction``: the FP64
        values and the variance model of a correct kernel's error beyond its own store
        (``accuracy.allowance.Allowance``); with them the aggregate tests' sums are kept
        (fitted scale; rounding direction where ``direction``: the share upward, and the share
        toward zero where ``toward_zero``), in float64.

        Element-wise work runs in FP32 (the kernel's BF16 values are exact there; an FP64
        golden rounded to FP32 moves by 2^-24 relative, 2^16 times below a BF16 ULP), in
        row slices of about ``SLICE_ELEMENTS``; sums run in FP64 so that subnormal outputs do
        not underflow. On the CPU one compiled pass (``accuracy.compiled_pass``) does the work of the
        eager passes of ``_update_slice``, which serves other devices and slices with NaN/Inf.
        The two histograms come from a systematic sample of at most 2^20 elements of the whole
        output; every max, count and the worst elements are exact."""
        if not toward_zero:
            self.toward_zero_seen = False
        if exact is not None and not self.dual_only:
            if self.local is None:
                self.local = LocalSums(self.shape)
            self.local.add(actual, exact, row_offset, noise_var=noise_var, element_var=element_var,
                           shared_var=shared_var, shared_axis=shared_axis, shared_rows=shared_rows,
                           shared_total=shared_total, group_rows=slice_rows(actual.shape[-1]))
        rows = actual.shape[0] if actual.dim() > 1 else 0
        step = slice_rows(actual.shape[-1]) if rows else 0
        if rows <= step:
            pieces = [_Slice(actual, expected, bound, row_offset, rounded_terms, allowance, exact, noise_var,
                             shared_var, shared_axis, shared_total, direction)]
        else:
            def cut(t: torch.Tensor | None, start: int) -> torch.Tensor | None:
                return t if t is None or t.dim() == 0 or t.shape[0] != rows else t[start:start + step]

            # the shared variance sum_j V_j |r_j|^2 separates over rows: per column (axis 1) every
            # slice adds its rows' part with the whole V; per row (axis 0) each slice its own rows' V.
            # A whole [K, N] dw at K=4096, N=11008 in one slice took 16 GB of FP64 temporaries.
            def shared_of(start: int) -> torch.Tensor | None:
                if shared_var is None or shared_axis == 1:
                    return shared_var
                return shared_var.reshape(-1)[start:start + step]

            pieces = [_Slice(actual[start:start + step], expected[start:start + step], cut(bound, start),
                             row_offset + start, cut(rounded_terms, start), cut(allowance, start),
                             cut(exact, start), cut(noise_var, start), shared_of(start), shared_axis,
                             shared_total if start == 0 else 0.0, direction)
                      for start in range(0, rows, step)]
        if not self._update_compiled(actual, expected, bound, row_offset, rounded_terms, allowance, exact,
                                  noise_var, direction, pieces):
            for piece in pieces:
                self._update_slice(*piece)

    def _compiled_inputs(self, actual, expected, bound, rounded_terms, allowance, exact, noise_var):
        """The flat NumPy views ``accuracy.compiled_pass`` reads, or None where it does not apply: another
        device, an optional input that is neither per element nor one value."""
        if actual.device.type != "cpu" or expected.device.type != "cpu" or actual.numel() == 0:
            return None
        n = actual.numel()

        def flat(t, dtype):
            if t is None:      # one value the loop reads and ignores (its flag is off)
                return np.zeros(1, dtype=np.float32 if dtype == torch.float32 else np.float64)
            if t.device.type != "cpu" or t.numel() not in (n, 1):
                raise LookupError
            # one value for every element: given to the pass per element, so its loops are plain
            return t.detach().reshape(-1).expand(n).to(dtype).contiguous().numpy()
        try:
            # the golden as FP32: the compiled pass rounds every golden value it reads to FP32 first
            # (``np.float32(b[i])``, as the eager path's ``expected.float()``), so an FP64 golden
            # gives the same record converted here, read at half the bytes, and one compiled
            # variant of each loop instead of two (9.7 s and 7.3 s of compiling on a fresh clone)
            return (flat(actual, torch.float32), flat(expected, torch.float32),
                    flat(rounded_terms, torch.float32), flat(allowance, torch.float32),
                    flat(exact, torch.float64), flat(noise_var, torch.float64), flat(bound, torch.float32))
        except LookupError:
            return None

    def _keep_excess(self, n_over: int, values) -> None:
        """With the atol still unknown: ``n_over`` elements of a slice have an excess above the
        floor; ``values(ceiling)`` gives those at or below ``ceiling`` in element order (FP32).
        The values above the ceiling are counted, the rest kept, compacted when more than
        ``EXCESS_CAP`` are held."""
        if not n_over:
            return
        kept = values(self.excess_ceiling)
        self.n_excess_above += n_over - kept.numel()
        if kept.numel():
            self.excess_kept.append(kept)
            self.n_excess_kept += kept.numel()
        if self.n_excess_kept > EXCESS_CAP:
            self._compact_excess()

    def _compact_excess(self) -> None:
        """Drop the kept values the floor has passed; if more than half the cap remain, lower the
        ceiling to the value of rank ``EXCESS_CAP // 2`` and count the values above it (one
        ``kthvalue`` over at most the cap and a slice: ~50 ms for 4M values). Values equal to the
        ceiling stay kept; beyond the cap they are dropped and the count becomes a range."""
        kept = torch.cat(self.excess_kept)
        kept = kept[kept > self.excess_floor]
        keep = max(1, EXCESS_CAP // 2)
        if kept.numel() > keep:
            ceiling = float(torch.kthvalue(kept, keep).values)
            above = kept > ceiling
            self.n_excess_above += int(torch.count_nonzero(above))
            self.excess_ceiling = ceiling
            kept = kept[~above]
        if kept.numel() > EXCESS_CAP:
            self.n_excess_dropped += kept.numel() - EXCESS_CAP
            kept = kept[:EXCESS_CAP]
        self.excess_kept = [kept] if kept.numel() else []
        self.n_excess_kept = kept.numel()

    def raise_excess_floor(self, atol_floor: float) -> None:
        """A lower bound of the atol, known before the next slice (a row output's: the atol of
        the rms its reference's rows so far give over all its elements, which only grows): excess
        at or below it can fail no atol, so it is no longer kept. The floor is the largest FP32 value not above the bound,
        so every FP32 excess above the final atol, or above that atol rounded to FP32, is above it."""
        if self.atol_known is not None:
            return
        floor = float(np.float32(atol_floor))
        if floor > atol_floor:
            floor = float(np.nextafter(np.float32(floor), np.float32(-np.inf)))
        if floor <= self.excess_floor:
            return
        self.excess_floor = floor
        # the kept values it passes are dropped when the floor has doubled since they were last
        # sieved: a few sieves per comparison (its first chunk's floor is about a tenth of the
        # final atol at the article's case) instead of one per chunk over up to EXCESS_CAP values
        if floor > 2 * self.excess_sieved_at:
            self.excess_sieved_at = floor
            self.excess_kept = [kept for t in self.excess_kept if (kept := t[t > floor]).numel()]
            self.n_excess_kept = sum(t.numel() for t in self.excess_kept)

    def settle_atol(self, scale_rms: float) -> None:
        """The rms that sets the magnitude-aware atol, known only after the last slice (a row
        output's reference, summed as its rows stream past): the mismatches are counted from the
        kept excess, exactly unless ``overflowed``."""
        if self.atol_known is not None:
            raise ValueError("the atol was known before the first slice")
        self.scale_rms = scale_rms

    def _settled_atol(self) -> float:
        """The atol the count is made against: the known one, or the settled rms's (this golden's own without one)."""
        if self.atol_known is not None:
            return self.atol_known
        rms = math.sqrt(self.sq_b / self.n_golden_finite) if self.n_golden_finite else 0.0
        return self.tol.effective_atol(self.scale_rms if self.scale_rms is not None else rms)

    def _excess_counts(self, atol: float) -> tuple[int, int]:
        """(excess values above ``atol``, values whose side of it is not known). The values
        above the ceiling are above the atol when the ceiling is at or above the atol as the FP32
        comparison sees it (the atol rounded to FP32); otherwise their side is unknown."""
        kept = torch.cat(self.excess_kept) if self.excess_kept else torch.zeros(0)
        over = int((kept > atol).sum())
        unknown = self.n_excess_dropped
        if self._ceiling_holds(atol):
            over += self.n_excess_above
        else:
            unknown += self.n_excess_above
        return over, unknown

    def _ceiling_holds(self, atol: float) -> bool:
        return self.excess_ceiling >= float(np.float32(atol))

    @property
    def overflowed(self) -> bool:
        """Some excess above the floor is on an unknown side of the settled atol: the count is a range."""
        if self.atol_known is not None:
            return False
        return self.n_excess_dropped > 0 or (self.n_excess_above > 0 and not self._ceiling_holds(self._settled_atol()))

    def _update_compiled(self, actual, expected, bound, row_offset, rounded_terms, allowance, exact, noise_var,
                      direction, pieces: list[_Slice]) -> bool:
        """The update in one compiled pass (``accuracy.compiled_pass``), its slices' sums added in order;
        a slice with NaN or Inf goes to the eager path. False where the pass does not apply."""
        arrays = self._compiled_inputs(actual, expected, bound, rounded_terms, allowance, exact, noise_var)
        if arrays is None:
            return False
        a, b, rounded, allow, exact_np, noise, bound_np = arrays
        golden = expected.detach().reshape(-1)     # in its own dtype: a worst element's golden as recorded
        n = a.shape[0]
        width = actual.shape[-1] if actual.dim() > 1 else 1
        block = pieces[0].actual.numel() if len(pieces) > 1 else n
        flags = ((compiled_pass.DUAL if self.dual else 0) | (compiled_pass.DUAL_ONLY if self.dual_only else 0)
                 | (compiled_pass.EXACT if exact is not None else 0) | (compiled_pass.DIRECTION if direction else 0)
                 | (compiled_pass.ALLOWANCE if allowance is not None else 0)
                 | (compiled_pass.ROUNDED if rounded_terms is not None else 0)
                 | (compiled_pass.BOUND if bound is not None else 0) | (compiled_pass.NOISE if noise_var is not None else 0))
        bars = self._floor_bars()
        bar_ratio, bar_abs = (math.inf, 0.0) if bars is None else bars
        sample_step = max(1, math.prod(self.shape) // HIST_SAMPLE)
        params = np.zeros(compiled_pass.N_PARAMS)
        f32 = np.float32
        params[[compiled_pass.P_RTOL, compiled_pass.P_ACCEPTANCE_ATOL, compiled_pass.P_ZERO_PASS, compiled_pass.P_ATOL, compiled_pass.P_SMALL,
                compiled_pass.P_SMALL_ATOL, compiled_pass.P_REL_EPS, compiled_pass.P_SIGN_MIN, compiled_pass.P_SIGN_MAX, compiled_pass.P_BAR_WORST,
                compiled_pass.P_BAR_RATIO, compiled_pass.P_BAR_ABS, compiled_pass.P_FIRST_SAMPLE, compiled_pass.P_SAMPLE_STEP]] = [
            self.tol.rtol, f32(self.tol.atol), f32(self.tol.atol / (1 - self.tol.rtol)),
            # atol unknown: count the excess above the floor (``excess_over`` keeps it for the count)
            f32(self.atol_known if self.atol_known is not None else self.excess_floor), f32(SMALL_VALUE),
            f32(SMALL_VALUE_ATOL), f32(REL_EPS), SIGN_MIN_ULP, SIGN_MAX_ULP,
            self.worst[-1]["excess"] if len(self.worst) == WORST_K else -math.inf, bar_ratio, bar_abs,
            (-row_offset * width) % sample_step, sample_step]
        n_blocks = len(pieces)
        acc = np.zeros((n_blocks, compiled_pass.N_SLOTS))
        ulp_hist = np.zeros((n_blocks, len(ULP_EDGES) - 1), dtype=np.int64)
        log_hist = np.zeros((n_blocks, len(LOG10_EDGES) - 1), dtype=np.int64)

        def table(k):
            return np.zeros((n_blocks, k)), np.zeros((n_blocks, k), dtype=np.int64), np.zeros(n_blocks, dtype=np.int64)
        worst, ratio, absb = table(WORST_K), table(FLOOR_K), table(FLOOR_K)
        compiled_pass.set_threads(compiled_pass_threads())
        compiled_pass.compare_slices(a, b, rounded, allow, exact_np, noise, bound_np, block, flags, params,
                             _ULP_EDGES_NP, _LOG10_EDGES_NP, acc, ulp_hist, log_hist, *worst, *ratio, *absb)
        for k, piece in enumerate(pieces):
            s = acc[k]
            if s[compiled_pass.N_NONFINITE]:
                self._update_slice(*piece)
                continue
            lo, count = k * block, int(s[compiled_pass.N_FINITE])
            offset = piece.row_offset

            def at(slot: int) -> list[int]:
                return _index(int(s[slot]) - lo, offset, width)
            self.n += count
            self.n_compared += count
            self.n_golden_finite += count
            self.max_golden = max(self.max_golden, float(s[compiled_pass.MAX_GOLDEN]))
            if self.dual:
                self.n_golden_visible += int(s[compiled_pass.N_VISIBLE])
            self.sq_b += float(s[compiled_pass.SQ_B])
            self.n_zero_passes += int(s[compiled_pass.N_ZERO_PASSES])
            n_pos, n_neg = int(s[compiled_pass.N_POS]), int(s[compiled_pass.N_NEG])
            self.n_pos += n_pos
            self.n_neg += n_neg
            if self.dual:
                n_small = int(s[compiled_pass.N_SMALL])
                self.n_small += n_small
                self.n_small_err += int(s[compiled_pass.N_SMALL_ERR])
                self.n_normal += count - n_small
                self.n_ulp_over_1 += int(s[compiled_pass.N_ULP_OVER_1])
                self.sum_sq_err_normal += float(s[compiled_pass.SUM_SQ_ERR_NORMAL])
                self.sum_rel_normal += float(s[compiled_pass.SUM_REL_NORMAL])
                self.max_rel_normal = max(self.max_rel_normal, float(s[compiled_pass.MAX_REL_NORMAL]))
            if self.dual_only:
                continue
            self.n_over_seed += int(s[compiled_pass.N_OVER_SEED])
            if allowance is not None:
                self.allowance_seen = True
                self.max_noise_ratio = max(self.max_noise_ratio, float(s[compiled_pass.MAX_NOISE_RATIO]))
            fields = lambda index: compiled_pass.fields_at(index, a, b, rounded, allow, flags, self.tol.rtol)
            if exact is not None:
                picks = np.unique(np.concatenate([ratio[1][k, :ratio[2][k]], absb[1][k, :absb[2][k]]]))
                if picks.size:
                    self._keep_floor_pairs(torch.from_numpy(fields(picks)[:, 4:6]).float())
                self.aggregate_seen = True
                self.sum_eb += float(s[compiled_pass.SUM_EB])
                self.sum_bb += float(s[compiled_pass.SUM_BB])
                self.sum_vbb += float(s[compiled_pass.SUM_STORE]) / 12
                if noise_var is not None:
                    self.sum_vbb += float(s[compiled_pass.SUM_NOISE])
                if not direction:
                    self.direction_seen = False
                else:
                    counted, toward = int(s[compiled_pass.N_COUNTED]), int(s[compiled_pass.N_TOWARD])
                    self.n_toward += toward
                    self.n_up += int(s[compiled_pass.N_UP])
                    self.n_away += counted - toward
                if piece.shared_var is not None:
                    self._shared(piece.exact, piece.shared_var, piece.shared_axis)
                self.sum_vbb += piece.shared_total
            for slot, at_slot, name in ((compiled_pass.MAX_ABS, compiled_pass.MAX_ABS_AT, "max_abs"),
                                        (compiled_pass.MAX_REL, compiled_pass.MAX_REL_AT, "max_rel"),
                                        (compiled_pass.MAX_ULP, compiled_pass.MAX_ULP_AT, "max_ulp")):
                if float(s[slot]) > getattr(self, name)[0]:
                    setattr(self, name, (float(s[slot]), at(at_slot)))
            if self.atol_known is not None:
                self.n_mismatch_known += int(s[compiled_pass.N_MISMATCH])
            else:
                self._keep_excess(int(s[compiled_pass.N_MISMATCH]), lambda ceiling: torch.from_numpy(compiled_pass.excess_over(
                    a, b, rounded, allow, flags, self.tol.rtol, lo, lo + piece.actual.numel(),
                    np.float32(self.excess_floor), np.float32(ceiling))))
            index = worst[1][k, :worst[2][k]]
            for i, (abs_err, rel, ulp, excess, _, _) in zip(index.tolist(), fields(index).tolist()):
                self.worst.append({"index": _index(i - lo, offset, width), "actual": float(a[i]),
                                   "expected": float(golden[i]), "abs_err": abs_err, "rel_err": rel, "ulp": ulp,
                                   "excess": excess})
            self.worst = sorted(self.worst, key=lambda w: -w["excess"])[:WORST_K]
            self.sum_err += float(s[compiled_pass.SUM_ERR])
            self.sum_abs_err += float(s[compiled_pass.SUM_ABS_ERR])
            self.n_exact += count - n_pos - n_neg
            self.dot += float(s[compiled_pass.DOT])
            self.sq_a += float(s[compiled_pass.SQ_A])
            self.sq_b_pairs += float(s[compiled_pass.SQ_B_PAIRS])
            self.hist_weight += sample_step * int(s[compiled_pass.N_SAMPLED])
            self.ulp_hist += torch.from_numpy(ulp_hist[k]) * sample_step
            self.log10_hist += torch.from_numpy(log_hist[k]) * sample_step
            if bound is not None:
                self.bound_seen = True
                if float(s[compiled_pass.MAX_UTIL]) > self.max_util[0]:
                    self.max_util = (float(s[compiled_pass.MAX_UTIL]), at(compiled_pass.MAX_UTIL_AT))
                self.n_over_bound += int(s[compiled_pass.N_OVER_BOUND])
                self.sum_bound += float(s[compiled_pass.SUM_BOUND])
        return True

    def _update_slice(self, actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | None,
                      row_offset: int, rounded_terms: torch.Tensor | None, allowance: torch.Tensor | None,
                      exact: torch.Tensor | None, noise_var: torch.Tensor | None,
                      shared_var: torch.Tensor | None, shared_axis: int | None,
                      shared_total: float, direction: bool) -> None:
        if actual.numel() == 0:
            return
        width = actual.shape[-1] if actual.dim() > 1 else 1
        a = actual.reshape(-1).float()
        b64 = expected.reshape(-1).to(a.device)
        b = b64.float()
        self.n += a.numel()
        rtol, seed_atol = self.tol.rtol, self.tol.atol
        err = a - b
        pos = None
        low, high = torch.aminmax(err)            # NaN propagates: one pass decides finiteness
        if not (math.isfinite(float(low)) and math.isfinite(float(high))):
            pos, a, b, b64, b_finite = self._split_nonfinite(a, b, b64, row_offset, width)
            err = a - b
        else:
            b_finite = b
        abs_b_fin = b_finite.abs()
        self._golden_sums(abs_b_fin)
        self.n_zero_passes += int(torch.count_nonzero(abs_b_fin <= seed_atol / (1 - rtol)))
        self.n_compared += a.numel()
        if a.numel() == 0:
            return
        abs_b = abs_b_fin if pos is None else b.abs()

        def select(t: torch.Tensor) -> torch.Tensor:
            t = t.reshape(-1).to(a.device).float()
            return t if pos is None else t[pos]

        def flat(i: int) -> int:
            return i if pos is None else int(pos[i])

        def track(current, values):
            # the running max rarely moves after the first slices: a max (a vectorised pass) decides,
            # the argmax (about 8x slower on a 2^18 slice) runs only when it does
            v = float(values.max())
            if not v > current[0]:
                return current
            return (v, _index(flat(int(torch.argmax(values))), row_offset, width))

        abs_err = err.abs()
        if self.dual_only:
            self._dual(abs_err, abs_b, abs_err / bf16_spacing(b))
            self.n_pos += int(torch.count_nonzero(err > 0))
            self.n_neg += int(torch.count_nonzero(err < 0))
            return
        scale = abs_b if rounded_terms is None else abs_b + select(rounded_terms)
        excess = torch.add(abs_err, scale, alpha=-rtol)
        # the article's own gate: rtol and its atol, no allowance
        self.n_over_seed += int(torch.count_nonzero(excess > seed_atol))
        if allowance is not None:
            allow = select(allowance)
            excess -= allow
            self.allowance_seen = True
        else:
            allow = None
        if allow is not None:
            ratio = (abs_err / allow).nan_to_num_(nan=0.0)
            self.max_noise_ratio = max(self.max_noise_ratio, float(ratio.max()))
        rel = (abs_err / abs_b).nan_to_num_(nan=0.0)      # inf where the golden is 0 and the error is not
        spacing = bf16_spacing(b)
        ulp = abs_err / spacing
        if exact is not None:      # the gated comparison: the only one whose record states a detection floor
            self._floor_candidates(abs_b, scale, allow)
        if self.dual:
            self._dual(abs_err, abs_b, ulp)
        if exact is not None:
            def select64(t: torch.Tensor) -> torch.Tensor:
                t = t.reshape(-1).to(a.device).double()
                return t if pos is None else t[pos]
            self._aggregate(a, select64(exact), None if noise_var is None else select64(noise_var), direction)
            if shared_var is not None:
                self._shared(exact, shared_var, shared_axis)
            self.sum_vbb += shared_total

        self.max_abs = track(self.max_abs, abs_err)
        self.max_rel = track(self.max_rel, rel)
        self.max_ulp = track(self.max_ulp, ulp)
        if self.atol_known is not None:
            self.n_mismatch_known += int(torch.count_nonzero(excess > self.atol_known))
        else:
            over = excess > self.excess_floor     # an FP32 value: the same test as the compiled pass
            self._keep_excess(int(torch.count_nonzero(over)),
                              lambda ceiling: excess[over & (excess <= ceiling)].cpu())

        bar = self.worst[-1]["excess"] if len(self.worst) == WORST_K else None
        top = _best_indices(excess, WORST_K, largest=True, bar=bar)
        for i in top.tolist():
            self.worst.append({"index": _index(flat(i), row_offset, width), "actual": float(a[i]),
                               "expected": float(b64[i]), "abs_err": float(abs_err[i]), "rel_err": float(rel[i]),
                               "ulp": float(ulp[i]), "excess": float(excess[i])})
        self.worst = sorted(self.worst, key=lambda w: -w["excess"])[:WORST_K]

        self.sum_err += float(err.sum(dtype=torch.float64))
        self.sum_abs_err += float(abs_err.sum(dtype=torch.float64))
        n_pos, n_neg = int(torch.count_nonzero(err > 0)), int(torch.count_nonzero(err < 0))
        self.n_pos += n_pos
        self.n_neg += n_neg
        self.n_exact += a.numel() - n_pos - n_neg
        a64, b64_finite = a.double(), b.double()  # FP64 squares: no underflow among the subnormals
        self.dot += float(torch.dot(a64, b64_finite))
        self.sq_a += float(torch.dot(a64, a64))
        self.sq_b_pairs += float(torch.dot(b64_finite, b64_finite))

        # every step-th element of the whole output (global flat index), whatever the slicing
        step = max(1, math.prod(self.shape) // HIST_SAMPLE)
        first = (-row_offset * width) % step if pos is None else 0
        sample_ulp, sample_err = ulp[first::step].double(), abs_err[first::step].double()
        self.hist_weight += step * sample_ulp.numel()
        self.ulp_hist += _histogram(sample_ulp, ULP_EDGES).cpu() * step
        log_hist = _histogram(torch.log10(sample_err.clamp(min=1e-300)), LOG10_EDGES).cpu()
        log_hist[0] -= int(torch.count_nonzero(sample_err == 0))   # zeros went to the first bin through the clamp
        self.log10_hist += log_hist * step

        if bound is not None:
            self.bound_seen = True
            bd = select(bound)
            util = (abs_err / bd).nan_to_num_(nan=0.0)
            self.max_util = track(self.max_util, util)
            self.n_over_bound += int(torch.count_nonzero(util > 1))
            self.sum_bound += float(bd.sum(dtype=torch.float64))

    def _floor_candidates(self, abs_b: torch.Tensor, scale: torch.Tensor, allow: torch.Tensor | None) -> None:
        """The elements where a uniform relative error shows first: the FLOOR_K smallest
        (rtol scale + allowance) / |golden| and the FLOOR_K largest |golden| over the whole output
        (atol, known only after the last chunk, matters least there), kept as a running global
        selection so that the floor does not depend on how the rows were chunked. Zero goldens
        are never candidates (no relative error shows there)."""
        margin = scale * self.tol.rtol if allow is None else torch.add(allow, scale, alpha=self.tol.rtol)
        ratio = margin / abs_b                    # inf or NaN at a zero golden
        ratio_bar, abs_bar = self._floor_bars() or (None, None)
        picks = torch.cat([_best_indices(ratio, FLOOR_K, largest=False, bar=ratio_bar),
                           _best_indices(abs_b, FLOOR_K, largest=True, bar=abs_bar)]).unique()
        self._keep_floor_pairs(torch.stack([abs_b[picks], margin[picks]], 1).cpu())

    def _floor_bars(self) -> tuple[float, float] | None:
        """The kept candidates' FLOOR_K-th smallest margin / |golden| and FLOOR_K-th largest
        |golden|: a new element competes only beyond them. None until FLOOR_K are kept."""
        kept = self.floor_candidates
        if kept is None or kept.shape[0] < FLOOR_K:
            return None
        return (float((kept[:, 1] / kept[:, 0]).kthvalue(FLOOR_K).values),
                float(kept[:, 0].kthvalue(kept.shape[0] - FLOOR_K + 1).values))

    def _keep_floor_pairs(self, pairs: torch.Tensor) -> None:
        """Merge new [|golden|, margin] candidate rows into the kept selection."""
        kept = self.floor_candidates
        pairs = pairs[pairs[:, 0] > 0]
        if kept is not None:
            pairs = torch.cat([kept, pairs])
        if pairs.shape[0] == 0:
            return
        k = min(FLOOR_K, pairs.shape[0])
        best = torch.cat([torch.topk(pairs[:, 1] / pairs[:, 0], k, largest=False).indices,
                          torch.topk(pairs[:, 0], k).indices]).unique()
        self.floor_candidates = pairs[best]

    def _dual(self, abs_err: torch.Tensor, abs_b: torch.Tensor, ulp: torch.Tensor) -> None:
        """msprobe's benchmark-standard sums over finite pairs (``accuracy.dual``): small values
        |golden| <= 2^-10 and their errors over 1e-16; over the other elements the squared error
        and the relative error |e| / (|golden| + 2^-8); elements beyond 1 BF16 ULP."""
        small = abs_b <= SMALL_VALUE
        n_small = int(torch.count_nonzero(small))
        self.n_small += n_small
        self.n_small_err += int(torch.count_nonzero(small & (abs_err > SMALL_VALUE_ATOL)))
        self.n_normal += abs_err.numel() - n_small
        self.n_ulp_over_1 += int(torch.count_nonzero(ulp > 1))
        normal_err = abs_err.masked_fill(small, 0.0)
        e64 = normal_err.double()
        self.sum_sq_err_normal += float(torch.dot(e64, e64))
        rel = normal_err.div_(abs_b + REL_EPS)
        self.sum_rel_normal += float(rel.sum(dtype=torch.float64))
        self.max_rel_normal = max(self.max_rel_normal, float(rel.max()))

    def _dual_result(self) -> dict:
        nonfinite = (self.nonfinite["nan_actual_only"] + self.nonfinite["nan_expected_only"]
                     + self.nonfinite["inf_mismatch"])
        return ordered(DUAL, {
            "small_value": SMALL_VALUE, "small_value_atol": SMALL_VALUE_ATOL,
            "small_values": self.n_small, "normal_values": self.n_normal,
            "small_value_error_ratio": self.n_small_err / self.n_small if self.n_small else 0.0,
            "rmse": math.sqrt(self.sum_sq_err_normal / self.n_normal) if self.n_normal else 0.0,
            "max_rel_err": self.max_rel_normal,
            "mean_rel_err": self.sum_rel_normal / self.n_normal if self.n_normal else 0.0,
            "error_balance": abs(self.n_pos - self.n_neg) / self.n if self.n else 0.0,
            "ulp_over_1_share": self.n_ulp_over_1 / self.n if self.n else 0.0,
            "nonfinite_disagreements": nonfinite,
            # an all-zero output would pass every ratio: every finite |golden| <= the small-value atol
            "zero_passes": self.n_golden_visible == 0,
        })

    def _shared(self, exact: torch.Tensor, shared_var: torch.Tensor, axis: int) -> None:
        """The correlated part of the fitted scale's variance: sum_j V_j |r_j|^2 over the rows
        (axis 0) or columns (axis 1) j of the FP64 values r."""
        r = exact.double().reshape(-1, exact.shape[-1]).nan_to_num(0.0, 0.0, 0.0)
        norms = (r * r).sum(1 - axis)
        self.sum_vbb += float(torch.dot(shared_var.double().reshape(-1).to(norms.device), norms))

    def _aggregate(self, a: torch.Tensor, exact: torch.Tensor, noise_var: torch.Tensor | None,
                   direction: bool = True) -> None:
        """Sums of the fitted scale beta = sum e r / sum r^2 (e = kernel - FP64, r = FP64) and its
        model variance sum var r^2 / (sum r^2)^2 (var = the kernel's own store, ULP^2/12, plus
        ``noise_var``); counts of errors toward zero and away from it, of at least 1/4 ULP."""
        self.aggregate_seen = True
        e = a.double() - exact
        spacing = bf16_spacing(exact)
        self.sum_eb += float(torch.dot(e, exact))
        self.sum_bb += float(torch.dot(exact, exact))
        store = spacing * exact                       # the store's variance ULP^2/12, times r^2
        self.sum_vbb += float(torch.dot(store, store)) / 12
        if noise_var is not None:
            self.sum_vbb += float(torch.dot(noise_var, exact * exact))
        if not direction:
            self.direction_seen = False
            return
        counts = direction_counts(e, exact, spacing)
        self.n_up += counts.up
        self.n_toward += counts.toward
        self.n_away += counts.counted - counts.toward

    def _split_nonfinite(self, a, b, b64, row_offset: int, width: int):
        """The rare path: count NaN/Inf (dis)agreements, note the first disagreeing element, keep
        the finite pairs."""
        nf = self.nonfinite
        a_nan, b_nan = torch.isnan(a), torch.isnan(b)
        a_inf, b_inf = torch.isinf(a), torch.isinf(b)
        nf["nan_both"] += int((a_nan & b_nan).sum())
        nf["nan_actual_only"] += int((a_nan & ~b_nan).sum())
        nf["nan_expected_only"] += int((b_nan & ~a_nan).sum())
        inf_any = (a_inf | b_inf) & ~a_nan & ~b_nan
        inf_match = inf_any & (a == b)
        nf["inf_match"] += int(inf_match.sum())
        nf["inf_mismatch"] += int((inf_any & ~inf_match).sum())
        if self.first_nonfinite is None:
            bad = (a_nan ^ b_nan) | (inf_any & ~inf_match)
            if bool(bad.any()):
                i = int(torch.nonzero(bad)[0, 0])
                self.first_nonfinite = {"index": _index(i, row_offset, width), "actual": float(a[i]),
                                        "expected": float(b64[i])}
        pos = torch.nonzero(torch.isfinite(a) & torch.isfinite(b)).squeeze(1)
        return pos, a[pos], b[pos], b64[pos], b[torch.isfinite(b)]

    def _golden_sums(self, abs_b: torch.Tensor) -> None:
        """Sum of squares of the finite golden, in FP64 so that subnormal values do not underflow."""
        self.n_golden_finite += abs_b.numel()
        if abs_b.numel() == 0:
            return
        self.max_golden = max(self.max_golden, float(abs_b.max()))
        if self.dual:
            self.n_golden_visible += int(torch.count_nonzero(abs_b > SMALL_VALUE_ATOL))
        b64 = abs_b.double()
        self.sq_b += float(torch.dot(b64, b64))

    def finalize(self) -> dict:
        tol = self.tol
        rms = math.sqrt(self.sq_b / self.n_golden_finite) if self.n_golden_finite else 0.0
        nonfinite_bad = (self.nonfinite["nan_actual_only"] + self.nonfinite["nan_expected_only"]
                         + self.nonfinite["inf_mismatch"])
        if self.dual_only:      # what was computed, and nothing that would read as a count of zero
            return ordered(METRICS, {
                "shape": self.shape, "numel": self.n, "dual_only": True, "golden_rms": rms,
                "golden_max_abs": self.max_golden, "nonfinite": dict(self.nonfinite),
                "nonfinite_disagreements": nonfinite_bad, "dual": self._dual_result()}, DUAL_ONLY)
        if self.atol_known is not None:
            atol_eff, overflow = self.atol_known, 0
            mismatches = self.n_mismatch_known + nonfinite_bad
        else:
            atol_eff = self._settled_atol()
            over, overflow = self._excess_counts(atol_eff)
            mismatches = over + nonfinite_bad
        norm = math.sqrt(self.sq_a * self.sq_b_pairs)
        signed = self.n_pos + self.n_neg
        floor = None
        if self.floor_candidates is not None:
            cand = self.floor_candidates
            floor = float(((cand[:, 1].double() + atol_eff) / cand[:, 0].double()).min())
        return ordered(METRICS, {
            "shape": self.shape, "numel": self.n, "compared": self.n_compared,
            "rtol": tol.rtol, "atol": tol.atol, "atol_effective": atol_eff,
            "atol_capped": atol_eff < tol.atol,
            "golden_rms": rms, "golden_max_abs": self.max_golden,
            "atol_rms": self.scale_rms if self.scale_rms is not None else rms,
            "max_abs_err": max(self.max_abs[0], 0.0), "max_abs_index": self.max_abs[1],
            "max_rel_err": max(self.max_rel[0], 0.0), "max_rel_index": self.max_rel[1],
            "max_excess": self.worst[0]["excess"] if self.worst else None,   # worst is sorted by excess
            "max_excess_index": self.worst[0]["index"] if self.worst else None,
            "mismatches": mismatches,
            "mismatches_exact": overflow == 0,
            "mismatches_upper": mismatches + overflow,
            "mismatch_fraction": mismatches / self.n if self.n else 0.0,
            "mismatches_seed_gate": self.n_over_seed + nonfinite_bad,
            "nonfinite": dict(self.nonfinite), "nonfinite_disagreements": nonfinite_bad,
            "first_nonfinite": self.first_nonfinite,
            "worst": self.worst,
            "ulp_p50": _percentile(self.ulp_hist, ULP_EDGES, 0.5),
            "ulp_p99": _percentile(self.ulp_hist, ULP_EDGES, 0.99),
            "ulp_max": self.max_ulp[0] if self.max_ulp[1] is not None else None,
            "ulp_max_index": self.max_ulp[1],
            "ulp_hist": self.ulp_hist.tolist(),
            "log10_abs_err_hist": self.log10_hist.tolist(), "exact_elements": self.n_exact,
            "sign_bias": (self.n_pos - self.n_neg) / signed if signed else 0.0,
            "mean_err_over_mean_abs_err": self.sum_err / self.sum_abs_err if self.sum_abs_err else 0.0,
            "cosine": self.dot / norm if norm > 0 else (1.0 if self.sq_a == self.sq_b_pairs == 0 else 0.0),
            "rms_ratio": (math.sqrt(self.sq_a / self.sq_b_pairs) if self.sq_b_pairs > 0
                          else (1.0 if self.sq_a == 0 else math.inf)),
            "small_value_share": self.n_zero_passes / self.n if self.n else 0.0,
            "zero_passes_seed_gate": self.n > 0 and self.n_zero_passes == self.n,
            "allowance_max_ratio": self.max_noise_ratio if self.allowance_seen else None,
            "bound_max_utilisation": self.max_util[0] if self.bound_seen and self.max_util[1] is not None else None,
            "bound_max_utilisation_index": self.max_util[1] if self.bound_seen else None,
            "bound_exceeded": self.n_over_bound if self.bound_seen else None,
            "bound_mean": self.sum_bound / self.n_compared if self.bound_seen and self.n_compared else None,
            "allowance": self.allowance_seen,
            "detection_floor": floor,
            "aggregate": self._aggregate_result(atol_eff) if self.aggregate_seen else None,
            "dual": self._dual_result() if self.dual else None,
        })

    def _aggregate_result(self, atol: float = 0.0) -> dict:
        beta = self.sum_eb / self.sum_bb if self.sum_bb > 0 else 0.0
        sigma = math.sqrt(self.sum_vbb) / self.sum_bb if self.sum_bb > 0 else 0.0
        counted = self.n_toward + self.n_away
        bias = SCALE_BIAS if self.scale_bias is None else self.scale_bias
        result = {"scale_beta": beta, "scale_sigma": sigma, "scale_allowed": TAIL_SIGMAS * sigma + bias,
                  "scale_bias": bias,
                  "toward_zero": None, "away_from_zero": None, "direction_imbalance": None, "direction_allowed": None,
                  "upward": None, "downward": None, "up_imbalance": None}
        if self.direction_seen:
            # the same allowance serves both directions: a correct kernel's rounding is at most 75%
            # one-sided toward zero (DIRECTION_BIAS), whatever the values' signs, and so at most 75%
            # one-sided up or down; a store rounding toward +inf or -inf is 100% one-sided up or
            # down and about even toward and away from zero on values of both signs
            result.update(toward_zero=self.n_toward, away_from_zero=self.n_away,
                          direction_imbalance=self.n_toward - self.n_away if self.toward_zero_seen else None,
                          direction_allowed=direction_allowed(counted),
                          upward=self.n_up, downward=counted - self.n_up, up_imbalance=2 * self.n_up - counted)
        result["localized"] = (self.local.result(bias, atol, self.local_bias) if self.local is not None
                               else None)
        return ordered(AGGREGATE, result)


def histogram_edges() -> dict:
    return {"ulp": ULP_EDGES.tolist(), "log10_abs_err": LOG10_EDGES.tolist()}
