"""The backend contract: what a kernel of the operator under test takes and returns.

The names, shapes and dtype come from the operator's declaration (``contract.operator``), handed
to every check as a value; for the SwiGLU backward (``operators.swiglu_backward``):

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

import math
from collections.abc import Mapping

import torch

from contract.operator import Operator


class ContractError(ValueError):
    """Inputs or outputs that break the backend contract."""


def validate_inputs(operator: Operator, inputs: Mapping[str, torch.Tensor], *,
                    allow_nonfinite: bool = False) -> tuple[int, ...]:
    """Check names, dtype, rank, agreeing shapes, one device, M >= 1 and finiteness.

    Returns the dimension sizes (M, K, N). Non-finite inputs are rejected unless asked for: a NaN in
    an input makes every verdict downstream meaningless.
    """
    missing = [n for n in operator.input_names if n not in inputs]
    extra = [n for n in inputs if n not in operator.input_names]
    if missing or extra:
        raise ContractError(f"inputs: missing {missing}, unexpected {extra}; expected exactly {list(operator.input_names)}")
    for decl in operator.inputs:
        name, t = decl.name, inputs[decl.name]
        if not isinstance(t, torch.Tensor):
            raise ContractError(f"input {name!r} is {type(t).__name__}, expected a torch.Tensor")
        if t.dtype != operator.dtype:
            raise ContractError(f"input {name!r} has dtype {t.dtype}, expected {operator.dtype}")
        if t.dim() != len(decl.dims):
            raise ContractError(f"input {name!r} has shape {tuple(t.shape)}, expected a {len(decl.dims)}-D tensor")
    sizes = operator.sizes(inputs)
    m = sizes[operator.dims[0]]
    if m == 0:
        raise ContractError(f"{operator.dims[0]} = 0: the operator has no rows to differentiate; use "
                            f"{operator.dims[0]} >= 1")
    empty = [d for d in operator.dims[1:] if sizes[d] == 0]
    if empty:
        raise ContractError(", ".join(f"{d} = {sizes[d]}" for d in operator.dims[1:]) + ": all must be >= 1")
    origin = ", ".join(f"{d}={sizes[d]} from {t}" for d, (t, _) in operator.sizes_from.items())
    for name, shape in operator.input_shapes(sizes).items():
        if tuple(inputs[name].shape) != shape:
            raise ContractError(f"input {name!r} has shape {tuple(inputs[name].shape)}, expected {shape} ({origin})")
    devices = {str(inputs[n_].device) for n_ in operator.input_names}
    if len(devices) != 1:
        raise ContractError(f"inputs live on several devices: {sorted(devices)}")
    if not allow_nonfinite:
        for name in operator.input_names:
            # one min/max pass (NaN and +-inf propagate into it): 0.011 s against isfinite's 0.32 s
            # for 28M BF16 elements on one thread; the element-wise mask only to name the first culprit
            t = inputs[name]
            if t.numel() == 0 or all(math.isfinite(float(v)) for v in torch.aminmax(t)):
                continue
            bad = ~torch.isfinite(t)
            if bool(bad.any()):
                idx = tuple(int(i) for i in bad.nonzero()[0])
                raise ContractError(
                    f"input {name!r} holds {int(bad.sum())} non-finite values (first at index {idx}: "
                    f"{float(inputs[name][idx])}); goldens and verdicts need finite inputs")
    return tuple(sizes.values())


def validate_outputs(operator: Operator, backend: str, outputs: object,
                     inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Check what a backend returned: a mapping with the operator's declared outputs, in its dtype,
    of the right shapes, on the inputs' device. Returns a plain dict of detached copies of exactly
    those tensors, taken when it is called (right after the backend returns)."""
    if not isinstance(outputs, Mapping):
        raise ContractError(f"backend {backend!r} returned {type(outputs).__name__}, expected a mapping of "
                            f"{list(operator.output_names)}")
    missing = [n for n in operator.output_names if n not in outputs]
    if missing:
        raise ContractError(f"backend {backend!r} did not return {missing} "
                            f"(returned [{', '.join(sorted(repr(k) for k in outputs))}])")
    device = inputs[operator.input_names[0]].device
    checked = {}
    for name, shape in operator.output_shapes(operator.sizes(inputs)).items():
        t = outputs[name]
        if not isinstance(t, torch.Tensor):
            raise ContractError(f"backend {backend!r} output {name!r} is {type(t).__name__}, expected a torch.Tensor")
        if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            # a subclass's __torch_function__ would run inside every comparison the gate makes
            raise ContractError(f"backend {backend!r} output {name!r} is a {type(t).__module__}.{type(t).__name__}, "
                                f"a torch.Tensor subclass: return a plain tensor")
        if t.layout != torch.strided:
            raise ContractError(f"backend {backend!r} output {name!r} has layout {t.layout}, expected a dense "
                                f"(strided) tensor")
        if t.dtype != operator.output_dtype(name):
            raise ContractError(f"backend {backend!r} output {name!r} has dtype {t.dtype}, "
                                f"expected {operator.output_dtype(name)}")
        if tuple(t.shape) != shape:
            raise ContractError(f"backend {backend!r} output {name!r} has shape {tuple(t.shape)}, expected {shape}")
        if t.device != device:
            raise ContractError(f"backend {backend!r} output {name!r} is on {t.device}, inputs are on {device}")
        # A copy taken now is what the gate judges: a kernel whose threads (or stream) still write
        # into its buffers after it returned is judged on what it returned. Detached: a graph
        # attached to an output (requires_grad) is not the kernel's result and cannot cross processes.
        checked[name] = t.detach().clone()
    return checked


def clone_inputs(inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in inputs.items()}


def input_digests(inputs: Mapping[str, torch.Tensor]) -> dict[str, tuple]:
    """Per input: shape, dtype and a BLAKE2b digest of its raw bits (on the CPU), so that a write
    into an input can be detected without holding a copy of it (1.6 GB at the article's case)."""
    import hashlib
    out = {}
    for name, t in inputs.items():
        t = t.detach().contiguous()
        bits = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t   # numpy has no bfloat16
        out[name] = (tuple(t.shape), str(t.dtype), hashlib.blake2b(bits.cpu().numpy(), digest_size=16).hexdigest())
    return out


def changed_since(digests: Mapping[str, tuple], inputs: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of inputs whose digest (``input_digests``) is no longer the one taken before."""
    now = input_digests(inputs)
    return [name for name in digests if now.get(name) != digests[name]]


def mutated_inputs(originals: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> list[str]:
    """Names of inputs whose bits changed (NaN-aware: compares raw bits)."""
    changed = []
    for name in originals:
        a, b = originals[name], after[name]
        if a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.view(torch.int16), b.view(torch.int16)):
            changed.append(name)
    return changed


class BackendUnsupported(Exception):
    """Raised by a backend that cannot run this case on this machine (too large for a
    CPU interpreter, say). The case matrix records a skip with this reason; it is
    never counted as a pass."""
