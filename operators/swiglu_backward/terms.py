"""Sums over the terms of every reduction of the operator, for the gate's allowance model.

db_g[n] = sum_m dg[m, n],  dw_g[k, n] = sum_m x[m, k] dg[m, n],
dx[m, k] = sum_n dg[m, n] w_g[k, n] + dfc[m, n] w_fc[k, n]   (likewise for fc).

The allowance of an output element (``accuracy.allowance``) needs, per element:

* ``abs``: sum |terms|           (the worst case: every rounding the same way)
* ``var``: sum of the variances of each term's legitimate BF16 roundings, exact per term
  (``rounding_variance``): the store of dg / dfc and the intermediate a kernel may store before
  it (dy*fc, silu(g)), each uniform in +-half the BF16 spacing of the value rounded
  (spacing^2 / 12), times the other operand's square (x^2 for dw, w^2 for dx). The spacing of
  a value in [2^e, 2^(e+1)) is 2^(e-7): on random mantissas its square averages 0.54 of the
  worst case (2^-8 |t|)^2 the model used before, which is where the allowance's power comes from.
  Among the subnormals the spacing is 2^-133, so a term there still counts.
* ``shared``: for the fitted scale's variance when one rounded dg feeds many elements. A dx
  row shares its dg row: the fitted scale's numerator moves by sum_mn d_mn dg_mn (r w_g)_mn
  for roundings d of dg and the FP64 dx rows r, so ``RowTerms.shared`` is
  sum_mn var(dg)_mn (r w_g)^2 + (fc likewise), exact under the model. A dw column shares
  x's rows, and dw's r is known only after the pass: per column, the Cauchy-Schwarz bound
  sum_m var(dg)_m |x[m, :]|^2 (exact for an outer product, M = 1);
* ``prefix``: max over the canonical 1024-row blocks of |running sum| (db/dw only), and
  ``block``: max over blocks of the block's sum |terms|: the partial sums an FP32
  summation in another order passes through are bounded by prefix + 8 x block (an order
  that permutes rows within tiles of up to 8192 rows); ``segment``: max over blocks of
  |the block's sum| (a tile's partial is at most tile / 1024 of them).

The terms are the reference's (FP64 dg/dfc from the BF16 inputs), so the sums depend on
the case alone, never on a backend or on the chunking: they are accumulated per canonical
block (``goldens.stream.REDUCTION_BLOCK``) in row order. The matmuls run in FP32 on
operands scaled by powers of two chosen from the inputs' maxima, so the tiny profile's
terms (dy ~ 2^-124) do not underflow; the scale is undone in float64.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from accuracy.allowance import SCALE_BIAS
from accuracy.term_sums import ReductionTermSums, accumulate, dot64, stored_sum_error
from goldens.blocks import REDUCTION_BLOCK, blocks, row_product
from accuracy.ulp import bf16_spacing
from goldens.rounding import round_to
from operators.swiglu_backward import math as swiglu
from operators.swiglu_backward.schedule import BF16_FAITHFUL

MIN_NORMAL = 2.0 ** -126
# The value a kernel rounds at the store of dg / dfc is its FP32 value, within one intermediate
# rounding (2^-8 relative) and FP32 math of the exact one: its binade is at most that of
# |exact| (1 + 2^-7), so the spacing is taken there (one binade up only for values within
# 2^-7 below a power of two). The intermediates get the same margin: dy*fc is exact in FP32,
# silu(g) within FP32 math of the exact value, so for them it only errs on the safe side.
STORE_BINADE_MARGIN = 1 + 2.0 ** -7


def _pow2_scale(peak: float) -> float:
    """2^-e with 2^(e-1) < peak <= 2^e: the scaled values lie in (-1, 1]."""
    if not math.isfinite(peak) or peak <= 0:
        return 1.0
    return 2.0 ** -math.ceil(math.log2(peak))


@dataclass
class RowTerms:
    """dx's term sums for a block of rows, float64 [rows, K]."""
    abs: torch.Tensor
    var: torch.Tensor
    products: torch.Tensor      # half the BF16 spacings of dg w_g^T and dfc w_fc^T, summed: the
                                # worst case of the two partial products a kernel may store
    products_var: torch.Tensor  # their variance as two independent uniform roundings: (h_g^2 + h_fc^2) / 3
    shared: float               # sum_mn var(dg)_mn (r w_g)_mn^2 + (fc likewise): see above
    shared_rows: torch.Tensor | None = None   # the same per row [rows] (its sum is ``shared``)


