"""Each golden layer pinned on small hand-checkable cases."""
import math

import pytest
import torch

from goldens.threads import comparison_threads
from goldens.layers import bf16_faithful, fp64_ideal, tiled_emulation
from operators.swiglu_backward.schedule import BF16_FAITHFUL, FP64_GLOBAL, RoundingPlan, TiledSchedule
from goldens.stream import GoldenPass
from operators.swiglu_backward.schedule import ARTICLE
from tests.core.helpers import case_inputs, tiny_inputs
from operators.swiglu_backward import OPERATOR as SWIGLU

SAME_PLAN = TiledSchedule(name="same-plan", plan=BF16_FAITHFUL)   # the article's tiles, the faithful plan


def by_hand(inp):
    """The operator's math in float64 with explicit loops over rows."""
    d = {k: v.double() for k, v in inp.items()}
    s = 1 / (1 + torch.exp(-d["g"]))
    dg = d["dy"] * d["fc"] * s * (1 + d["g"] * (1 - s))
    dfc = d["dy"] * d["g"] * s
    m = d["x"].shape[0]
    db_g = sum(dg[i] for i in range(m)).unsqueeze(0)
    dw_g = sum(torch.outer(d["x"][i], dg[i]) for i in range(m))
    dx = dg @ d["w_g"].t() + dfc @ d["w_fc"].t()
    return {"dg": dg, "dfc": dfc, "db_g": db_g, "dw_g": dw_g, "dx": dx}


def test_fp64_ideal_matches_the_formula_by_hand():
    inp = tiny_inputs()
    got, want = fp64_ideal(SWIGLU, inp), by_hand(inp)
    for name, ref in want.items():
        assert got[name].dtype == torch.float64
        torch.testing.assert_close(got[name], ref, rtol=1e-12, atol=1e-15)


def test_fp64_ideal_single_element():
    one = {k: torch.ones(1, 1, dtype=torch.bfloat16) for k in ("x", "w_g", "w_fc", "dy", "g", "fc")}
    s = 1 / (1 + math.exp(-1))
    dg, dfc = s * (1 + (1 - s)), s
    out = fp64_ideal(SWIGLU, one)
    assert out["dg"].item() == pytest.approx(dg, rel=1e-15)
    assert out["dfc"].item() == pytest.approx(dfc, rel=1e-15)
    assert out["dx"].item() == pytest.approx(dg + dfc, rel=1e-15)
    assert out["dw_fc"].item() == pytest.approx(dfc, rel=1e-15)


def test_faithful_rounds_dg_before_the_w_and_x_kernels():
    inp = tiny_inputs(m=7, k=3, n=5)
    out = bf16_faithful(SWIGLU, inp)
    for name in out:   # every output of the BF16 path is a BF16 value
        assert torch.equal(out[name], out[name].to(torch.bfloat16).float()), name
    dg_stored = out["dg"]                   # already BF16 values
    dw_expected = (inp["x"].float().t() @ dg_stored).to(torch.bfloat16).float()
    assert torch.equal(out["dw_g"], dw_expected)
    # db sums the unrounded FP32 dg (the article's b kernel sums before its store)
    dg32 = fp64_ideal(SWIGLU, inp)["dg"].float()
    db = dg32.sum(0, keepdim=True).to(torch.bfloat16).float()
    assert (out["db_g"] - db).abs().max() <= db.abs().max() * 2 ** -8


def test_plan_is_data_an_fp16_plan_changes_the_stores():
    inp = tiny_inputs()
    fp16_plan = BF16_FAITHFUL.with_store(dg=torch.float16, dfc=torch.float16)
    out = bf16_faithful(SWIGLU, inp, fp16_plan)
    assert torch.equal(out["dg"], out["dg"].to(torch.float16).float())
    assert not torch.equal(out["dg"], bf16_faithful(SWIGLU, inp)["dg"])


@pytest.mark.parametrize("m", [1, 2, 1000, 1024])
def test_tiled_equals_faithful_within_one_tile(m):
    """With M <= tile_m every reduction is a single tile: cast(partial) + 0 == the global result."""
    inp = case_inputs(m)
    tiled, faithful = tiled_emulation(SWIGLU, inp, SAME_PLAN), bf16_faithful(SWIGLU, inp)
    for name in faithful:
        assert torch.equal(tiled[name], faithful[name]), name


