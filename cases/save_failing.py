"""``--save-failing DIR``: what a failing cell needs to be looked at and rerun on another machine.

For every cell (case, backend) whose gated output failed, errored, crashed or timed out, the
folder ``DIR/<case id>/<backend>/`` holds:

* ``inputs.safetensors``: the case's inputs by the operator's input names, BF16 on the CPU,
  exactly what ``--inputs FILE.safetensors`` reads (``cases.spec.inputs_case``);
* ``outputs.safetensors``: the backend's outputs, when it returned any (a crashed, timed-out or
  refused call returned none);
* ``record.json``: the cell's records as the run wrote them;
* ``rerun.sh``: the verdict again from those files alone,
  ``pytest cases/ --profile none --inputs .../inputs.safetensors --backend NAME``;
  ``rerun.sh --saved-outputs`` judges the saved outputs themselves instead of calling the backend
  (``saved_outputs`` as the backend): the verdict of these very bits on a machine that has
  neither the kernel nor its library, or on another CPU kind.

The rerun's case is named by the file's SHA-256 instead of the scale profile and seed, and is
judged by the same gate on the same bits. The goldens are FP32 and FP64 arithmetic, which the
CPU's BF16 instructions do not touch: the saved outputs judged under ``ONEDNN_MAX_CPU_ISA=AVX2``
(oneDNN's BF16 GEMM without ``vdpbf16ps``, which changes torch's BF16 results here) get the same
records bit for bit (``tests/core/test_save_failing.py``); a backend called again may not, where
its own BF16 arithmetic depends on the CPU.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from runs.results import SCHEMA_VERSION, _safe, write_atomic, write_text_atomic

# A cell's statuses that are saved: its numbers or its call went wrong. A known failure that
# passed (unexpected_pass) fails its test, but its outputs are right: nothing to look at.
FAILING = ("fail", "error", "crashed", "timed_out")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# ``rerun.sh --saved-outputs`` judges the outputs saved beside it through this backend, their
# folder named by this variable (a folder's path holds the backend's ':' and cannot be on sys.path)
SAVED_OUTPUTS_BACKEND = "cases.save_failing:saved_outputs"
SAVED_OUTPUTS_DIR = "ACCURACY_SAVED_OUTPUTS"


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


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.detach().cpu().contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def saved_outputs(**given: torch.Tensor) -> dict[str, torch.Tensor]:
    """The backend of ``rerun.sh --saved-outputs``: the outputs saved in the folder ``$ACCURACY_SAVED_OUTPUTS``
    names (copies), for the inputs saved beside them alone, bit for bit; other inputs are refused,
    naming the ones that differ."""
    where = os.environ.get(SAVED_OUTPUTS_DIR)
    if not where:
        raise ValueError(f"${SAVED_OUTPUTS_DIR} names no folder of saved outputs (rerun.sh --saved-outputs sets it)")
    folder = Path(where)
    inputs = load_file(str(folder / "inputs.safetensors"))
    differ = sorted(n for n in set(inputs) | set(given)
                    if n not in inputs or n not in given or not _same_bits(given[n], inputs[n]))
    if differ:
        raise ValueError(f"the outputs saved in {folder} are those of its saved inputs; these inputs "
                         f"differ from them: {differ}")
    return load_file(str(folder / "outputs.safetensors"))


def rerun_script(inputs_file: str, backend: str, verdict_options: Sequence[str], outputs_saved: bool) -> str:
    """A shell script that reruns the cell's verdict on ``inputs_file`` (beside the script); the
    project and Python it was saved from are defaults, replaced by $SWIGLU_ACCURACY_ROOT and $PYTHON
    on another machine; ``--saved-outputs`` as its first argument judges the saved outputs instead
    of calling ``backend``; extra pytest options pass through."""
    args = ["-m", "pytest", "cases/", "-p", "no:xdist", "--profile", "none",
            "--inputs", "INPUTS", "--backend", "BACKEND", *verdict_options]
    words = {"INPUTS": '"$here/' + inputs_file + '"', "BACKEND": '"$backend"'}
    command = " ".join(words.get(a, shlex.quote(a)) for a in args)
    if outputs_saved:
        replay = (f"  backend={shlex.quote(SAVED_OUTPUTS_BACKEND)}\n"
                  f'  {SAVED_OUTPUTS_DIR}="$here"; export {SAVED_OUTPUTS_DIR}\n')
    else:
        replay = '  echo "no outputs were saved for this cell: its call returned none" >&2; exit 2\n'
    return ("#!/bin/sh\n"
            f"# Reruns the verdict of backend {backend} on the inputs saved beside this script;\n"
            "# with --saved-outputs first, the verdict of the outputs saved beside it.\n"
            'here=$(cd "$(dirname "$0")" && pwd)\n'
            f"backend={shlex.quote(backend)}\n"
            'if [ "${1:-}" = --saved-outputs ]; then\n'
            '  shift\n'
            f"{replay}"
            'fi\n'
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
    write_text_atomic(script, rerun_script("inputs.safetensors", backend, verdict_options, bool(outputs)))
    script.chmod(0o755)
    return folder
