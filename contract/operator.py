"""An operator under test, declared as data: its dimensions, inputs and outputs with their kinds.

The framework reads names, shapes and kinds from here and nowhere else: the backend contract
(``contract.backend``) checks a backend's inputs and outputs against the declaration, and an
output's kind says how the golden pass produces it and which allowance the gate gives it:

* ``rows``:        one output row per input row (streamable over M);
* ``sum_over_m``:  a sum over the M rows of a row quantity (a bias gradient, [1, N]);
* ``contraction``: a sum over the M rows of an outer product (a weight gradient, [K, N]).

A reduction names the kernel whose tile cuts it (the article's b kernel for db, w for dw): a
schedule declares one tile per kernel.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import torch

from contract.records import case_id

OUTPUT_KINDS = ("rows", "sum_over_m", "contraction")
# an operator's mappings, held as read-only copies
MAPPING_FIELDS = ("scales", "backends", "sizes_from")


@dataclass
class ChunkGolden:
    """An operator's golden for one chunk of rows under one rounding plan: the row outputs as
    stored (plus any extra per-element data the comparison reads, e.g. ``dx_rounded_terms``),
    and per reduction output its operands over these rows, in the math dtype: ``(None, rhs)``
    sums the rows of rhs, ``(lhs, rhs)`` is lhs^T rhs. ``row_terms``: the row outputs' term
    sums, when the reference's term sums were asked for."""
    rows: dict
    operands: dict
    row_terms: object = None


# A row output's companion in ``ChunkGolden.rows``: f"{output}{ROUNDED_TERMS}" holds, per element,
# the sum of |the terms the plan stores before adding them| (one rounding flip of a stored term
# moves the output by one ULP of that term; the diagnosis layers allow it).
ROUNDED_TERMS = "_rounded_terms"


@dataclass(frozen=True)
class TensorDecl:
    """A named tensor whose shape is a tuple of the operator's dimension names (or the literal 1)."""
    name: str
    dims: tuple

    def shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else sizes[d] for d in self.dims)


@dataclass(frozen=True)
class OutputDecl(TensorDecl):
    kind: str = "rows"
    kernel: str | None = None     # the kernel whose tile over M cuts a reduction
    store: str | None = None      # the rounding plan's point of its store (default: its name)
    # its dtype where it differs from the operator's (attention's forward returns its LSE in FP32,
    # the statistic a split-KV combine or its own backward reads)
    dtype: torch.dtype | None = None

    @property
    def store_point(self) -> str:
        return self.store or self.name

    def __post_init__(self):
        if self.kind not in OUTPUT_KINDS:
            raise ValueError(f"output {self.name!r}: kind must be one of {OUTPUT_KINDS}, got {self.kind!r}")
        if (self.kind == "rows") != (self.kernel is None):
            raise ValueError(f"output {self.name!r}: a reduction names its kernel, a row output does not")


