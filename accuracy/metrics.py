"""Error metrics of one output against one golden, accumulated chunk by chunk.

``ErrorStats.update`` takes rows of the kernel's output, the golden's and
(optionally) the rounding-model bound; ``finalize`` returns a JSON-ready dict.
Nothing here raises on bad values: NaN, Inf, zeros and empty chunks are data.
Only ``accuracy.gate`` turns these numbers into a verdict.
"""
from __future__ import annotations

import math

import torch

from accuracy.tolerances import Tolerance
from accuracy.ulp import bf16_spacing

WORST_K = 8
FLOOR_K = 64
# Positive "excess" values (|err| - rtol|golden|) kept to count mismatches exactly at an atol
# known only after the last chunk; 4M float32 = 16 MiB. Beyond it the count becomes a range.
EXCESS_CAP = 1 << 22
HIST_SAMPLE = 1 << 20
# ULP histogram: 1/8-ULP bins up to 16 ULP, then 8 bins per octave up to 2^16 ULP.
ULP_EDGES = torch.cat([torch.arange(0, 16, 0.125, dtype=torch.float64),
                       torch.exp2(torch.arange(4, 16.001, 0.125, dtype=torch.float64)),
                       torch.tensor([math.inf], dtype=torch.float64)])
LOG10_EDGES = torch.arange(-45.0, 5.001, 0.25, dtype=torch.float64)


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


