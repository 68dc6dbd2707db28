"""A case of the matrix as data, and its inputs from its own seeded generator or a user's file.

Inputs are drawn on the CPU from ``torch.Generator().manual_seed(...)`` in float32,
scaled per profile and rounded to BF16, then moved: every machine and device
sees bit-identical inputs for the same case. A case can instead read its inputs from a
safetensors file (``inputs_case``: activations captured in a model, no pickle); its id names
the file's SHA-256, so the same bits give the same case anywhere and a changed file is refused.
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

import operators
from contract.backend import ContractError, validate_inputs
from contract.operator import Operator
from contract.records import case_id


@dataclass(frozen=True, init=False)
class CaseSpec:
    """A case of an operator: its dimension sizes in its declared order (SwiGLU backward: M, K,
    N), a scale profile and a seed; ``CaseSpec(2048, 96, 200, "unit", 0)`` (the SwiGLU backward),
    ``CaseSpec(1025, 1024, "unit", 0, operator="rmsnorm_backward")``. ``operator``: a declaration,
    a registered name or an operator's module path, kept as the name ``operators.get`` finds it
    by, so a case is a plain, picklable value.
    Each dimension reads as an attribute by its lower-case name (``spec.m``, ``spec.k``)."""
    sizes: tuple[int, ...]
    scale: str
    seed: int
    inputs_file: str | None = None     # a safetensors file of the inputs; then scale is "file_<sha256[:12]>"
    operator: str = operators.DEFAULT

    def __init__(self, *args, sizes: tuple[int, ...] | None = None, scale: str | None = None,
                 seed: int | None = None, inputs_file: str | None = None,
                 operator: str | Operator | None = None):
        operator = operators.key(operator) if operator is not None else operators.DEFAULT
        declared = operators.get(operator)
        ndim = len(declared.dims)
        if sizes is None:
            sizes, args = args[:ndim], args[ndim:]
        rest = dict(zip(("scale", "seed", "inputs_file"), args))
        scale = rest.get("scale", scale)
        seed = rest.get("seed", seed)
        inputs_file = rest.get("inputs_file", inputs_file)
        if len(sizes) != ndim or scale is None or seed is None:
            raise TypeError(f"CaseSpec({', '.join(declared.dims)}, scale, seed[, inputs_file]); got sizes "
                            f"{tuple(sizes)}, scale {scale!r}, seed {seed!r}")
        object.__setattr__(self, "sizes", tuple(int(v) for v in sizes))
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "seed", seed)
        object.__setattr__(self, "inputs_file", inputs_file)
        object.__setattr__(self, "operator", operator)

    @property
    def declaration(self) -> Operator:
        """The operator this case is of."""
        return operators.get(self.operator)

    def inputs(self, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """Its inputs (``make_inputs``): what makes a case an input factory for another process
        (``kernels.isolated``)."""
        return make_inputs(self, device)

    def __getattr__(self, name: str) -> int:
        dim = name.upper()
        if name.startswith("_") or "sizes" not in self.__dict__ or "operator" not in self.__dict__:
            raise AttributeError(name)
        dims = self.declaration.dims
        if dim not in dims:
            raise AttributeError(name)
        return self.sizes[dims.index(dim)]

    @property
    def dim_sizes(self) -> dict[str, int]:
        return dict(zip(self.declaration.dims, self.sizes))

    @property
    def id(self) -> str:
        return case_id(self.dim_sizes, self.scale, self.seed)

    def asdict(self) -> dict:
        d = {**{dim.lower(): v for dim, v in self.dim_sizes.items()}, "scale": self.scale, "seed": self.seed}
        if self.inputs_file is not None:
            d["inputs_file"] = self.inputs_file
        return {**d, "id": self.id}


FILE_SCALE_PREFIX = "file_"


class InputsFileError(ValueError):
    """A --inputs file that cannot be a case: unreadable, not safetensors, wrong names, dtypes or shapes."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
        return load_file(str(path), device="cpu")
    except FileNotFoundError:
        raise InputsFileError(f"--inputs {path}: no such file") from None
    except Exception as exc:
        raise InputsFileError(f"--inputs {path}: not a readable safetensors file ({type(exc).__name__}: {exc})") \
            from None


def inputs_case(path: str, operator: str | Operator | None = None) -> CaseSpec:
    """The case of a safetensors file holding the operator's inputs by name (BF16, the
    contract's shapes): its dimensions from the tensors, its id from the file's SHA-256."""
    operator = operators.key(operator) if operator is not None else operators.DEFAULT
    file = Path(path).resolve()
    tensors = _load_file(file)
    try:
        sizes = validate_inputs(operators.get(operator), tensors)
    except ContractError as exc:
        raise InputsFileError(f"--inputs {path}: {exc}") from None
    return CaseSpec(*sizes, f"{FILE_SCALE_PREFIX}{_sha256(file)[:12]}", 0, str(file), operator=operator)


def make_inputs(spec: CaseSpec, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Bit-identical BF16 inputs for ``spec`` on ``device`` (drawn on the CPU)."""
    op = spec.declaration
    if spec.inputs_file is not None:
        file = Path(spec.inputs_file)
        if not file.is_file() or f"{FILE_SCALE_PREFIX}{_sha256(file)[:12]}" != spec.scale:
            raise InputsFileError(f"case {spec.id}: {file} is missing or no longer the file the case was "
                                  f"planned from (its SHA-256 differs)")
        tensors = _load_file(file)
        validate_inputs(op, tensors)
        return {name: tensors[name].to(device) for name in op.input_names}
    if spec.scale not in op.scales:
        raise ValueError(f"unknown scale profile {spec.scale!r}; known: {sorted(op.scales)}")
    if min(spec.sizes) < 1:
        raise ValueError(f"case {spec.id}: {', '.join(op.dims)} must all be >= 1")
    # one generator per case, seeded from the case itself, never from global RNG state
    gen = torch.Generator(device="cpu").manual_seed(zlib.crc32(spec.id.encode()) ^ spec.seed)
    raw = op.scales[spec.scale](gen, *spec.sizes)
    inputs = {name: raw.pop(name).to(torch.bfloat16).to(device) for name in op.input_names}
    validate_inputs(op, inputs)
    return inputs
