"""A full-profile-sized results file made from real records (for measuring render time).

The full profile is 132 cases (11 M x 2 (K, N) x 6 scales) x 3 backends x 7 outputs x 3 goldens,
plus the goldens' own records. Each synthetic record copies a real record of the same backend,
output and golden (and scale when there is one) and scales its errors with M, so the plots have
something to draw. Usage:

    python -m tests.reports.synth REAL_RESULTS_DIR OUT_DIR [--backends 3]
"""
from __future__ import annotations

import argparse
import copy
import json
import random
from pathlib import Path

from cases.matrix import full_cases
from operators.swiglu_backward import OPERATOR as SWIGLU

SCALED = ("max_abs_err", "bound_mean", "ulp_p99", "ulp_max", "max_rel_err")


def full_profile(records: list[dict], backends: int = 3, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    real_backends = list(dict.fromkeys(r["backend"] for r in records if not r["backend"].startswith("golden:")))
    templates: dict[tuple, list] = {}
    for r in records:
        if r.get("output") == "*":
            continue
        b = r["backend"]
        key = ("golden" if b.startswith("golden:") else b, r["output"], r["golden"] if not b.startswith("golden:")
               else (b, r["golden"]))
        templates.setdefault(key, []).append(r)
    names = (real_backends + [f"synthetic.kernel_{i}:run" for i in range(backends)])[:backends]
    out = []
    for spec in full_cases(SWIGLU):
        sd = spec.asdict()
        for i, name in enumerate(names):
            src = real_backends[i % len(real_backends)]
            for (b, output, golden), pool in templates.items():
                if b != src:
                    continue
                t = copy.deepcopy(next((p for p in pool if p["case_spec"]["scale"] == spec.scale), pool[0]))
                t.update(case=spec.id, case_spec=sd, backend=name)
                m = t.get("metrics") or {}
                f = (spec.m / max(t["case_spec"].get("m", 1), 1)) ** 0.5 * rng.uniform(0.8, 1.25)
                for k in SCALED:
                    if isinstance(m.get(k), float):
                        m[k] *= f
                if isinstance(t.get("message"), str):
                    t["message"] = t["message"].replace(src, name)
                out.append(t)
        for (b, output, (layer, golden)), pool in ((k, v) for k, v in templates.items() if k[0] == "golden"):
            t = copy.deepcopy(next((p for p in pool if p["case_spec"]["scale"] == spec.scale), pool[0]))
            t.update(case=spec.id, case_spec=sd)
            m = t.get("metrics") or {}
            f = (spec.m / max(t["case_spec"].get("m", 1), 1)) ** 0.5 * rng.uniform(0.8, 1.25)
            for k in SCALED:
                if isinstance(m.get(k), float):
                    m[k] *= f
            out.append(t)
    return out


def main(argv=None) -> int:
    from runs.results import load_records
    parser = argparse.ArgumentParser()
    parser.add_argument("real")
    parser.add_argument("out")
    parser.add_argument("--backends", type=int, default=3)
    args = parser.parse_args(argv)
    recs = full_profile(load_records(args.real), args.backends)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "results.json").write_text(json.dumps({"schema": 1, "records": recs}))
    print(f"{len(recs)} records -> {args.out}/results.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
