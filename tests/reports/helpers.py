"""Hand-made result records with known numbers, in the format of ``cases.evaluate``."""
from __future__ import annotations

import copy
import re
from html import unescape

HOSTILE = 'my.pkg:kernel<script>alert("pwned")</script>&amp;'


def case_spec(m, k=8, n=16, scale="unit", seed=0):
    cid = f"M{m}-K{k}-N{n}-{scale}-s{seed}"
    return cid, {"m": m, "k": k, "n": n, "scale": scale, "seed": seed, "id": cid}


def metrics(**values):
    base = {"max_abs_err": 0.0, "max_rel_err": 0.0, "ulp_p50": 0.0, "ulp_p99": 0.0, "ulp_max": 0.0,
            "mismatch_fraction": 0.0, "mismatches": 0, "nonfinite_disagreements": 0, "golden_max_abs": 1.0,
            "golden_rms": 1.0,
            "zero_passes_seed_gate": False, "atol_capped": False, "bound_mean": None,
            "bound_max_utilisation": None, "worst": [], "ulp_hist": [], "log10_abs_err_hist": [],
            "exact_elements": 0}
    base.update(values)
    return base


def rec(m, backend, output, golden, *, status="info", gated=False, k=8, n=16, scale="unit", seed=0,
        attribution=None, **values):
    cid, spec = case_spec(m, k, n, scale, seed)
    r = {"case": cid, "case_spec": spec, "backend": backend, "output": output, "golden": golden,
         "status": status, "metrics": metrics(**values)}
    if not backend.startswith("golden:"):
        r["gated"] = gated
        if attribution is not None:
            r["attribution"] = attribution
        if gated:
            r["vacuous_seed_gate"] = bool(values.get("zero_passes_seed_gate", False))
            r["atol_capped"] = False
            r["message"] = f"{'Passed' if status == 'pass' else 'Accuracy gate failed'}: case {cid}"
    return r


def cell(m, backend, output, status, **kw):
    """The three records of one case x backend x output: gated faithful + fp64 + tiled."""
    extra = kw.pop("fp64", {})
    return [rec(m, backend, output, "faithful", status=status, gated=True, **kw),
            rec(m, backend, output, "fp64", **{**kw, **extra}),
            rec(m, backend, output, "tiled", **kw)]


def renamed(records, old, new):
    out = copy.deepcopy(records)
    for r in out:
        if r.get("backend") == old:
            r["backend"] = new
            if isinstance(r.get("message"), str):
                r["message"] = r["message"].replace(old, new)
    return out


def findings_text(page) -> str:
    """The report's findings block as a reader sees it: tags dropped, entities read, white space collapsed."""
    html = page.read_text()
    block = html[html.index('<section id="findings"'):html.index("</section>")]
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", block)))
