"""The backend contract: what a fused SwiGLU backward kernel takes and returns.

A backend is any callable

    backend(*, x, w_g, w_fc, dy, g, fc) -> Mapping[str, torch.Tensor]

taking BF16 tensors ``x [M,K]``, ``w_g [K,N]``, ``w_fc [K,N]``, ``dy [M,N]``,
``g [M,N]``, ``fc [M,N]`` and returning ``dg, dfc [M,N]``, ``db_g, db_fc [1,N]``,
``dw_g, dw_fc [K,N]`` and ``dx [M,K]``, all BF16 on the inputs' device.
Writing one needs nothing from this project: torch only.

This module checks both sides of that contract and raises ``ContractError``
with a message that names the backend and the offending tensor.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

INPUT_NAMES = ("x", "w_g", "w_fc", "dy", "g", "fc")
OUTPUT_NAMES = ("dg", "dfc", "db_g", "db_fc", "dw_g", "dw_fc", "dx")
ROW_OUTPUTS = ("dg", "dfc", "dx")  # one row of output per row of input: streamable over M
DTYPE = torch.bfloat16


class ContractError(ValueError):
    """Inputs or outputs that break the backend contract."""


def input_shapes(m: int, k: int, n: int) -> dict[str, tuple[int, int]]:
    return {"x": (m, k), "w_g": (k, n), "w_fc": (k, n), "dy": (m, n), "g": (m, n), "fc": (m, n)}


def output_shapes(m: int, k: int, n: int) -> dict[str, tuple[int, int]]:
    return {"dg": (m, n), "dfc": (m, n), "db_g": (1, n), "db_fc": (1, n),
            "dw_g": (k, n), "dw_fc": (k, n), "dx": (m, k)}


def dims(inputs: Mapping[str, torch.Tensor]) -> tuple[int, int, int]:
    """(M, K, N) of validated inputs."""
    m, k = inputs["x"].shape
    return m, k, inputs["w_g"].shape[1]


def validate_inputs(inputs: Mapping[str, torch.Tensor], *, allow_nonfinite: bool = False) -> tuple[int, int, int]:
    """Check names, dtype, rank, agreeing shapes, one device, M >= 1 and finiteness.

    Returns (M, K, N). Non-finite inputs are rejected unless asked for: a NaN in
    an input makes every verdict downstream meaningless.
    """
    missing = [n for n in INPUT_NAMES if n not in inputs]
    extra = [n for n in inputs if n not in INPUT_NAMES]
    if missing or extra:
        raise ContractError(f"inputs: missing {missing}, unexpected {extra}; expected exactly {list(INPUT_NAMES)}")
    for name in INPUT_NAMES:
        t = inputs[name]
        if not isinstance(t, torch.Tensor):
            raise ContractError(f"input {name!r} is {type(t).__name__}, expected a torch.Tensor")
        if t.dtype != DTYPE:
            raise ContractError(f"input {name!r} has dtype {t.dtype}, expected {DTYPE}")
        if t.dim() != 2:
            raise ContractError(f"input {name!r} has shape {tuple(t.shape)}, expected a 2-D tensor")
    m, k = inputs["x"].shape
    n = inputs["w_g"].shape[1]
    if m == 0:
        raise ContractError("M = 0: the operator has no rows to differentiate; use M >= 1")
    if k == 0 or n == 0:
        raise ContractError(f"K = {k}, N = {n}: both must be >= 1")
    for name, shape in input_shapes(m, k, n).items():
        if tuple(inputs[name].shape) != shape:
            raise ContractError(
                f"input {name!r} has shape {tuple(inputs[name].shape)}, expected {shape} "
                f"(M={m} from x, K={k} from x, N={n} from w_g)")
    devices = {str(inputs[n_].device) for n_ in INPUT_NAMES}
    if len(devices) != 1:
        raise ContractError(f"inputs live on several devices: {sorted(devices)}")
    if not allow_nonfinite:
        for name in INPUT_NAMES:
            bad = ~torch.isfinite(inputs[name])
            if bool(bad.any()):
                idx = tuple(int(i) for i in bad.nonzero()[0])
                raise ContractError(
                    f"input {name!r} holds {int(bad.sum())} non-finite values (first at index {idx}: "
                    f"{float(inputs[name][idx])}); goldens and verdicts need finite inputs")
    return m, k, n


def validate_outputs(backend: str, outputs: object, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Check what a backend returned: a mapping with the seven BF16 outputs of the right shapes
    on the inputs' device. Returns a plain dict of exactly those seven tensors."""
    if not isinstance(outputs, Mapping):
        raise ContractError(f"backend {backend!r} returned {type(outputs).__name__}, expected a mapping of "
                            f"{list(OUTPUT_NAMES)}")
    missing = [n for n in OUTPUT_NAMES if n not in outputs]
    if missing:
        raise ContractError(f"backend {backend!r} did not return {missing} "
                            f"(returned {sorted(repr(k) for k in outputs)})")
    m, k, n = dims(inputs)
    device = inputs["x"].device
    checked = {}
    for name, shape in output_shapes(m, k, n).items():
        t = outputs[name]
        if not isinstance(t, torch.Tensor):
            raise ContractError(f"backend {backend!r} output {name!r} is {type(t).__name__}, expected a torch.Tensor")
        if t.layout != torch.strided:
            raise ContractError(f"backend {backend!r} output {name!r} has layout {t.layout}, expected a dense "
                                f"(strided) tensor")
        if t.dtype != DTYPE:
            raise ContractError(f"backend {backend!r} output {name!r} has dtype {t.dtype}, expected {DTYPE}")
        if tuple(t.shape) != shape:
            raise ContractError(f"backend {backend!r} output {name!r} has shape {tuple(t.shape)}, expected {shape}")
        if t.device != device:
            raise ContractError(f"backend {backend!r} output {name!r} is on {t.device}, inputs are on {device}")
        checked[name] = t
    return checked


def clone_inputs(inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: inputs[name].clone() for name in INPUT_NAMES}


def input_digests(inputs: Mapping[str, torch.Tensor]) -> dict[str, tuple]:
    """Per input: shape, dtype and a BLAKE2b digest of its raw bits (on the CPU), so that a write
    into an input can be detected without holding a copy of it (1.6 GB at the article's case)."""
    import hashlib
    out = {}
    for name in INPUT_NAMES:
        t = inputs[name].detach().contiguous()
        bits = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t   # numpy has no bfloat16
        out[name] = (tuple(t.shape), str(t.dtype), hashlib.blake2b(bits.cpu().numpy(), digest_size=16).hexdigest())
    return out


def changed_since(digests: Mapping[str, tuple], inputs: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of inputs whose digest (``input_digests``) is no longer the one taken before."""
    now = input_digests(inputs)
    return [name for name in INPUT_NAMES if now[name] != digests[name]]


def mutated_inputs(originals: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of inputs whose bits changed (NaN-aware: compares raw bits)."""
    changed = []
    for name in INPUT_NAMES:
        a, b = originals[name], after[name]
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.view(torch.int16), b.view(torch.int16)):
            changed.append(name)
    return changed


class BackendUnsupported(Exception):
    """Raised by a backend that cannot run this case on this machine (too large for a
    CPU interpreter, say). The case matrix records a skip with this reason; it is
    never counted as a pass."""
