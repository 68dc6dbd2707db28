"""A kernel's mutation score: its mutants judged by the real gate, then triaged.

A mutant is

* **killed by the contract** where it raises (its exception type is named), returns the wrong
  names, dtypes or shapes, does not compile, or runs past its timeout;
* **killed by the gate** where an output fails that the unmutated kernel passed at the same case;
* **equivalent** when its outputs are bit-identical to the unmutated kernel's at every case it was
  judged at (nothing to catch), when its edit is one of the operator's declared legitimate choices
  (``LEGITIMATE``, each with its reason), or, with ``fp64_or_better``, when at every case each
  output is at least as close to the FP64 reference as the unmutated kernel's (largest and 99th
  percentile ULP error and largest absolute error, each no larger: a more exact rewrite, which a
  gate must not fail);
* **survived** otherwise: listed with its line, its edit and its largest error against FP64.

The unmutated kernel is judged first at every case; a case it fails (an output) cannot kill a
mutant through that output, and a case where it cannot run judges no one. The score is
killed / (all - equivalent).
"""
from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from cases.matrix import LARGE_M, quick_cases
from cases.mutation.judge import BATCH, Judged, Progress, judge
from cases.mutation.mutator import Edit, MutationPlan, mutants, plan_for
from cases.mutation.source import read_kernel
from cases.mutation.worker import BASELINE, CaseResult
from cases.spec import CaseSpec
from contract.operator import Operator

# Edits that are an operator's declared legitimate choices (its gate.py), by operator name: a
# mutant making one is not a miss.
LEGITIMATE = {
    "swiglu_backward": {
        "silu -> silu rounded to BF16": "silu(g) stored in BF16 before dfc = dy silu(g): PyTorch autograd's path",
    },
}
VERDICTS = ("contract", "gate", "equivalent", "survived")


def small_cases(operator: Operator) -> list[CaseSpec]:
    """The quick profile's cases at the operator's smallest shape (by element count) below
    ``LARGE_M`` rows, range cases included: SwiGLU's K=96, N=200 at eight M from 1 to 4097."""
    smallest = min(operator.shapes, key=math.prod)
    return [c for c in quick_cases(operator) if tuple(c.sizes[1:]) == tuple(smallest) and c.m < LARGE_M]


def by_size(cases: Sequence[CaseSpec]) -> list[CaseSpec]:
    """Smallest first (product of the sizes; ties in the given order): the first case that kills
    a mutant is then the cheapest."""
    return sorted(cases, key=lambda c: math.prod(c.sizes))


@dataclass
class MutantVerdict:
    index: int
    line: int
    edit: str
    verdict: str                        # one of VERDICTS
    detail: str
    killed_at: str | None = None        # the case that killed it (the first, so the cheapest when sorted by size)
    fp64_ulp_max: float | None = None   # its largest error against FP64 over outputs and cases, BF16 ULPs
    ulp_from_baseline: float = 0.0      # p99 |mutant - unmutated| in BF16 ULPs, worst output and case


@dataclass
class MutationScore:
    kernel: str
    operator: str
    cases: list[str]
    mutants: list[MutantVerdict]
    baseline_failures: dict[str, str] = field(default_factory=dict)    # case -> what the unmutated kernel failed
    baseline_fp64_ulp_max: float | None = None
    seconds: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        return {v: sum(m.verdict == v for m in self.mutants) for v in VERDICTS}

    @property
    def score(self) -> float:
        c = self.counts
        non_equivalent = len(self.mutants) - c["equivalent"]
        return (c["contract"] + c["gate"]) / non_equivalent if non_equivalent else 1.0

    @property
    def kills_per_case(self) -> dict[str, int]:
        """How many mutants each case killed first."""
        kills = {c: 0 for c in self.cases}
        for m in self.mutants:
            if m.killed_at in kills:
                kills[m.killed_at] += 1
        return kills

    def as_json(self) -> dict:
        return {"kernel": self.kernel, "operator": self.operator, "cases": self.cases, "mutants": len(self.mutants),
                **self.counts, "score": self.score, "kills_per_case": self.kills_per_case,
                "baseline_failures": self.baseline_failures, "baseline_fp64_ulp_max": self.baseline_fp64_ulp_max,
                "seconds": self.seconds, "population": [asdict(m) for m in self.mutants]}


def _worst(results: dict[str, CaseResult], field_name: str = "ulp_max") -> float | None:
    values = [m[field_name] for r in results.values() for m in r.fp64.values() if m.get(field_name) is not None]
    return max(values) if values else None


def _fp64_or_better(mine: dict[str, CaseResult], base: dict[str, CaseResult]) -> bool:
    """Every output at every case at least as close to FP64 as the unmutated kernel's."""
    if not mine:
        return False
    for case, result in mine.items():
        reference = base.get(case)
        if reference is None or result.error or set(result.fp64) != set(reference.fp64):
            return False
        for output, errors in result.fp64.items():
            for name in ("ulp_max", "ulp_p99", "max_abs_err"):
                value, theirs = errors.get(name), reference.fp64[output].get(name)
                if value is not None and not value <= (math.inf if theirs is None else theirs):
                    return False
    return True


