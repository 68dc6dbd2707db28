"""An operator over H independent heads: a one-head operator's inputs and outputs with a leading
head dimension, as attention kernels take them ([B * H, S, D]).

The kernel gets every head in one call, so a bug that crosses heads (a missing head stride, K and
V of the wrong head, dK summed over heads) is in its outputs; the framework judges each head with
the one-head operator's goldens and gate (``accuracy.heads``), so the allowances, the fitted scale
and the localized tests mean what they mean for one head, and a wrong head among eight fails on
its own instead of being diluted by seven right ones.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import replace

import torch

from contract.operator import Operator, TensorDecl

HEADS = "H"


def _stacked(profile):
    """A one-head scale profile drawn once per head from the case's generator, heads stacked first:
    ``(gen, *one-head sizes, H)``."""
    def draw(gen: torch.Generator, *sizes: int) -> dict[str, torch.Tensor]:
        *one, heads = sizes
        drawn = [profile(gen, *one) for _ in range(heads)]
        return {name: torch.stack([d[name] for d in drawn]) for name in drawn[0]}
    draw.__doc__ = profile.__doc__
    return draw


def over_heads(one: Operator, *, name: str, title: str, m_edges: tuple, shapes: tuple, acceptance_case: tuple,
               range_cases: tuple = (), backends: Mapping[str, str], default_backends: tuple[str, ...],
               acceptance_backends: tuple[str, ...] = (), expectations=None) -> Operator:
    """``one`` over H heads: dimensions ``(*one.dims, "H")`` (M stays first: a case's id and its
    ``--case`` read M, the others, then H), every tensor ``[H, *its one-head shape]``, ``one``'s
    profiles drawn per head. ``shapes``, ``acceptance_case``, ``range_cases``: as the operator
    fields, with H after the one-head sizes."""
    if one.heads is not None:
        raise ValueError(f"operator {one.name!r} already has heads")
    return Operator(
        name=name,
        dims=(*one.dims, HEADS),
        inputs=tuple(TensorDecl(t.name, (HEADS, *t.dims)) for t in one.inputs),
        outputs=tuple(replace(o, dims=(HEADS, *o.dims)) for o in one.outputs),
        sizes_from={**{d: (t, axis + 1) for d, (t, axis) in one.sizes_from.items()}, HEADS: (one.inputs[0].name, 0)},
        golden=one.golden, gate=one.gate, schedules=one.schedules,
        scales={s: _stacked(p) for s, p in one.scales.items()},
        m_edges=m_edges, shapes=shapes, acceptance_case=acceptance_case, range_cases=range_cases,
        dtype=one.dtype, title=title, backends=backends, default_backends=default_backends,
        acceptance_backends=acceptance_backends, expectations=expectations,
        study_shape=one.study_shape, heads=HEADS, per_head=one)


def head_of(tensors: Mapping[str, torch.Tensor], h: int) -> dict[str, torch.Tensor]:
    """Head ``h`` of every tensor (views)."""
    return {name: t[h] for name, t in tensors.items()}


def head_by_head(kernel, one_head_rank: int = 2):
    """A one-head kernel (keyword tensors in, a mapping of tensors out) that also takes its tensors
    with a leading head dimension (its first tensor of rank ``one_head_rank`` + 1), calling
    ``kernel`` once per head and stacking its outputs."""
    @functools.wraps(kernel)
    def run(**tensors: torch.Tensor):
        first = next(iter(tensors.values()))
        if first.dim() == one_head_rank:
            return kernel(**tensors)
        heads = [kernel(**head_of(tensors, h)) for h in range(first.shape[0])]
        return {name: torch.stack([out[name] for out in heads]) for name in heads[0]}
    return run
