"""The case matrix: M edge sizes x the other dimensions x scale profile x seed.

The axes are the operator's (``operators/<name>/profiles.py``: its M edges with why each, its
shapes, its scale profiles and the case its acceptance criterion names); the matrix is built
from them here. Accuracy sizes only (benchmark sizes live in benchmarks/).
"""
from __future__ import annotations

from cases.spec import SCALES, CaseSpec, inputs_case
from kernels.contract import OPERATOR

M_EDGES = OPERATOR.m_edges
KN_PAIRS = OPERATOR.shapes
SEED_CASE = CaseSpec(*OPERATOR.article_case)
LARGE_M = 100_000


def quick_cases(seeds: int = 1) -> list[CaseSpec]:
    """Every M edge and every scale at least once, small enough for CI, plus the article's case.

    The scales rotate over the M edges below 220000 (10 M x 6 scales, 10 cells), alternating
    (K, N); a second sweep at the small odd pair gives every scale a multi-tile M too."""
    scales = list(SCALES)
    cases = []
    small_ms = [m for m in M_EDGES if m < LARGE_M]
    for i, m in enumerate(small_ms):
        k, n = KN_PAIRS[i % 2]
        cases.append(CaseSpec(m, k, n, scales[i % len(scales)], 0))
    for j, scale in enumerate(scales):
        m = small_ms[(j * 3 + 4) % len(small_ms)]
        cases.append(CaseSpec(m, 96, 200, scale, 0))
    cases.append(SEED_CASE)
    unique = list(dict.fromkeys(cases))
    return [CaseSpec(c.m, c.k, c.n, c.scale, c.seed + s) if s else c for c in unique for s in range(seeds)]


def full_cases(seeds: int = 1) -> list[CaseSpec]:
    """The cross product of every axis."""
    return [CaseSpec(m, k, n, scale, seed) for m in M_EDGES for (k, n) in KN_PAIRS
            for scale in SCALES for seed in range(seeds)]


PROFILES = {"quick": quick_cases, "full": full_cases, "none": lambda seeds=1: []}


class CaseSyntaxError(ValueError):
    """A --case value that is not M,K,N,SCALE[,SEED] with sizes >= 1 and a known scale profile."""


def parse_case(text: str) -> CaseSpec:
    """``M,K,N,SCALE[,SEED]`` (e.g. ``8192,4096,11008,unit``: a production shape) as a case."""
    parts = [p.strip() for p in text.split(",")]
    usage = (f"--case {text!r}: expected M,K,N,SCALE[,SEED] with M, K, N >= 1 and SCALE one of "
             f"{', '.join(SCALES)}, e.g. --case 8192,4096,11008,unit")
    if len(parts) not in (4, 5):
        raise CaseSyntaxError(usage)
    try:
        m, k, n = (int(p) for p in parts[:3])
        seed = int(parts[4]) if len(parts) == 5 else 0
    except ValueError:
        raise CaseSyntaxError(usage) from None
    if min(m, k, n) < 1 or seed < 0 or parts[3] not in SCALES:
        raise CaseSyntaxError(usage)
    return CaseSpec(m, k, n, parts[3], seed)


def planned_cases(profile: str, seeds: int = 1, extra: tuple[str, ...] = (),
                  inputs_files: tuple[str, ...] = ()) -> list[CaseSpec]:
    """The profile's cases, then each ``--case`` over ``seeds`` seeds from its own, then each
    ``--inputs`` file (``cases.spec.inputs_case``; a file has no seed); once each."""
    cases = PROFILES[profile](seeds)
    for text in extra:
        spec = parse_case(text)
        cases += [CaseSpec(spec.m, spec.k, spec.n, spec.scale, spec.seed + s) for s in range(seeds)]
    cases += [inputs_case(path) for path in inputs_files]
    return list(dict.fromkeys(cases))
