"""Progress of a long case's evaluation: what it is doing, rows done of M, elapsed, what is left.

The article's case takes minutes on 2 cores with nothing on the terminal meanwhile (M=220000 in
README's main command on a 2-core Xeon, measured: pypto's skip with its probe 4 s, torch-eager's
call 12 s, the golden pass and comparison about 236 s with the two served schedule emulations,
beside the other worker's cases). Each case's evaluation
writes lines to ``RUN/progress.log``, and only once it has run ``QUIET_SECONDS`` (the quick
matrix's small cases take 1-10 s and write nothing), then at most one every ``EVERY`` seconds,
plus a line at each stage's start and end:

    00:12:03 M220000-K512-N1024-seed-s0: backend torch-eager (1 of 3) called
    00:13:40 M220000-K512-N1024-seed-s0: backend torch-eager returned after 97 s
    00:14:10 M220000-K512-N1024-seed-s0: goldens and comparison: rows 40960 of 220000 (19%), 30 s, about 131 s left

Every worker appends to the same file: each line is one ``write`` of under ``PIPE_BUF`` bytes to
a file opened with ``O_APPEND``, so lines of different workers never interleave. The controller
follows the file on the terminal (``Follower``); ``tail -f RUN/progress.log`` follows a run from
another shell, or on a remote machine.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

FILE = "progress.log"
QUIET_SECONDS = 20.0      # a case evaluated within this says nothing
EVERY = 15.0              # seconds between two row-progress lines of one case
LINE_BYTES = 4000         # under Linux's PIPE_BUF (4096): one append, one line


def append_line(path: Path, text: str) -> None:
    """``text`` as one line appended to ``path`` in one write."""
    line = (text.replace("\n", " ")[:LINE_BYTES - 1] + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class CaseProgress:
    """One case's progress lines, sent to ``sink`` (a line without its time of day)."""

    def __init__(self, case: str, sink: Callable[[str], None], *, quiet: float = QUIET_SECONDS,
                 every: float = EVERY, clock: Callable[[], float] = time.perf_counter):
        self.case, self.sink, self.quiet, self.every, self.clock = case, sink, quiet, every, clock
        self.start = clock()
        self.last = -float("inf")
        self.stage_start = self.start
        self.stage_name = ""
        self.pending: list[str] = []     # the stage lines said while quiet: said once it is not

    def _say(self, text: str) -> None:
        line = f"{self.case}: {text}"
        if self.clock() - self.start < self.quiet:
            self.pending.append(line)
            return
        for held in self.pending[-2:]:   # what it was doing when it became slow, not its whole past
            self.sink(held)
        self.pending.clear()
        self.sink(line)

    def stage(self, name: str) -> None:
        """A stage begins (``backend X (1 of 3) called``, ``goldens and comparison``)."""
        self.stage_name, self.stage_start = name, self.clock()
        self._say(name)

    def stage_done(self, text: str) -> None:
        """The stage ends; ``text`` says how (``returned``, ``raised``): its seconds follow."""
        self._say(f"{text} after {self.clock() - self.stage_start:.0f} s")

    def rows(self, done: int, total: int) -> None:
        """``done`` of the case's ``total`` rows streamed in the current stage."""
        now = self.clock()
        if now - self.start < self.quiet or (now - self.last < self.every and done < total):
            return
        self.last = now
        elapsed = now - self.stage_start
        left = elapsed / done * (total - done) if done else float("nan")
        self._say(f"{self.stage_name}: rows {done} of {total} ({done / total:.0%}), {elapsed:.0f} s, "
                  f"about {left:.0f} s left")


def to_file(path: Path) -> Callable[[str], None]:
    """A sink appending each line to ``path``, with the time of day."""
    return lambda line: append_line(path, f"{time.strftime('%H:%M:%S')} {line}")


class Follower:
    """Prints the lines appended to ``path`` (by any worker) with ``write``, every ``period`` s,
    from a daemon thread; ``stop`` prints what is left."""

    def __init__(self, path: Path, write: Callable[[str], None], period: float = 5.0):
        self.path, self.write, self.period = path, write, period
        self.offset = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="progress-follower", daemon=True)

    def start(self) -> "Follower":
        self.thread.start()
        return self

    def _flush(self) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        complete = data[:data.rfind(b"\n") + 1]      # a line still being written waits
        self.offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            self.write("progress: " + line)

    def _run(self) -> None:
        while not self.done.wait(self.period):
            self._flush()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)
        self._flush()
