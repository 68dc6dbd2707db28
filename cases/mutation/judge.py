"""Run every mutant through the real gate at each case, in a child process the parent can kill.

Why a child process and not a per-mutant ``signal.alarm``: an alarm interrupts Python bytecode
only, so a mutant stuck inside one long torch or numpy call (a matmul of a mis-sized operand, a
Triton interpreter loop) would hold the tool past its timeout, and one that segfaults would take
the tool down with it. One child serves every mutant (torch and the kernel's module are imported
once: about 3 s here, more than a small case's mutant costs), announces each kernel call and its
end, and is killed and restarted only when a call overruns; its case is then evaluated again
without that mutant. The clock is the parent's: each mutant has ``timeout`` seconds of kernel
calls over all cases together.

Cases go in the order given; a mutant killed at one case is not run at the later ones, so with
cases sorted by size (``cases.mutation.score``) the case that kills it is the cheapest that can.
"""
from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from cases.mutation.worker import BASELINE, CaseDone, CaseFailed, CaseResult, End, Start, serve
from cases.spec import CaseSpec

BATCH = 40          # mutants compared in one golden pass (memory: 7 outputs each at the small cases)


@dataclass
class Judged:
    """Each kernel's result at each case it ran at (BASELINE: the unmutated kernel)."""
    results: dict[int, dict[str, CaseResult]] = field(default_factory=dict)     # index -> case -> result
    stopped: dict[int, tuple[str, str]] = field(default_factory=dict)   # index -> (case, why its process was stopped)
    failed_cases: dict[str, str] = field(default_factory=dict)                  # case -> why it judged nothing


class _Child:
    def __init__(self, address: str, sources: dict[int, str], batch: int):
        context = multiprocessing.get_context("spawn")
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=serve, args=(child_end, address, sources, batch), daemon=True)
        self.process.start()
        child_end.close()

    def stop(self, kill: bool = False) -> None:
        if not kill:
            try:
                self.conn.send(None)
                self.process.join(10)
            except (BrokenPipeError, OSError):
                pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class Progress:
    """``mutant i/N, elapsed, estimate`` on stderr, at most one line every ``every`` seconds. The
    estimate is of the calls left if every mutant still alive survives the cases left (an upper
    bound: most mutants die at the first case)."""

    def __init__(self, total_calls: int, mutants: int, stream=sys.stderr, every: float = 2.0):
        self.total, self.mutants, self.stream, self.every = max(total_calls, 1), mutants, stream, every
        self.done, self.start, self.last = 0, time.perf_counter(), 0.0

    def expect(self, calls_left: int) -> None:
        self.total = max(self.done + calls_left, 1)

    def call(self, index: int, case: str) -> None:
        self.done += 1
        now = time.perf_counter()
        if now - self.last < self.every and self.done < self.total:
            return
        self.last = now
        elapsed = now - self.start
        estimate = elapsed / self.done * self.total
        print(f"mutant {index + 1}/{self.mutants} at {case}, elapsed {elapsed:.0f} s, "
              f"estimate {estimate:.0f} s in all (at most)", file=self.stream, flush=True)


def judge(address: str, sources: dict[int, str], cases: Sequence[CaseSpec], *, timeout: float,
          batch: int = BATCH, progress: Progress | None = None) -> Judged:
    """Every mutant of ``sources`` (index -> the mutated function) and the unmutated kernel at each case."""
    judged = Judged()
    alive = sorted(sources)
    used = {i: 0.0 for i in [BASELINE, *alive]}      # seconds of kernel calls so far
    child = _Child(address, sources, batch)
    try:
        for n, spec in enumerate(cases):
            todo = list(alive)
            if progress is not None:
                progress.expect(len(alive) * (len(cases) - n))
            while True:
                child.conn.send((spec, todo))
                outcome, overran, why = _await(child, used, timeout, spec.id, progress)
                if overran is None:
                    break
                child.stop(kill=True)
                child = _Child(address, sources, batch)
                judged.stopped[overran] = (spec.id, why)
                if overran == BASELINE:       # the case cannot judge anyone
                    judged.failed_cases[spec.id] = f"the unmutated kernel {why}"
                    outcome = None
                    break
                todo.remove(overran)
                alive.remove(overran)
            if isinstance(outcome, CaseFailed):
                judged.failed_cases[spec.id] = outcome.error
            elif isinstance(outcome, CaseDone):
                for i, result in outcome.results.items():
                    judged.results.setdefault(i, {})[spec.id] = result
                base = outcome.results.get(BASELINE)
                killed = {i for i, r in outcome.results.items() if i != BASELINE and _kills(r, base)}
                alive = [i for i in alive if i not in killed]
    finally:
        child.stop()
    return judged


def _kills(result: CaseResult, baseline: CaseResult | None) -> bool:
    """A mutant is killed where it fails what the unmutated kernel passed at the same case."""
    if baseline is None or baseline.error:
        return False
    return bool(result.error) or bool(set(result.failed) - set(baseline.failed))


def _await(child: _Child, used: dict[int, float], timeout: float, case: str, progress):
    """(the child's answer for one case, None, None), or (None, index, why) of the kernel whose call
    overran or whose process died in it."""
    active, started = None, 0.0
    while True:
        wait = None if active is None else max(0.0, timeout - used[active] - (time.perf_counter() - started))
        if not child.conn.poll(wait):
            used[active] += time.perf_counter() - started
            return None, active, f"ran past its {timeout:g} s timeout"
        try:
            message = child.conn.recv()
        except (EOFError, ConnectionResetError):    # the child died (a segfault in a mutant, the OOM killer)
            if active is None:
                raise RuntimeError(f"the mutants' process died at case {case} between kernel calls") from None
            used[active] += time.perf_counter() - started
            return None, active, f"crashed its process (exit code {child.process.exitcode})"
        if isinstance(message, Start):
            active, started = message.index, time.perf_counter()
            if progress is not None and active != BASELINE:
                progress.call(active, case)
        elif isinstance(message, End):
            used[message.index] += time.perf_counter() - started
            active = None
        else:
            return message, None, None
