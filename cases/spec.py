"""A case of the matrix as data, and its inputs from its own seeded generator or a user's file.

Inputs are drawn on the CPU from ``torch.Generator().manual_seed(...)`` in float32,
scaled per profile and rounded to BF16, then moved: every machine and device
sees bit-identical inputs for the same case. A case can instead read its inputs from a
safetensors file (``inputs_case``: activations captured in a model, no pickle); its id names
the file's SHA-256, so the same bits give the same case anywhere and a changed file is refused.
"""
from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kernels.contract import INPUT_NAMES, ContractError, validate_inputs


@dataclass(frozen=True)
class CaseSpec:
    m: int
    k: int
    n: int
    scale: str
    seed: int
    inputs_file: str | None = None     # a safetensors file of the inputs; then scale is "file_<sha256[:12]>"

    @property
    def id(self) -> str:       # parsed back by cases.case_id.CASE_ID
        return f"M{self.m}-K{self.k}-N{self.n}-{self.scale}-s{self.seed}"

    def asdict(self) -> dict:
        d = {**asdict(self), "id": self.id}
        if self.inputs_file is None:
            del d["inputs_file"]
        return d


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


def inputs_case(path: str) -> CaseSpec:
    """The case of a safetensors file holding the operator's inputs by name (BF16, the
    contract's shapes): its dimensions from the tensors, its id from the file's SHA-256."""
    file = Path(path).resolve()
    tensors = _load_file(file)
    try:
        m, k, n = validate_inputs(tensors)
    except ContractError as exc:
        raise InputsFileError(f"--inputs {path}: {exc}") from None
    return CaseSpec(m, k, n, f"{FILE_SCALE_PREFIX}{_sha256(file)[:12]}", 0, str(file))


def _randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def _seed_scale(gen, m, k, n):
    """The article's case: activations randn/sqrt(M), weights randn/sqrt(K). Each tensor is
    scaled in place and stored in BF16 as soon as it is drawn (the same bits as scaling a copy):
    at M=220000 one FP32 tensor (0.9 GB) is alive at a time instead of all four and a temporary
    (4 GB)."""
    a = 1 / math.sqrt(m)

    def draw(rows, cols, times=None, over=None):
        t = _randn(gen, rows, cols)
        return (t.mul_(times) if over is None else t.div_(over)).to(torch.bfloat16)

    return {"x": draw(m, k, a), "w_g": draw(k, n, over=math.sqrt(k)), "w_fc": draw(k, n, over=math.sqrt(k)),
            "dy": draw(m, n, a), "g": draw(m, n, a), "fc": draw(m, n, a)}


def _unit(gen, m, k, n):
    """Order-one activations: sigmoid(g) spans (0.1, 0.9), so the SiLU derivative is exercised
    (at the seed scale |g| ~ 2e-3 and sigmoid is 0.5 to three digits)."""
    return {"x": _randn(gen, m, k), "w_g": _randn(gen, k, n) / math.sqrt(k),
            "w_fc": _randn(gen, k, n) / math.sqrt(k), "dy": _randn(gen, m, n),
            "g": _randn(gen, m, n), "fc": _randn(gen, m, n)}


def _saturating(gen, m, k, n):
    """|g| up to ~240 (60 sigma): 14% of g above 88.7 overflow exp in FP32, where the
    article's sigmoid exp(g)/(1+exp(g)) becomes inf/inf = NaN; a stable sigmoid saturates to 1."""
    t = _unit(gen, m, k, n)
    t["g"] = t["g"] * 60
    # at least one element per tile-row block is beyond the overflow point, whatever the draw
    t["g"][::7, ::5] = 100.0
    return t


def _cancellation(gen, m, k, n):
    """Rows in pairs (2i, 2i+1) with the same x, g, fc and dy of opposite sign, 1% apart:
    db and dw are sums whose terms cancel to ~1% of their absolute sum."""
    t = _unit(gen, m, k, n)
    half = (m + 1) // 2
    for name in ("x", "g", "fc"):
        t[name] = t[name][:half].repeat_interleave(2, dim=0)[:m].contiguous()
    dy = t["dy"][:half]
    paired = torch.stack([dy, -dy * (1 + 0.01 * _randn(gen, half, n))], dim=1).reshape(2 * half, n)
    t["dy"] = paired[:m].contiguous()
    return t


def _tiny(gen, m, k, n):
    """dy near the bottom of the normal range (2^-124 ~ 4.7e-38): dg/dfc and db land among
    FP32/BF16 subnormals (below 2^-126 ~ 1.2e-38), where a flush-to-zero kernel differs."""
    t = _unit(gen, m, k, n)
    t["dy"] = t["dy"] * 2.0 ** -124
    return t


def _outliers(gen, m, k, n):
    """Unit scale plus 0.1% of dy and x entries multiplied by 2^10: a few huge terms dominate
    sums, stressing relative gates and per-tile accumulation."""
    t = _unit(gen, m, k, n)
    for name in ("dy", "x"):
        mask = torch.rand(t[name].shape, generator=gen) < 1e-3
        t[name] = torch.where(mask, t[name] * 1024.0, t[name])
    return t


SCALES = {"seed": _seed_scale, "unit": _unit, "saturating": _saturating,
          "cancellation": _cancellation, "tiny": _tiny, "outliers": _outliers}


def make_inputs(spec: CaseSpec, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Bit-identical BF16 inputs for ``spec`` on ``device`` (drawn on the CPU)."""
    if spec.inputs_file is not None:
        file = Path(spec.inputs_file)
        if not file.is_file() or f"{FILE_SCALE_PREFIX}{_sha256(file)[:12]}" != spec.scale:
            raise InputsFileError(f"case {spec.id}: {file} is missing or no longer the file the case was "
                                  f"planned from (its SHA-256 differs)")
        tensors = _load_file(file)
        validate_inputs(tensors)
        return {name: tensors[name].to(device) for name in INPUT_NAMES}
    if spec.scale not in SCALES:
        raise ValueError(f"unknown scale profile {spec.scale!r}; known: {sorted(SCALES)}")
    if spec.m < 1 or spec.k < 1 or spec.n < 1:
        raise ValueError(f"case {spec.id}: M, K, N must all be >= 1")
    # one generator per case, seeded from the case itself, never from global RNG state
    gen = torch.Generator(device="cpu").manual_seed(zlib.crc32(spec.id.encode()) ^ spec.seed)
    raw = SCALES[spec.scale](gen, spec.m, spec.k, spec.n)
    inputs = {name: raw.pop(name).to(torch.bfloat16).to(device) for name in INPUT_NAMES}
    validate_inputs(inputs)
    return inputs