@dataclass(frozen=True)
class Operator:
    """Dimensions (the first is M, the streamed row dimension), inputs, outputs, all in ``dtype``
    (an output may declare its own: ``output_dtype``).
    ``sizes_from``: for each dimension, the (input, axis) it is read from."""
    name: str
    dims: tuple[str, ...]
    inputs: tuple[TensorDecl, ...]
    outputs: tuple[OutputDecl, ...]
    sizes_from: Mapping[str, tuple[str, int]]
    # the module with ``chunk`` and ``term_sums`` (see operators/swiglu_backward/golden.py), and
    # optionally ``max_chunk_rows``: the most rows a default chunk of its pass holds
    golden: object = None
    gate: object = None           # the module with ``row_allowance``, ``bound``, ``own`` (operators/swiglu_backward/gate.py)
    schedules: object = None      # the module of its schedule type and reference schedules (``goldens.schedule``)
    scales: Mapping = None        # scale profile name -> inputs drawn from (generator, *dimension sizes)
    m_edges: tuple = ()           # the matrix's M axis
    shapes: tuple = ()            # the matrix's other dimensions, each a tuple of their sizes
    acceptance_case: tuple = ()      # (M, *other sizes, scale, seed) of the operator's acceptance criterion
    # cases whose inputs leave another format's range or enter a function's far tail, each as
    # ``acceptance_case``: in the quick matrix as they are; their scales stay out of its rotation
    range_cases: tuple = ()
    dtype: torch.dtype = torch.bfloat16
    title: str = ""               # what the report calls it
    # backend name -> "package.module:callable" (``kernels.registry`` resolves --backend by it), and
    # the backends a run gets without --backend; each operator's "torch-eager" is the dual
    # verdict's default benchmark
    backends: Mapping[str, str] = field(default_factory=dict)
    default_backends: tuple[str, ...] = ()
    # backends a run without --backend also gets at the acceptance case alone, so the first run shows
    # how each fares at the operator's own case: SwiGLU's reference schedules' emulations (served by
    # the golden pass: their records say so, ``served``), attention's PyTorch CPU flash kernel
    acceptance_backends: tuple[str, ...] = ()
    expectations: Path | None = None   # the folder of its known failures (``cases.expectations``)
    # the drift study's shape (the dimensions after M): small, since drift relative to rms depends
    # on M and the tiles, not on the other sizes (default: its last shape)
    study_shape: tuple = ()
    # an operator over independent heads (``contract.heads.over_heads``): the dimension every tensor
    # leads with, and the one-head operator whose goldens and gate judge each head
    heads: str | None = None
    per_head: "Operator | None" = None

    def __post_init__(self):
        # read-only copies: a backend in the framework's process cannot change the scale profiles,
        # the backends or the dimensions every later case reads (``kernels.sealed_state`` checks the registry)
        for name in MAPPING_FIELDS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, MappingProxyType(dict(value)))
        names = [t.name for t in (*self.inputs, *self.outputs)]
        if len(set(names)) != len(names):
            raise ValueError(f"operator {self.name!r}: tensor names repeat: {names}")
        if set(self.sizes_from) != set(self.dims):
            raise ValueError(f"operator {self.name!r}: sizes_from must name every dimension {self.dims}")

    @property
    def one_head(self) -> Operator:
        """The operator each head is an instance of (itself where it has no heads): its goldens judge
        a head, and its drift studies are those of the operator over heads."""
        return self.per_head or self

    @property
    def acceptance_case_id(self) -> str | None:
        """The id of the case its acceptance criterion names (the cases' ``CaseSpec.id``); None without one."""
        if not self.acceptance_case:
            return None
        *sizes, scale, seed = self.acceptance_case
        return case_id(dict(zip(self.dims, sizes)), scale, seed)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def outputs_of_kind(self, *kinds: str) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs if o.kind in kinds)

    @property
    def row_inputs(self) -> tuple[str, ...]:
        """Inputs with one row per row of M (streamed in chunks); the others are read whole."""
        return tuple(t.name for t in self.inputs if t.dims[0] == self.dims[0])

    @property
    def row_outputs(self) -> tuple[str, ...]:
        return self.outputs_of_kind("rows")

    @property
    def reduction_outputs(self) -> tuple[str, ...]:
        return self.outputs_of_kind("sum_over_m", "contraction")

    def output(self, name: str) -> OutputDecl:
        return next(o for o in self.outputs if o.name == name)

    def output_dtype(self, name: str) -> torch.dtype:
        """The dtype a backend returns ``name`` in, and the reference is rounded to."""
        return self.output(name).dtype or self.dtype

    def sizes(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, int]:
        """The dimension sizes of inputs whose names and ranks are already checked."""
        return {d: int(inputs[self.sizes_from[d][0]].shape[self.sizes_from[d][1]]) for d in self.dims}

    def input_shapes(self, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape(sizes) for t in self.inputs}

    def output_shapes(self, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape(sizes) for t in self.outputs}
