"""Known failures as data: ``cases/expectations/*.toml``, strict.

Each entry names a backend, a case-id pattern (fnmatch), an output (or "*") and
a golden layer (or "*"), and gives the measured cause. A listed failure that
stops failing fails its cell ("fixed: remove the entry"), so the file tracks
the truth.
"""
from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

EXPECTATIONS_DIR = Path(__file__).parent / "expectations"
REQUIRED = ("backend", "case", "output", "golden", "reason")


@dataclass(frozen=True)
class Expectation:
    backend: str
    case: str
    output: str
    golden: str
    reason: str
    source: str

    def matches(self, backend: str, case: str, output: str, golden: str) -> bool:
        return (fnmatch.fnmatchcase(backend, self.backend) and fnmatch.fnmatchcase(case, self.case)
                and fnmatch.fnmatchcase(output, self.output) and fnmatch.fnmatchcase(golden, self.golden))


def load(directory: Path = EXPECTATIONS_DIR) -> list[Expectation]:
    entries = []
    for path in sorted(directory.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for i, raw in enumerate(data.get("expected", [])):
            missing = [k for k in REQUIRED if not str(raw.get(k, "")).strip()]
            if missing:
                raise ValueError(f"{path.name}: entry {i} lacks {missing}; every known failure needs all of {REQUIRED}")
            entries.append(Expectation(*(str(raw[k]) for k in REQUIRED), source=f"{path.name}#{i}"))
    return entries


def find(entries: list[Expectation], backend: str, case: str, output: str, golden: str) -> Expectation | None:
    return next((e for e in entries if e.matches(backend, case, output, golden)), None)