class TermSums(ReductionTermSums):
    """Accumulates the term sums of db_g, db_fc, dw_g, dw_fc block by block; ``rows`` gives dx's."""

    def __init__(self, inputs: Mapping[str, torch.Tensor]):
        super().__init__()
        peak = {n: float(inputs[n].abs().max()) if inputs[n].numel() else 0.0 for n in inputs}
        self.s_x = _pow2_scale(peak["x"])
        # |dg| <= |dy| |fc| (1 + |g| max(s(1-s))) <= 1.25 |dy| |fc|;  |dfc| <= |dy| |g|
        self.s_dg = _pow2_scale(1.25 * peak["dy"] * peak["fc"])
        self.s_dfc = _pow2_scale(peak["dy"] * peak["g"])
        self.s_wg = _pow2_scale(peak["w_g"])
        self.s_wfc = _pow2_scale(peak["w_fc"])
        w_g = inputs["w_g"].float() * self.s_wg
        w_fc = inputs["w_fc"].float() * self.s_wfc
        self._w = {"abs": (w_g.abs().t(), w_fc.abs().t()), "sq": ((w_g * w_g).t(), (w_fc * w_fc).t())}
        self._w["signed"] = (w_g, w_fc)
        self.dx_floor_l1 = (inputs["w_g"].double().abs().sum(1) + inputs["w_fc"].double().abs().sum(1)).unsqueeze(0)
        # the fitted scale's rounding bias of each legitimate dtype path, on this case's data
        # (``scale_bias``): per path, dg's and dfc's errors against the exact values, carried
        # linearly into db (column sums), dw (x^T err) and dx (err w^T, dotted with the exact rows)
        bf16 = torch.bfloat16
        # dg's and dfc's legitimate dtype paths (``operators.swiglu_backward.gate.LEGITIMATE_CHOICES``): FP32 math
        # with only their stores, and PyTorch's, dy*fc and silu(g) stored first, in its operation order
        self._path_plans = {"fp32": BF16_FAITHFUL,
                            "stored_intermediates": replace(BF16_FAITHFUL.with_store(dy_fc=bf16, silu_g=bf16),
                                                            dg_order="torch")}
        self._paths = tuple(self._path_plans)
        # dx reads dg and dfc, and a kernel may take either path for each: dx's paths are the pairs
        # (dg's path, dfc's path), so a kernel storing dy*fc but not silu(g) has its bias counted too
        self._dx_paths = {(pg, pfc): pg if pg == pfc else f"dg {pg}, dfc {pfc}"
                          for pg in self._paths for pfc in self._paths}
        self._bias_num = {o: dict.fromkeys(self._paths, 0.0) for o in ("dg", "dfc")}
        self._bias_num["dx"] = dict.fromkeys(self._dx_paths.values(), 0.0)
        self._bias_den = {"dg": 0.0, "dfc": 0.0, "dx": 0.0}
        self._err_sums: dict = {p: {} for p in self._paths}   # path -> db_g, db_fc, dw_g, dw_fc error sums
        # the same numerators per row (dg, dfc, dx; chunks come in row order) and per column (dg, dfc),
        # for the localized tests' windows (``local_bias``)
        self._row_bias: dict = {o: {p: [] for p in self._paths} for o in ("dg", "dfc")}
        self._row_bias["dx"] = {p: [] for p in self._dx_paths.values()}
        self._col_bias: dict = {o: dict.fromkeys(self._paths, 0.0) for o in ("dg", "dfc")}
        self._chunk_err: dict = {}                             # path -> (err_g, err_fc) of the current chunk

    def rounding_variance(self, dy: torch.Tensor, g: torch.Tensor, fc: torch.Tensor, dg: torch.Tensor,
                          dfc: torch.Tensor, x: torch.Tensor | None = None,
                          block: int = REDUCTION_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
        """Per element of these rows, the variance of dg's and dfc's legitimate roundings (its store
        and the stored dy*fc or silu(g) before it), FP32 in the units of the scaled terms
        (``self.s_dg ** 2``, ``self.s_dfc ** 2``). ``dg``, ``dfc``: the exact (FP64) values."""
        dy, g, fc = (t.float() for t in (dy, g, fc))
        s = swiglu.sigmoid(g)
        factor = swiglu.dg_factor(g, s)         # dg = (dy fc) factor
        silu = swiglu.silu(g, s)                # dfc = dy silu
        self._add_path_bias(dy, g, fc, dg, dfc, x, block)
        var = []
        for exact, scale, inter, times in ((dg, self.s_dg, dy * fc, factor), (dfc, self.s_dfc, silu, dy)):
            store = bf16_spacing((exact.abs() * (scale * STORE_BINADE_MARGIN)).float(), MIN_NORMAL * scale)
            inter = bf16_spacing(inter.abs_().mul_(STORE_BINADE_MARGIN), MIN_NORMAL).mul_(times.abs()).mul_(scale)
            var.append(store.square_().add_(inter.square_()).div_(12))
        return var[0], var[1]

    def _add_path_bias(self, dy, g, fc, dg, dfc, x, block: int) -> None:
        """Round to nearest is biased on some data: the store of an exact product of two BF16
        values (dy * silu(g) once silu(g) is stored; dy * fc once sigmoid is 1 in FP32) rounds
        toward zero more often than away. Each legitimate path's dg and dfc are computed here in
        FP32 as a kernel computes them (``operators.swiglu_backward.math.elementwise``); their errors against
        the exact values are summed the way the fitted scale sums a kernel's, and carried into the
        reductions (``x``: the rows' BF16 x; without it dw's sums are not kept)."""
        paths = {name: tuple(round_to(v, torch.bfloat16) for v in swiglu.elementwise(dy, g, fc, plan))
                 for name, plan in self._path_plans.items()}
        # FP32 on values scaled by powers of two into (-1, 1] (exact; the tiny profile's are ~2^-124):
        # the sums are estimates of a bias of ~1e-4, FP32's 2^-24 rounding of the exact values is far below
        scales = {"dg": self.s_dg, "dfc": self.s_dfc}
        exact = {o: (v * scales[o]).float().nan_to_num_(0.0, 0.0, 0.0) for o, v in (("dg", dg), ("dfc", dfc))}
        for o, ex in exact.items():
            self._bias_den[o] += dot64(ex, ex) / scales[o] ** 2
        x32 = None if x is None else x.float()
        for name, values in paths.items():
            errs = []
            for (o, ex), value in zip(exact.items(), values):
                err = value.mul_(scales[o]).sub_(ex).nan_to_num_(0.0, 0.0, 0.0)
                self._bias_num[o][name] += dot64(err, ex) / scales[o] ** 2
                prod = (err * ex).double().reshape(-1, ex.shape[-1])
                self._row_bias[o][name].append(prod.sum(1) / scales[o] ** 2)
                self._col_bias[o][name] = self._col_bias[o][name] + prod.sum(0) / scales[o] ** 2
                errs.append(err)
            sums = self._err_sums[name]
            for o, err, scale in zip(("g", "fc"), errs, (self.s_dg, self.s_dfc)):
                for rows in blocks(err.shape[0], block):      # per canonical block, like every reduction
                    accumulate(sums, f"db_{o}", err[rows].sum(0, keepdim=True).double().div_(scale))
                    if x32 is not None:     # [K, N]: kept FP32 in the scaled errors' units (x 1 / scale)
                        accumulate(sums, f"dw_{o}", x32[rows].t() @ err[rows])
            self._chunk_err[name] = errs

    def scale_bias(self, output: str, exact: torch.Tensor | None = None) -> float:
        """The largest |fitted scale| the legitimate paths' roundings of dg and dfc give output
        ``output`` on this case's data: sum (path - exact) exact / sum exact^2, the errors carried
        linearly into db, dw (``exact``: the output's exact value, for them) and dx.

        dx's is not below the measured constant ``SCALE_BIAS``: its paths here carry dg's and dfc's
        errors linearly and add the store of the exact dx, while a kernel stores its own value
        (exact plus the carried error, which is about one spacing of dx, so the store swallows part
        of it) and may store dx's two products first (PyTorch does; each store's error is
        correlated with the value it rounds, about -h^2/3 relative per store). At the article's
        case, seed 0, torch-eager's dx fitted scale is -5.21e-5 against the modelled -4.74e-5,
        8.5 sigma apart; 1e-4 covers it."""
        if output in ("dg", "dfc", "dx"):
            den = self._bias_den[output]
            bias = max(abs(v) / den for v in self._bias_num[output].values()) if den > 0 else 0.0
            return max(bias, SCALE_BIAS) if output == "dx" else bias
        if exact is None or output not in self._err_sums[self._paths[0]]:
            return 0.0
        r = torch.where(torch.isfinite(exact), exact.double(), 0.0).reshape(-1)
        den = dot64(r, r)
        if den == 0:
            return 0.0
        return max(abs(dot64(self._stored_error(output, p, r), r)) / den for p in self._paths)

    def _stored_error(self, output: str, path: str, exact: torch.Tensor) -> torch.Tensor:
        """db's or dw's error on ``path``: the exact sum plus what the path's stored dg or dfc carried
        into it, stored in BF16 (``accuracy.term_sums.stored_sum_error``), in ``exact``'s shape."""
        unit = 1.0 / (self.s_dg if output.endswith("_g") else self.s_dfc) if output.startswith("dw") else 1.0
        return stored_sum_error(exact, self._err_sums[path][output].double().reshape(exact.shape) * unit)

    def local_bias(self, output: str, exact: torch.Tensor | None = None) -> dict | None:
        """``scale_bias``'s numerators sum (path - exact) exact per row and per column of the
        output, one row per legitimate path: {"rows": [paths, rows] or None, "columns": [paths,
        columns] or None}, FP64 in the output's units squared; a window's bias is the largest
        |sum over the window| / its sum exact^2 (``accuracy.localized``)."""
        if output in ("dg", "dfc", "dx"):
            lists = self._row_bias[output]
            if not lists[self._paths[0]]:
                return None
            rows = torch.stack([torch.cat(rows) for rows in lists.values()]).numpy()
            cols = (None if output == "dx" else
                    torch.stack([torch.as_tensor(self._col_bias[output][p], dtype=torch.float64).reshape(-1)
                                 for p in self._paths]).numpy())
            return {"rows": rows, "columns": cols}
        if exact is None or output not in self._err_sums[self._paths[0]]:
            return None
        r = torch.where(torch.isfinite(exact), exact.double(), 0.0)
        r = r.reshape(-1, r.shape[-1])
        prods = [self._stored_error(output, p, r) * r for p in self._paths]
        return {"rows": torch.stack([q.sum(1) for q in prods]).numpy() if r.shape[0] > 1 else None,
                "columns": torch.stack([q.sum(0) for q in prods]).numpy()}

    def rows(self, dg: torch.Tensor, dfc: torch.Tensor, var_g: torch.Tensor, var_fc: torch.Tensor,
             p_g: torch.Tensor, p_fc: torch.Tensor, dx: torch.Tensor, block: int = REDUCTION_BLOCK) -> RowTerms:
        """dx's term sums for these rows of the reference's dg, dfc and their rounding variances
        (``rounding_variance``); ``p_g``, ``p_fc`` are dg w_g^T and dfc w_fc^T and ``dx`` the FP64 dx
        rows, as the reference computed them."""
        (a_wg, a_wfc), (q_wg, q_wfc) = self._w["abs"], self._w["sq"]
        ug, ufc = 1.0 / (self.s_dg * self.s_wg), 1.0 / (self.s_dfc * self.s_wfc)
        abs_g = row_product((dg * self.s_dg).float().abs_(), a_wg, block).double() * ug
        abs_fc = row_product((dfc * self.s_dfc).float().abs_(), a_wfc, block).double() * ufc
        var = row_product(var_g, q_wg, block).double() * ug ** 2 + row_product(var_fc, q_wfc, block).double() * ufc ** 2
        # a stored product rounds the kernel's value, within its worst-case term error 2^-7 sum|terms|
        # of the exact one: the spacing is taken at the top of that range
        half_g = 0.5 * bf16_spacing(p_g.abs() + 2 ** -7 * abs_g)
        half_fc = 0.5 * bf16_spacing(p_fc.abs() + 2 ** -7 * abs_fc)
        s_r = _pow2_scale(float(dx.abs().max()) if dx.numel() else 0.0)
        r = (dx * s_r).float()
        rw_g, rw_fc = row_product(r, self._w["signed"][0], block), row_product(r, self._w["signed"][1], block)
        # the paths' dx bias: sum_mk (err_g w_g^T + err_fc w_fc^T) dx = sum_mn err_g (dx w_g) + err_fc (dx w_fc)
        self._bias_den["dx"] += dot64(r, r) / s_r ** 2
        # dx's own store, estimated by the rounding of the exact rows in the scaled units of r (the
        # carried errors move a kernel's value by about one spacing of dx, which this leaves out:
        # ``scale_bias`` keeps the measured constant under dx's bias for it)
        r64 = r.double()
        store = stored_sum_error(r64)
        store_rows = (store * r64).sum(-1) / s_r ** 2
        store_num = dot64(store, r64) / s_r ** 2
        part_g, part_fc = {}, {}      # per path: (whole, per row) of dg's and of dfc's carried error
        for name, (err_g, err_fc) in self._chunk_err.items():
            part_g[name] = (dot64(err_g, rw_g) / (s_r * self.s_wg * self.s_dg),
                            (err_g * rw_g).double().sum(-1) / (s_r * self.s_wg * self.s_dg))
            part_fc[name] = (dot64(err_fc, rw_fc) / (s_r * self.s_wfc * self.s_dfc),
                             (err_fc * rw_fc).double().sum(-1) / (s_r * self.s_wfc * self.s_dfc))
        for (pg, pfc), name in self._dx_paths.items():
            self._bias_num["dx"][name] += part_g[pg][0] + part_fc[pfc][0] + store_num
            self._row_bias["dx"][name].append(part_g[pg][1] + part_fc[pfc][1] + store_rows)
        shared_rows = ((var_g * rw_g * rw_g).double().sum(-1) * (ug / s_r) ** 2
                       + (var_fc * rw_fc * rw_fc).double().sum(-1) * (ufc / s_r) ** 2)
        shared = (float((var_g * rw_g * rw_g).sum(dtype=torch.float64)) * (ug / s_r) ** 2
                  + float((var_fc * rw_fc * rw_fc).sum(dtype=torch.float64)) * (ufc / s_r) ** 2)
        return RowTerms(abs=abs_g + abs_fc, var=var, products=half_g + half_fc,
                        products_var=(half_g.square() + half_fc.square()) / 3, shared=shared,
                        shared_rows=shared_rows)

    def add_block(self, x: torch.Tensor, dg: torch.Tensor, dfc: torch.Tensor, var_g: torch.Tensor,
                  var_fc: torch.Tensor) -> None:
        """One canonical block of rows (x as given, the reference's dg, dfc, and their rounding
        variances from ``rounding_variance``)."""
        xs = (x * self.s_x).float()
        a_x, q_x = xs.abs().t(), (xs * xs).t()
        ones = torch.ones(1, xs.shape[0])
        u_x = 1.0 / self.s_x
        x_sq = (xs * xs).sum(1, keepdim=True).t()        # [1, rows]: |x[m, :]|^2
        x_l1 = x.double().abs().sum(0).unsqueeze(1)      # [K, 1]: the subnormal floor's worst case
        rows = torch.full((1, 1), float(x.shape[0]), dtype=torch.float64)
        # one [K, N] part at a time, added and dropped: at K=4096, N=11008 each is 360 MB in FP64
        for o, exact, var, s in (("g", dg, var_g, self.s_dg), ("fc", dfc, var_fc, self.s_dfc)):
            terms = (exact * s).float().abs_()
            self.add_part(f"db_{o}", (ones @ terms).double().div_(s), (ones @ var).double().div_(s ** 2), rows)
            # dw's [K, N] sums stay FP32 in the scaled operands' units (``ReductionTermSums.add_part``)
            self.add_part(f"dw_{o}", a_x @ terms, q_x @ var, x_l1, (x_sq @ var).double().mul_((u_x / s) ** 2),
                          unit=(u_x / s, (u_x / s) ** 2))
        self.rows_seen += x.shape[0]
