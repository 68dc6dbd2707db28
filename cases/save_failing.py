"""``--save-failing DIR``: what a failing cell needs to be looked at and rerun on another machine.

For every cell (case, backend) whose gated output failed, errored, crashed or timed out, the
folder ``DIR/<case id>/<backend>/`` holds:

* ``inputs.safetensors``: the case's inputs by the operator's input names, BF16 on the CPU,
  exactly what ``--inputs FILE.safetensors`` reads (``cases.spec.inputs_case``);
* ``outputs.safetensors``: the backend's outputs, when it returned any (a crashed, timed-out or
  refused call returned none);
* ``record.json``: the cell's records as the run wrote them;
* ``rerun.sh``: the verdict again from those files alone,
  ``pytest cases/ --profile none --inputs .../inputs.safetensors --backend NAME``.

The rerun's case is named by the file's SHA-256 instead of the scale profile and seed, and is
judged by the same gate on the same bits.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from runs.results import SCHEMA_VERSION, _safe, write_atomic, write_text_atomic

# A cell's statuses that are saved: its numbers or its call went wrong. A known failure that
# passed (unexpected_pass) fails its test, but its outputs are right: nothing to look at.
FAILING = ("fail", "error", "crashed", "timed_out")
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def is_failing(records: Iterable[Mapping]) -> bool:
    """A cell's records: a gated output failed, or the cell's one record is an error, crash or timeout."""
    return any((r.get("gated") or r.get("output") == "*") and r.get("status") in FAILING for r in records)


def _folder_name(name: str) -> str:
    """A case id or backend name as it is when it is made of letters, digits and ``_.:-`` and does
    not begin with ``_`` or ``.`` (every registered name and ``package.module:callable`` path);
    otherwise ``_`` and ``runs.results``' file name of it, each other character as its code point:
    distinct names stay distinct, and none can climb out of ``DIR`` (``..``)."""
    return name if re.fullmatch(r"[A-Za-z0-9:-][A-Za-z0-9_.:-]*", name) else "_" + _safe(name)


def cell_folder(root: str | os.PathLike, case: str, backend: str) -> Path:
    """``root/<case id>/<backend>/``."""
    return Path(root) / _folder_name(case) / _folder_name(backend)


def _cpu(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}


def rerun_script(inputs_file: str, backend: str, verdict_options: Sequence[str]) -> str:
    """A shell script that reruns the cell's verdict on ``inputs_file`` (beside the script); the
    project and Python it was saved from are defaults, replaced by $SWIGLU_ACCURACY_ROOT and $PYTHON
    on another machine; extra pytest options pass through."""
    args = ["-m", "pytest", "cases/", "-p", "no:xdist", "--profile", "none",
            "--inputs", "INPUTS", "--backend", backend, *verdict_options]
    command = " ".join('"$here/' + inputs_file + '"' if a == "INPUTS" else shlex.quote(a) for a in args)
    return ("#!/bin/sh\n"
            f"# Reruns the verdict of backend {backend} on the inputs saved beside this script.\n"
            'here=$(cd "$(dirname "$0")" && pwd)\n'
            f'cd "${{SWIGLU_ACCURACY_ROOT:-{PROJECT_ROOT}}}" || exit 2\n'
            f'exec "${{PYTHON:-{sys.executable}}}" {command} "$@"\n')


def save_failing_cell(root: str | os.PathLike, *, case: str, backend: str, inputs: Mapping[str, torch.Tensor],
                      outputs: Mapping[str, torch.Tensor] | None, records: list[dict],
                      verdict_options: Sequence[str]) -> Path:
    """Write one failing cell's folder (see the module); returns it."""
    folder = cell_folder(root, case, backend)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(_cpu(inputs), str(folder / "inputs.safetensors"))
    if outputs:
        save_file(_cpu(outputs), str(folder / "outputs.safetensors"))
    write_atomic(folder / "record.json", {"schema": SCHEMA_VERSION, "records": records})
    script = folder / "rerun.sh"
    write_text_atomic(script, rerun_script("inputs.safetensors", backend, verdict_options))
    script.chmod(0o755)
    return folder