def test_tiled_accumulates_partials_in_bf16_in_loop_order():
    m = 3000  # b: tiles of 1024, 1024, 952 rows; w: 2048, 952
    inp = case_inputs(m)
    tiled = tiled_emulation(SWIGLU, inp, SAME_PLAN)
    faithful = bf16_faithful(SWIGLU, inp)
    dg = faithful["dg"]
    x = inp["x"].float()
    acc = torch.zeros(1, dg.shape[1], dtype=torch.bfloat16)
    from operators.swiglu_backward.math import elementwise
    # on the goldens' fixed threads (goldens.threads): a small product's sum order follows the count
    with comparison_threads():
        dg32, _ = elementwise(inp["dy"][:], inp["g"], inp["fc"], BF16_FAITHFUL)
        for start in range(0, m, 1024):
            acc = acc + dg32[start:start + 1024].sum(0, keepdim=True).to(torch.bfloat16)
        wacc = torch.zeros(x.shape[1], dg.shape[1], dtype=torch.bfloat16)
        for start in range(0, m, 2048):
            # a tile's FP32 partial in the canonical order: its 1024-row blocks' products, added in
            # row order (one 2048-row GEMM sums in an order of oneDNN's choosing, which differs
            # between CPUs: an Intel Xeon's differs from an AMD EPYC's in the last FP32 bits)
            blocks = [x[b:min(b + 1024, m)].t() @ dg[b:min(b + 1024, m)] for b in range(start, min(start + 2048, m), 1024)]
            wacc = wacc + sum(blocks[1:], blocks[0]).to(torch.bfloat16)
    assert torch.equal(tiled["db_g"], acc.float())
    assert torch.equal(tiled["dw_g"], wacc.float())
    assert not torch.equal(tiled["dw_g"], faithful["dw_g"])   # the drift is there at 2 tiles


def test_fp32_accumulator_schedule_rounds_once():
    inp = case_inputs(4097)
    fp32_acc = TiledSchedule(name="fp32-acc", db_accumulator=torch.float32, dw_accumulator=torch.float32,
                             plan=BF16_FAITHFUL)
    tiled, faithful = tiled_emulation(SWIGLU, inp, fp32_acc), bf16_faithful(SWIGLU, inp)
    # FP32 partials added in FP32 then rounded once: within 1 BF16 ULP of the global sum
    for name in ("db_g", "db_fc", "dw_g", "dw_fc"):
        from accuracy.ulp import ulp_distance
        assert ulp_distance(tiled[name], faithful[name]).max() <= 1.0, name


def test_exp_ratio_sigmoid_overflows_to_nan_where_stable_does_not():
    inp = tiny_inputs()
    inp["g"][0, 0] = 100.0
    article = tiled_emulation(SWIGLU, inp, ARTICLE)
    assert torch.isnan(article["dg"][0, 0]) and torch.isnan(article["db_g"][0, 0])
    assert torch.isfinite(bf16_faithful(SWIGLU, inp)["dg"]).all()


def _stream(inp, layers, chunk_rows):
    """Every output of every layer of one pass, as full tensors."""
    golden = GoldenPass(SWIGLU, inp, layers, chunk_rows=chunk_rows)
    rows = {name: {o: [] for o in ("dg", "dfc", "dx")} for name in layers}
    for block in golden.blocks():
        for name in layers:
            for o in rows[name]:
                rows[name][o].append(block.rows[name][o])
    return {name: {**{o: torch.cat(c) for o, c in rows[name].items()}, **golden.reductions[name]}
            for name in layers}


ODD_TILES = TiledSchedule(name="odd-tiles", tile_m_b=300, tile_m_w=700, tile_m_x=300, plan=BF16_FAITHFUL)


@pytest.mark.parametrize("chunk_rows", [1000, 4096, 8191, 8192])
def test_golden_bits_depend_on_neither_chunk_rows_nor_the_other_layers(chunk_rows):
    """The faithful and tiled goldens of a case are the same bits whatever --chunk-rows is and
    whichever other schedules share the pass (same plan, other tiles, odd tiles)."""
    from operators.swiglu_backward.schedule import FAITHFUL_GLOBAL
    inp = case_inputs(5000)
    alone = {**_stream(inp, {"faithful": FAITHFUL_GLOBAL}, 8192), **_stream(inp, {"article": ARTICLE}, 8192)}
    crowd = _stream(inp, {"faithful": FAITHFUL_GLOBAL, "same-plan": SAME_PLAN, "odd-tiles": ODD_TILES,
                          "article": ARTICLE}, chunk_rows)
    for name in ("faithful", "article"):
        for o, ref in alone[name].items():
            assert torch.equal(torch.nan_to_num(ref), torch.nan_to_num(crowd[name][o])), (name, o, chunk_rows)