def _index(flat: int, row_offset: int, width: int) -> list[int]:
    return [row_offset + flat // width, flat % width]


class ErrorStats:
    """Streaming comparison of kernel output ``actual`` with golden ``expected``."""

    def __init__(self, tol: Tolerance, shape: tuple[int, int]):
        self.tol = tol
        self.shape = list(shape)
        self.n = 0
        self.n_compared = 0         # both finite
        self.nonfinite = {"nan_both": 0, "nan_actual_only": 0, "nan_expected_only": 0,
                          "inf_match": 0, "inf_mismatch": 0}
        self.first_nonfinite: dict | None = None   # first element whose NaN/Inf the other side lacks
        self.max_abs = (-1.0, None)
        self.max_rel = (-1.0, None)
        self.max_excess = (-math.inf, None)
        self.max_ulp = (-1.0, None)
        self.worst: list[dict] = []
        self.excess_kept: list[torch.Tensor] = []
        self.n_excess_positive = 0
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
        self.sum_eb = self.sum_bb = self.sum_vbb = 0.0
        self.n_toward = self.n_away = 0

    def update(self, actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | None = None,
               row_offset: int = 0, rounded_terms: torch.Tensor | None = None,
               allowance: torch.Tensor | None = None,
               exact: torch.Tensor | None = None, noise_var: torch.Tensor | None = None,
               shared_var: torch.Tensor | None = None, shared_axis: int | None = None,
               shared_total: float = 0.0, direction: bool = True) -> None:
        """``rounded_terms``: per element, the magnitude of intermediate values the dtype path
        stores in BF16 before the final rounding (dx's two products); rtol applies to
        |golden| + rounded_terms, since each rounding point can flip once and a flip at a
        product moves the result by the product's ULP.
        ``allowance``: per element, what the operator's legitimate choices may add
        (``accuracy.allowance``), added to the tolerance.
        ``exact``, ``noise_var``, ``shared_var``/``shared_axis`` and ``direction``: the FP64
        values and the variance model of a correct kernel's error beyond its own store
        (``accuracy.allowance.Allowance``); with them the aggregate tests' sums are kept
        (fitted scale; rounding direction where ``direction``), in float64.

        Element-wise work runs in FP32 (the kernel's BF16 values are exact there; an FP64
        golden rounded to FP32 moves by 2^-24 relative, 2^16 times below a BF16 ULP), about
        35 passes over the chunk; sums of squares are scaled so subnormal outputs do not
        underflow. The two histograms come from a systematic sample of at most 2^20
        elements per update; every max, count and the worst elements are exact."""
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
        if not bool(torch.isfinite(err).all()):
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
            i = int(torch.argmax(values))
            v = float(values[i])
            return (v, _index(flat(i), row_offset, width)) if v > current[0] else current

        abs_err = err.abs()
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
        self._floor_candidates(abs_b, scale, allow)
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
        self.max_excess = track(self.max_excess, excess)
        self.max_ulp = track(self.max_ulp, ulp)
        over = excess > 0
        n_over = int(torch.count_nonzero(over))
        self.n_excess_positive += n_over
        kept = sum(t.numel() for t in self.excess_kept)
        if n_over and kept < EXCESS_CAP:
            self.excess_kept.append(excess[over][: EXCESS_CAP - kept].cpu())

        top = torch.topk(excess, min(WORST_K, excess.numel()))
        for v, i in zip(top.values.tolist(), top.indices.tolist()):
            self.worst.append({"index": _index(flat(i), row_offset, width), "actual": float(a[i]),
                               "expected": float(b64[i]), "abs_err": float(abs_err[i]), "rel_err": float(rel[i]),
                               "ulp": float(ulp[i]), "excess": v})
        self.worst = sorted(self.worst, key=lambda w: -w["excess"])[:WORST_K]

        self.sum_err += float(err.sum(dtype=torch.float64))
        self.sum_abs_err += float(abs_err.sum(dtype=torch.float64))
        sign = torch.sign(err)
        signed = int(torch.count_nonzero(sign))
        balance = int(sign.sum(dtype=torch.float64))
        self.n_pos += (signed + balance) // 2
        self.n_neg += (signed - balance) // 2
        self.n_exact += a.numel() - signed
        peak = float(torch.maximum(a.abs().max(), abs_b.max()))
        if peak > 0 and math.isfinite(peak):
            sa, sb = a / peak, b / peak
            self.dot += float(torch.dot(sa, sb)) * peak * peak
            self.sq_a += float(torch.dot(sa, sa)) * peak * peak
            self.sq_b_pairs += float(torch.dot(sb, sb)) * peak * peak

        step = max(1, a.numel() // HIST_SAMPLE)
        sample_ulp, sample_err = ulp[::step].double(), abs_err[::step].double()
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
        selection so that the floor does not depend on how the rows were chunked."""
        margin = self.tol.rtol * scale if allow is None else self.tol.rtol * scale + allow
        nonzero = abs_b > 0
        if not bool(nonzero.any()):
            return
        pairs = torch.stack([abs_b[nonzero].double(), margin[nonzero].double()], 1).cpu()
        if self.floor_candidates is not None:
            pairs = torch.cat([self.floor_candidates, pairs])
        k = min(FLOOR_K, pairs.shape[0])
        picks = torch.cat([torch.topk(pairs[:, 1] / pairs[:, 0], k, largest=False).indices,
                           torch.topk(pairs[:, 0], k).indices]).unique()
        self.floor_candidates = pairs[picks]

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
        from accuracy.allowance import SIGN_MAX_ULP, SIGN_MIN_ULP
        self.aggregate_seen = True
        e = a.double() - exact
        spacing = bf16_spacing(exact)
        var = spacing * spacing / 12
        if noise_var is not None:
            var = var + noise_var
        r2 = exact * exact
        self.sum_eb += float(torch.dot(e, exact))
        self.sum_bb += float(r2.sum())
        self.sum_vbb += float(torch.dot(var, r2))
        if not direction:
            self.direction_seen = False
            return
        size = e.abs()
        counted = (size >= SIGN_MIN_ULP * spacing) & (size <= SIGN_MAX_ULP * spacing)
        toward = counted & (torch.sign(e) == -torch.sign(exact))
        n_toward = int(torch.count_nonzero(toward))
        self.n_toward += n_toward
        self.n_away += int(torch.count_nonzero(counted)) - n_toward

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
        """Sum of squares of the finite golden, scaled so that subnormal values do not underflow."""
        self.n_golden_finite += abs_b.numel()
        if abs_b.numel() == 0:
            return
        peak = float(abs_b.max())
        self.max_golden = max(self.max_golden, peak)
        if peak > 0:
            scaled = abs_b / peak
            self.sq_b += float(torch.dot(scaled, scaled)) * peak * peak

    def finalize(self) -> dict:
        tol = self.tol
        rms = math.sqrt(self.sq_b / self.n_golden_finite) if self.n_golden_finite else 0.0
        atol_eff = tol.effective_atol(rms)
        kept = torch.cat(self.excess_kept) if self.excess_kept else torch.zeros(0)
        overflow = self.n_excess_positive - kept.numel()
        nonfinite_bad = (self.nonfinite["nan_actual_only"] + self.nonfinite["nan_expected_only"]
                         + self.nonfinite["inf_mismatch"])
        mismatches = int((kept > atol_eff).sum()) + nonfinite_bad
        norm = math.sqrt(self.sq_a * self.sq_b_pairs)
        signed = self.n_pos + self.n_neg
        floor = None
        if self.floor_candidates is not None:
            cand = self.floor_candidates
            floor = float(((cand[:, 1] + atol_eff) / cand[:, 0]).min())
        return {
            "shape": self.shape, "numel": self.n, "compared": self.n_compared,
            "rtol": tol.rtol, "atol": tol.atol, "atol_effective": atol_eff,
            "atol_capped": atol_eff < tol.atol,
            "golden_rms": rms, "golden_max_abs": self.max_golden,
            "max_abs_err": max(self.max_abs[0], 0.0), "max_abs_index": self.max_abs[1],
            "max_rel_err": max(self.max_rel[0], 0.0), "max_rel_index": self.max_rel[1],
            "max_excess": self.max_excess[0] if self.max_excess[1] is not None else None,
            "max_excess_index": self.max_excess[1],
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
            "small_value_share": self.n_zero_passes / self.n if self.n else 0.0,
            "zero_passes_seed_gate": self.n > 0 and self.n_zero_passes == self.n,
            "allowance_max_ratio": self.max_noise_ratio if self.allowance_seen else None,
            "bound_max_utilisation": self.max_util[0] if self.bound_seen and self.max_util[1] is not None else None,
            "bound_max_utilisation_index": self.max_util[1] if self.bound_seen else None,
            "bound_exceeded": self.n_over_bound if self.bound_seen else None,
            "bound_mean": self.sum_bound / self.n_compared if self.bound_seen and self.n_compared else None,
            "allowance": self.allowance_seen,
            "detection_floor": floor,
            "aggregate": self._aggregate_result() if self.aggregate_seen else None,
        }

    def _aggregate_result(self) -> dict:
        from accuracy.allowance import DIRECTION_BIAS, SCALE_BIAS, TAIL_SIGMAS
        beta = self.sum_eb / self.sum_bb if self.sum_bb > 0 else 0.0
        sigma = math.sqrt(self.sum_vbb) / self.sum_bb if self.sum_bb > 0 else 0.0
        counted = self.n_toward + self.n_away
        result = {"scale_beta": beta, "scale_sigma": sigma, "scale_allowed": TAIL_SIGMAS * sigma + SCALE_BIAS,
                  "toward_zero": None, "away_from_zero": None, "direction_imbalance": None, "direction_allowed": None}
        if self.direction_seen:
            result.update(toward_zero=self.n_toward, away_from_zero=self.n_away,
                          direction_imbalance=self.n_toward - self.n_away,
                          direction_allowed=2 * DIRECTION_BIAS * counted + TAIL_SIGMAS * math.sqrt(counted))
        return result


def histogram_edges() -> dict:
    return {"ulp": ULP_EDGES.tolist(), "log10_abs_err": LOG10_EDGES.tolist()}
