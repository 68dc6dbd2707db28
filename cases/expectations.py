"""Known failures as data: ``cases/expectations/*.toml``, strict.

Each entry names a backend, a case-id pattern (fnmatch), an output (or "*") and
a golden layer (or "*"), and gives the measured cause; an optional ``device``
("cpu", "cuda", default "*") limits it to where it was measured, since failures
that hang on FP32 summation order are a property of one device's kernels. A listed failure that
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
    device: str = "*"

    def matches(self, backend: str, case: str, output: str, golden: str, device: str = "cpu") -> bool:
        return (fnmatch.fnmatchcase(backend, self.backend) and fnmatch.fnmatchcase(case, self.case)
                and fnmatch.fnmatchcase(output, self.output) and fnmatch.fnmatchcase(golden, self.golden)
                and fnmatch.fnmatchcase(device.split(":")[0], self.device))


def load(directory: Path = EXPECTATIONS_DIR) -> list[Expectation]:
    entries = []
    for path in sorted(directory.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for i, raw in enumerate(data.get("expected", [])):
            missing = [k for k in REQUIRED if not str(raw.get(k, "")).strip()]
            if missing:
                raise ValueError(f"{path.name}: entry {i} lacks {missing}; every known failure needs all of {REQUIRED}")
            entries.append(Expectation(*(str(raw[k]) for k in REQUIRED), source=f"{path.name}#{i}",
                                       device=str(raw.get("device", "*"))))
    return entries


def find(entries: list[Expectation], backend: str, case: str, output: str, golden: str,
         device: str = "cpu") -> Expectation | None:
    return next((e for e in entries if e.matches(backend, case, output, golden, device)), None)