def test_golden_rows_and_term_sums_do_not_depend_on_the_chunk_at_a_production_width():
    """At M=1100, K=2048, N=8192 oneDNN's products differ per row between one 1100-row matmul and
    a 1024-row plus a 76-row one (FP32: 1.86M of 2.25M dx elements, FP64: 10, on an avx512 Xeon;
    its blocking depends on the whole shape): every row product is computed per canonical block
    (``operators.declaration.row_product``), so dx of every layer, dx's term sums and the
    reductions' term sums are the same bits for any --chunk-rows. Seen failing with plain
    chunk-sized products (on a CPU whose oneDNN blocks both shapes alike it cannot fail)."""
    from operators.swiglu_backward.schedule import FAITHFUL_GLOBAL
    inp = case_inputs(1100, k=2048, n=8192)
    layers = {"fp64": FP64_GLOBAL, "faithful": FAITHFUL_GLOBAL}

    def stream(chunk_rows):
        golden = GoldenPass(SWIGLU, inp, layers, chunk_rows=chunk_rows, terms=True)
        rows = {name: [] for name in layers}
        row_terms = []
        for block in golden.blocks():
            for name in layers:
                rows[name].append(block.rows[name]["dx"])
            row_terms.append(torch.stack([block.terms.abs, block.terms.var, block.terms.products]))
        sums = {f"{name}:{o}": golden.terms.part(name, o) for name in ("abs", "var", "block", "prefix")
                for o in ("dw_g", "db_fc")}
        return ({name: torch.cat(r) for name, r in rows.items()}, torch.cat(row_terms, 1), sums,
                golden.reductions, golden.terms.scale_bias("dw_g", golden.reductions["fp64"]["dw_g"]))

    first = stream(1024)
    for chunk_rows in (2048,):
        other = stream(chunk_rows)
        for name in layers:
            assert torch.equal(first[0][name], other[0][name]), (name, chunk_rows)
        assert torch.equal(first[1], other[1]), chunk_rows
        for key, t in first[2].items():
            assert torch.equal(t, other[2][key]), (key, chunk_rows)
        for name in layers:
            for o, t in first[3][name].items():
                assert torch.equal(t, other[3][name][o]), (name, o, chunk_rows)
        assert first[4] == other[4]


def test_stream_never_holds_full_size_float64_rows():
    """Row outputs come in chunks of at most chunk_rows rows, whatever M."""
    inp = case_inputs(9000)
    golden = GoldenPass(SWIGLU, inp, {"fp64": FP64_GLOBAL}, chunk_rows=2048)
    sizes = [b.stop - b.start for b in golden.blocks()]
    assert max(sizes) == 2048 and sum(sizes) == 9000


def test_chunks_get_fewer_rows_where_a_row_output_is_wider_than_4096():
    """2048 rows per chunk up to N=4096 (the quick profile's cases keep their chunking), one
    1024-row block beyond (a production N=11008: 11.3M elements per FP64 chunk tensor instead of
    22.5M); an explicit chunk_rows wins, rounded up to whole blocks."""
    from goldens.stream import chunk_rows_for

    def inputs(n, k=512, m=1):
        shapes = {"x": (m, k), "dy": (m, n), "g": (m, n), "fc": (m, n), "w_g": (k, n), "w_fc": (k, n)}
        return {name: torch.empty(shape, dtype=torch.bfloat16, device="meta") for name, shape in shapes.items()}

    assert [chunk_rows_for(SWIGLU, inputs(n)) for n in (200, 1024, 4096, 4097, 11008, 65536)] == [2048, 2048, 2048, 1024, 1024, 1024]
    assert chunk_rows_for(SWIGLU, inputs(200, k=4096)) == 2048
    assert chunk_rows_for(SWIGLU, inputs(200, k=8192)) == 1024              # dx is [M, K]: the widest row output counts
    assert chunk_rows_for(SWIGLU, inputs(11008), 1000) == 1024 and chunk_rows_for(SWIGLU, inputs(200), 4097) == 5120
    with pytest.raises(ValueError, match="chunk_rows must be >= 1"):
        chunk_rows_for(SWIGLU, inputs(200), 0)
    golden = GoldenPass(SWIGLU, case_inputs(3000, k=64, n=5000), {"fp64": FP64_GLOBAL})
    assert [b.stop - b.start for b in golden.blocks()] == [1024, 1024, 952]


def test_unknown_rounding_point_is_rejected():
    with pytest.raises(ValueError, match="unknown rounding points"):
        RoundingPlan(store={"dq": torch.bfloat16})
