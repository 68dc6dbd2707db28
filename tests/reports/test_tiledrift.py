"""The per-tile replay behind the heatmap."""
from __future__ import annotations

import torch

from cases.spec import CaseSpec, make_inputs
from goldens.stream import materialize
from kernels.pypto.schedule import ARTICLE, HARDENED
from reports import data as D
from reports.tiledrift import TileDrift, choose_case, replay

SPEC = CaseSpec(4500, 8, 150, "unit", 0)     # 5 b-tiles (tail 404), 3 w-tiles (tail 404)


def test_replay_ends_where_the_tiled_golden_ends():
    inputs = make_inputs(SPEC)
    td = replay(SPEC, ARTICLE, inputs=inputs, block=64)
    golden = materialize(inputs, ARTICLE)
    for o in D.operator_outputs()[1]:
        assert torch.equal(td.finals[o].float(), golden[o].float()), o
    assert [len(td.drift[o]) for o in D.operator_outputs()[1]] == [5, 5, 3, 3]
    assert all(len(row) == 3 for row in td.drift["db_g"])        # 150 columns in blocks of 64
    assert td.tile_rows == {"db_g": 1024, "db_fc": 1024, "dw_g": 2048, "dw_fc": 2048}
    for o in D.operator_outputs()[1]:
        assert max(td.utilisation[o]) <= 1.0                       # inside the rounding-model bound
        assert td.max_drift[o][-1] > 0                             # BF16 accumulation does drift
        assert max(td.drift[o][-1]) == td.max_drift[o][-1]
    back = TileDrift.from_json(td.to_json())
    assert back.drift == td.drift and back.case == SPEC.id


def test_fp32_accumulator_drifts_only_by_fp32_order():
    td = replay(SPEC, HARDENED, block=64)
    # FP32 accumulation of FP32 partials is the global running sum itself
    assert all(v == 0 for o in D.operator_outputs()[1] for v in td.max_drift[o])


def _case(m, scale="seed", k=512, n=1024):
    return D.Case(f"M{m}-K{k}-N{n}-{scale}-s0", m, (("K", k), ("N", n)), scale, 0)


def test_choose_case_prefers_the_article_scale_and_caps_m():
    spec, why = choose_case([_case(220000), _case(4097, "unit"), _case(1, "saturating")], max_m=32768)
    assert spec == CaseSpec(32768, 512, 1024, "seed", 0) and "capped" in why
    spec, why = choose_case([_case(20000), _case(1000)], max_m=32768)
    assert spec == CaseSpec(20000, 512, 1024, "seed", 0)
    spec, why = choose_case([_case(3000, "unit")], max_m=8192)
    assert spec == CaseSpec(8192, 512, 1024, "unit", 0) and "too few" in why
    assert choose_case([D.Case("M3-K8-N8-nonsense-s0", 3, (("K", 8), ("N", 8)), "nonsense", 0)])[0] is None