def _baseline_failures(judged: Judged) -> dict[str, str]:
    failures = dict(judged.failed_cases)
    for case, result in judged.results.get(BASELINE, {}).items():
        if result.error:
            failures[case] = result.error
        elif result.failed:
            failures[case] = f"fails {', '.join(result.failed)}"
    return failures


def triage(edits: Sequence[Edit], judged: Judged, cases: Sequence[str], legitimate: dict[str, str],
           fp64_or_better: bool) -> list[MutantVerdict]:
    base = judged.results.get(BASELINE, {})
    verdicts = []
    for e in edits:
        mine = {c: r for c, r in judged.results.get(e.index, {}).items() if c in base and not base[c].error}
        v = MutantVerdict(e.index, e.line, e.edit, "", "", fp64_ulp_max=_worst(mine),
                          ulp_from_baseline=max((r.ulp_from_baseline for r in mine.values()), default=0.0))
        for case in cases:
            if judged.stopped.get(e.index, ("",))[0] == case:
                v.verdict, v.detail, v.killed_at = "contract", f"{case}: {judged.stopped[e.index][1]}", case
                break
            r = mine.get(case)
            if r is None:
                continue
            if r.error:
                v.verdict, v.detail, v.killed_at = "contract", f"{case}: {r.error}", case
                break
            new = sorted(set(r.failed) - set(base[case].failed))
            if new:
                v.verdict, v.detail, v.killed_at = "gate", f"{case}: {', '.join(new)}", case
                break
        if not v.verdict:
            if mine and all(r.identical for r in mine.values()):
                v.verdict, v.detail = "equivalent", "bit-identical at every case"
            elif e.edit in legitimate:
                v.verdict, v.detail = "equivalent", f"a legitimate choice: {legitimate[e.edit]}"
            elif fp64_or_better and _fp64_or_better(mine, base):
                v.verdict, v.detail = "equivalent", "FP64-or-better: no output further from FP64 at any case"
            else:
                v.verdict = "survived"
                v.detail = (f"{v.fp64_ulp_max:.3g} BF16 ULP from FP64 at worst; p99 {v.ulp_from_baseline:.3g} "
                            f"ULP from the unmutated kernel" if v.fp64_ulp_max is not None else
                            "judged at no case")
        verdicts.append(v)
    return verdicts


def score_kernel(address: str, operator: Operator, cases: Sequence[CaseSpec], *, plan: MutationPlan | None = None,
                 limit: int | None = None, timeout: float = 60.0, fp64_or_better: bool = True,
                 batch: int = BATCH, progress: bool = True,
                 legitimate_here: Mapping[str, str] | None = None,
                 survivors_at: Sequence[CaseSpec] = ()) -> MutationScore:
    """Mutate the function at ``address`` and judge each mutant by ``operator``'s gate at ``cases``
    (in the order given). ``legitimate_here``: edits that are legitimate in this kernel only (an
    edit and its reason), beside the operator's ``LEGITIMATE``: e.g. a product made a BF16 GEMM
    is PyTorch's own path where its operands are BF16 values already, and a loss of precision
    where they are not. ``survivors_at``: cases (large ones) at which the mutants that survived
    ``cases`` are judged afterwards, with the unmutated kernel: the equivalent ones (bit-identical
    or legitimate) are not run there, so a pass holds the outputs of a few kernels, not of every
    mutant still alive (at M=220000 about 1.1 GB each)."""
    kernel = read_kernel(address)
    edits = mutants(kernel.function, plan or plan_for(operator, kernel.function, {**kernel.globals, **kernel.closure}))[:limit]
    legitimate = {**LEGITIMATE.get(operator.name, {}), **(legitimate_here or {})}
    start = time.perf_counter()
    meter = Progress(len(edits) * len(cases), len(edits)) if progress else None
    judged = judge(address, {e.index: e.source for e in edits}, cases, timeout=timeout, batch=batch,
                   progress=meter)
    ids = [c.id for c in cases]
    verdicts = triage(edits, judged, ids, legitimate, fp64_or_better)
    alive = {v.index for v in verdicts if v.verdict == "survived"}
    if survivors_at and alive:
        later = [e for e in edits if e.index in alive]
        meter = Progress(len(later) * len(survivors_at), len(later)) if progress else None
        more = judge(address, {e.index: e.source for e in later}, survivors_at, timeout=timeout, batch=batch,
                     progress=meter)
        for i, per_case in more.results.items():
            judged.results.setdefault(i, {}).update(per_case)
        judged.stopped.update(more.stopped)
        judged.failed_cases.update(more.failed_cases)
        ids += [c.id for c in survivors_at]
        verdicts = triage(edits, judged, ids, legitimate, fp64_or_better)
    return MutationScore(address, operator.name, ids, verdicts,
                         baseline_failures=_baseline_failures(judged),
                         baseline_fp64_ulp_max=_worst(judged.results.get(BASELINE, {})),
                         seconds=time.perf_counter() - start)
