"""A schedule emulation is served from the case's golden pass, not called (``goldens.emulation``):
its records are the records of calling it, and nothing else is served."""
from __future__ import annotations

from cases.evaluate import evaluate_case, records_for
from cases.spec import CaseSpec
from goldens.emulation import ScheduleEmulation, served_schedule
from kernels.registry import Backend, resolve
from operators.swiglu_backward import OPERATOR as SWIGLU
from operators.swiglu_backward.schedule import ARTICLE, HARDENED

SPEC = CaseSpec(3000, 96, 200, "seed", 0)
NAMES = ("torch-eager", "article-schedule-emulated", "hardened-schedule-emulated")


def _called(b: Backend) -> Backend:
    """The same kernel behind a plain function: called like any backend."""
    def kernel(**inputs):
        return b.fn(**inputs)
    kernel.schedule = b.fn.schedule
    return Backend(b.name, kernel)


def _records(outcome, names):
    return {n: [{k: v for k, v in r.items() if k not in ("seconds", "served")} for r in records_for(outcome, n)]
            for n in names}


def test_served_records_are_the_called_ones():
    backends = [resolve(SWIGLU, n) for n in NAMES]
    served = evaluate_case(SPEC, backends)
    called = evaluate_case(SPEC, [backends[0], *map(_called, backends[1:])])
    assert [served.runs[n].served for n in NAMES] == [None, "tiled:article", "tiled:hardened"]
    assert not any(r.served for r in called.runs.values())
    assert _records(served, NAMES) == _records(called, NAMES)
    assert all(r["served"] == "tiled:article" for r in records_for(served, NAMES[1]))


def test_served_without_diagnosis_gives_the_called_verdicts():
    """Without diagnosis the pass has no tiled layer of its own: the served schedule's is added."""
    from accuracy.compare import compare_case
    from cases.spec import make_inputs
    inputs = make_inputs(SPEC)
    emulation = resolve(SWIGLU, "article-schedule-emulated").fn
    served = compare_case(SWIGLU, inputs, {}, {"e": ARTICLE}, served={"e": ARTICLE}, diagnose=False)
    called = compare_case(SWIGLU, inputs, {"e": emulation(**inputs)}, {"e": ARTICLE}, diagnose=False)
    assert served["backends"] == called["backends"]


def test_kept_outputs_are_called():
    """--save-failing keeps a failing cell's outputs: an emulation is then called."""
    outcome = evaluate_case(SPEC, [resolve(SWIGLU, "article-schedule-emulated")], keep_outputs=True, benchmark=None)
    run = outcome.runs["article-schedule-emulated"]
    assert run.served is None and run.outputs is not None


class _Shifted(ScheduleEmulation):
    """Declares itself an emulation and returns something else."""
    __slots__ = ()

    def __call__(self, **inputs):
        return {o: t * 1.5 for o, t in super().__call__(**inputs).items()}


def test_only_the_emulation_itself_is_served():
    """A subclass may return anything: it is called and judged by what it returns."""
    shifted = _Shifted(SWIGLU, HARDENED, "shifted")
    assert served_schedule(shifted, SWIGLU) is None
    assert served_schedule(ScheduleEmulation(SWIGLU, HARDENED, "h"), SWIGLU) is HARDENED
    outcome = evaluate_case(SPEC, [Backend("shifted", shifted)], benchmark=None)
    assert outcome.runs["shifted"].served is None
    assert not all(v.passed for v in outcome.verdicts["shifted"].values())


def test_an_emulation_of_another_operator_is_called():
    from operators.rmsnorm_backward import OPERATOR as RMSNORM
    from operators.rmsnorm_backward.schedule import TILED_BF16
    assert served_schedule(ScheduleEmulation(RMSNORM, TILED_BF16, "t"), SWIGLU) is None
    assert served_schedule(resolve(RMSNORM, "tiled-emulation").fn, RMSNORM) is TILED_BF16
