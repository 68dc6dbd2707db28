"""The case matrix: M edge sizes x the other dimensions x scale profile x seed.

The axes are the operator's (``operators/<name>/profiles.py``: its M edges with why each, its
shapes, its scale profiles and the case its acceptance criterion names); the matrix is built
from them here. Accuracy sizes only (benchmark sizes live in benchmarks/).
"""
from __future__ import annotations

import math
from dataclasses import replace

from cases.spec import CaseSpec, inputs_case
from contract.operator import Operator

LARGE_M = 100_000
MAX_SIZE = 2**31 - 1          # a --case dimension or seed
MAX_ELEMENTS = 2**34          # one input or output tensor: 32 GiB in BF16, beyond any machine here


def acceptance_case(operator: Operator) -> CaseSpec:
    """The case the operator's own acceptance criterion names (SwiGLU: the article's)."""
    return CaseSpec(*operator.acceptance_case, operator=operator)


def quick_cases(operator: Operator, seeds: int = 1) -> list[CaseSpec]:
    """Every M edge and every scale at least once, small enough for CI, plus the article's case.

    The scales rotate over the M edges below 220000 (10 M x 6 scales, 10 cells), alternating the
    operator's shapes; a second sweep at its last (smallest) shape gives every scale a multi-tile
    M too. The operator's range cases (inputs outside another format's range, a function's far
    tail) come as they are."""
    shapes = operator.shapes   # shapes: the sizes of the dimensions after M
    ranges = [CaseSpec(*c, operator=operator) for c in operator.range_cases]
    scales = [s for s in operator.scales if s not in {c.scale for c in ranges}]
    cases = []
    small_ms = [m for m in operator.m_edges if m < LARGE_M]
    for i, m in enumerate(small_ms):
        cases.append(CaseSpec(m, *shapes[i % len(shapes)], scales[i % len(scales)], 0, operator=operator))
    for j, scale in enumerate(scales):
        m = small_ms[(j * 3 + 4) % len(small_ms)]
        cases.append(CaseSpec(m, *shapes[-1], scale, 0, operator=operator))
    cases += ranges
    cases.append(acceptance_case(operator))
    unique = list(dict.fromkeys(cases))
    return [replace(c, seed=c.seed + s) if s else c for c in unique for s in range(seeds)]


def full_cases(operator: Operator, seeds: int = 1) -> list[CaseSpec]:
    """The cross product of every axis."""
    return [CaseSpec(m, *shape, scale, seed, operator=operator) for m in operator.m_edges
            for shape in operator.shapes for scale in operator.scales for seed in range(seeds)]


PROFILES = {"quick": quick_cases, "full": full_cases, "none": lambda operator, seeds=1: []}


class CaseSyntaxError(ValueError):
    """A --case value that is not the operator's sizes, SCALE[,SEED] with sizes >= 1 and a known scale."""


def parse_case(operator: Operator, text: str) -> CaseSpec:
    """The operator's sizes, then ``SCALE[,SEED]`` (SwiGLU: ``M,K,N,SCALE[,SEED]``, e.g.
    ``8192,4096,11008,unit``: a production shape) as a case."""
    scales = operator.scales
    parts = [p.strip() for p in text.split(",")]
    ndim = len(operator.dims)
    names = ",".join(operator.dims)
    example = ",".join(str(v) for v in operator.acceptance_case[:ndim]) + f",{next(iter(scales))}"
    usage = (f"--case {text!r}: expected {names},SCALE[,SEED] with {', '.join(operator.dims)} >= 1 and SCALE one "
             f"of {', '.join(scales)}, e.g. --case {example}")
    if len(parts) not in (ndim + 1, ndim + 2):
        raise CaseSyntaxError(usage)
    try:
        sizes = [int(p) for p in parts[:ndim]]
        seed = int(parts[ndim + 1]) if len(parts) == ndim + 2 else 0
    except ValueError:
        raise CaseSyntaxError(usage) from None
    if min(sizes) < 1 or seed < 0 or parts[ndim] not in scales:
        raise CaseSyntaxError(usage)
    if max(sizes) > MAX_SIZE or seed > MAX_SIZE:
        raise CaseSyntaxError(f"--case {text!r}: every size and the seed must be at most {MAX_SIZE} "
                              f"(torch indexes a dimension with 64-bit integers, but a larger case cannot be held)")
    spec = CaseSpec(*sizes, parts[ndim], seed, operator=operator)
    sizes_by_name = dict(zip(operator.dims, sizes))
    largest = max(math.prod(s) for s in (*operator.input_shapes(sizes_by_name).values(),
                                          *operator.output_shapes(sizes_by_name).values()))
    if largest > MAX_ELEMENTS:
        raise CaseSyntaxError(f"--case {text!r}: a tensor of {largest:.3g} elements; at most {MAX_ELEMENTS:.3g} "
                              f"({MAX_ELEMENTS * 2 / 2**30:.0f} GiB in BF16) per input or output")
    return spec


def planned_cases(operator: Operator, profile: str, seeds: int = 1, extra: tuple[str, ...] = (),
                  inputs_files: tuple[str, ...] = ()) -> list[CaseSpec]:
    """The profile's cases, then each ``--case`` over ``seeds`` seeds from its own, then each
    ``--inputs`` file (``cases.spec.inputs_case``; a file has no seed); once each."""
    cases = PROFILES[profile](operator, seeds)
    for text in extra:
        spec = parse_case(operator, text)
        cases += [replace(spec, seed=spec.seed + s) for s in range(seeds)]
    cases += [inputs_case(path, operator) for path in inputs_files]
    cases = list(dict.fromkeys(cases))
    seen: dict[str, CaseSpec] = {}
    for spec in cases:
        if spec.id in seen:     # two --inputs files with the same bytes: one case, planned twice
            raise CaseSyntaxError(f"case {spec.id} is planned twice ({seen[spec.id].inputs_file or 'the matrix'} and "
                                  f"{spec.inputs_file or 'the matrix'}): give each case once")
        seen[spec.id] = spec
    return cases
