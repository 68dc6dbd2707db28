"""Wrong attention kernels: the FlashAttention-2 emulation (``operators.attention.flash``) with one
bug each, of the kinds flash kernels ship with. ``KILLS`` names, per wrong kernel, the output the
gate must fail it on and the case that exposes it (the operator's: ``attention`` or
``attention_causal``); ``FORWARD_KILLS`` the same for the forward operators' (kernels
``forward_<bug>``, ``forward_causal_<bug>``), ``HEAD_KILLS`` and ``FORWARD_HEAD_KILLS`` for the
operators over heads;
``tests/operators/test_attention.py`` runs them. None is registered among the operator's backends.
"""
from __future__ import annotations

import torch

from contract.heads import head_by_head
from operators.attention import flash
from operators.attention.flash import BF16, Flash


def _kernel(cfg: Flash, causal: bool, doc: str):
    def kernel(*, q, kt, vt, do):
        return flash.run(q, kt, vt, do, causal=causal, cfg=cfg)
    kernel.__doc__ = doc
    return kernel


BUGS = {
    "missing_rescale": (Flash(rescale=False),
                        "l and the O accumulator not rescaled by exp(m_old - m_new) when a later key block "
                        "raises the running max"),
    "bf16_running_sum": (Flash(sum_dtype=BF16), "the running sum l kept in a BF16 register"),
    "max_not_subtracted": (Flash(subtract_max=False),
                           "exp(S) in place of exp(S - m): overflows FP32 where a score passes 88.7"),
    "padding_not_masked": (Flash(mask_padding=False),
                           "the last key block's zero padding not masked: each padded key adds exp(0 - m) to l"),
    "lse_without_max": (Flash(lse_with_max=False), "LSE = log l, the running max left out"),
    "ds_without_delta": (Flash(ds_with_delta=False), "dS = P dP: delta = rowsum(dO * O) never subtracted"),
    "dv_unnormalized": (Flash(dv_normalized=False), "dV from P~ = exp(S - m), not from P = P~ / l"),
    "scale_one_over_d": (Flash(scale_power=1.0), "the softmax scale 1 / D in place of 1 / sqrt(D)"),
    "dkdv_one_query_tile": (Flash(dkdv_tiles=1), "dK and dV summed over the first 128-query tile only"),
    "bf16_dkdv_partials_32": (Flash(br=32, dkdv_bf16=True),
                              "dK and dV's 32-query partials added in their BF16 outputs (a split kernel)"),
    "o_truncated": (Flash(o_truncated=True), "O stored in BF16 by truncation (round toward zero)"),
    "unified_max": (Flash(max_offset=0.3),
                    "a max 0.3 above the row's running max subtracted (a 'unified max'): at near-uniform scores "
                    "every P~ is near exp(-0.3) = 0.7408 and rounds up in BF16 alike, while l sums the FP32 P~: "
                    "O is biased by +0.18% (0 elements beyond the element-wise gate; the fitted scale fails it)"),
}
CAUSAL_BUGS = {
    "diagonal_off_by_one": (Flash(diagonal_extra_key=True),
                            "the causal mask off by one in the diagonal block: query i also sees key i + 1"),
    "backward_unmasked": (Flash(bwd_unmasked=True), "the backward recomputes P without the causal mask"),
    "diagonal_tile_skipped": (Flash(skip_diagonal_tile=True),
                              "dK and dV leave out the query tile on the diagonal (a loop that starts one "
                              "tile late)"),
}

# the forward operators' wrong kernels (``operators.attention.forward``): the forward's bugs above,
# and two of an LSE returned in FP32 that is not the FP32 statistic
FORWARD_BUGS = {name: BUGS[name] for name in ("missing_rescale", "bf16_running_sum", "max_not_subtracted",
                                              "padding_not_masked", "lse_without_max", "scale_one_over_d",
                                              "o_truncated", "unified_max")}
FORWARD_BUGS.update({
    "lse_bf16": (Flash(lse_bf16=True), "LSE rounded through BF16 before it is returned in FP32 (a kernel "
                                       "that keeps its statistics in its BF16 output's buffer)"),
    "lse_base2": (Flash(lse_base2=True), "LSE in base 2 (an exp2 kernel's log2(e) m + log2 l), not converted "
                                         "to the natural log the backward and a split-KV combine read"),
})
FORWARD_CAUSAL_BUGS = {"diagonal_off_by_one": CAUSAL_BUGS["diagonal_off_by_one"]}

# wrong kernel -> (output it must fail, the case that exposes it: the operator's name and case sizes)
KILLS = {
    "missing_rescale": ("o", ("attention", "129,257,128,unit")),
    "bf16_running_sum": ("o", ("attention", "129,257,128,near_uniform")),
    "max_not_subtracted": ("o", ("attention", "129,129,64,large_logits")),
    "padding_not_masked": ("o", ("attention", "128,129,64,unit")),
    "lse_without_max": ("dq", ("attention", "129,129,64,unit")),
    "ds_without_delta": ("dq", ("attention", "129,129,64,unit")),
    "dv_unnormalized": ("dvt", ("attention", "129,129,64,unit")),
    "scale_one_over_d": ("o", ("attention", "129,129,64,unit")),
    "dkdv_one_query_tile": ("dkt", ("attention", "257,128,64,unit")),
    "bf16_dkdv_partials_32": ("dkt", ("attention", "1025,128,64,unit")),
    "o_truncated": ("o", ("attention", "129,129,64,unit")),
    "unified_max": ("o", ("attention", "127,128,64,near_uniform")),
    "diagonal_off_by_one": ("o", ("attention_causal", "129,64,unit")),
    "backward_unmasked": ("dq", ("attention_causal", "129,64,unit")),
    "diagonal_tile_skipped": ("dkt", ("attention_causal", "129,64,unit")),
}
FORWARD_KILLS = {
    "missing_rescale": ("lse", ("attention_forward", "129,257,128,unit")),
    "bf16_running_sum": ("lse", ("attention_forward", "129,257,128,near_uniform")),
    "max_not_subtracted": ("o", ("attention_forward", "129,129,64,large_logits")),
    "padding_not_masked": ("lse", ("attention_forward", "128,129,64,unit")),
    "lse_without_max": ("lse", ("attention_forward", "129,129,64,unit")),
    "scale_one_over_d": ("lse", ("attention_forward", "129,129,64,unit")),
    "o_truncated": ("o", ("attention_forward", "129,129,64,unit")),
    "lse_bf16": ("lse", ("attention_forward", "129,129,64,unit")),
    "lse_base2": ("lse", ("attention_forward", "129,129,64,unit")),
    "unified_max": ("o", ("attention_forward", "127,128,64,near_uniform")),
    "diagonal_off_by_one": ("lse", ("attention_forward_causal", "129,64,unit")),
}

# wrong kernels over heads (``operators.attention.heads``): the flash emulation per head, right within
# each head, with the heads' layout wrong; (output it must fail, (operator, case))
HEAD_KILLS = {
    "first_head_keys": ("o", ("attention_heads", "129,129,64,3,unit")),
    "heads_swapped_with_rows": ("o", ("attention_heads", "129,129,64,3,unit")),
    "last_head_previous_values": ("o", ("attention_heads", "129,129,64,8,unit")),
    "dkdv_summed_over_heads": ("dkt", ("attention_heads", "129,129,64,3,unit")),
    "backward_next_head_do": ("dq", ("attention_heads", "129,129,64,3,unit")),
    "causal_mask_flat_rows": ("o", ("attention_heads_causal", "129,64,3,unit")),
}


FORWARD_HEAD_KILLS = {
    "forward_heads_first_head_lse": ("lse", ("attention_forward_heads", "129,129,64,3,unit")),
    "forward_heads_first_head_keys": ("o", ("attention_forward_heads", "129,129,64,3,unit")),
    "forward_heads_causal_mask_flat_rows": ("o", ("attention_forward_heads_causal", "129,64,3,unit")),
}


def _forward_heads(q, kt, vt, *, causal: bool) -> dict[str, torch.Tensor]:
    return head_by_head(lambda *, q, kt, vt: flash.forward(q, kt, vt, causal=causal))(q=q, kt=kt, vt=vt)


def forward_heads_first_head_lse(*, q, kt, vt):
    """Every head's LSE is head 0's (LSE written [M] per program without the head's offset, the last
    write head 0's); O is right."""
    out = _forward_heads(q, kt, vt, causal=False)
    out["lse"] = out["lse"][:1].expand_as(out["lse"]).contiguous()
    return out


def forward_heads_first_head_keys(*, q, kt, vt):
    """Every head attends to head 0's K and V."""
    return _forward_heads(q, kt[:1].expand_as(kt), vt[:1].expand_as(vt), causal=False)


def forward_heads_causal_mask_flat_rows(*, q, kt, vt):
    """The causal mask on the flattened [H * M] row: heads after the first see every key."""
    first = _forward_heads(q[:1], kt[:1], vt[:1], causal=True)
    rest = _forward_heads(q[1:], kt[1:], vt[1:], causal=False)
    return {name: torch.cat([first[name], rest[name]]) for name in first}


def _flash_heads(q, kt, vt, do, *, causal: bool) -> dict[str, torch.Tensor]:
    return head_by_head(lambda *, q, kt, vt, do: flash.run(q, kt, vt, do, causal=causal))(q=q, kt=kt, vt=vt, do=do)


def first_head_keys(*, q, kt, vt, do):
    """Every head attends to head 0's keys and values (a K/V pointer without the head offset)."""
    return _flash_heads(q, kt[:1].expand_as(kt), vt[:1].expand_as(vt), do, causal=False)


def heads_swapped_with_rows(*, q, kt, vt, do):
    """q and dO's [H, M, D] memory read as [M, H, D] (the head and query strides swapped), and o
    and dq written back the same way."""
    h, m, d = q.shape
    def swap(t):
        return t.reshape(m, h, d).transpose(0, 1).contiguous()
    out = _flash_heads(swap(q), kt, vt, swap(do), causal=False)
    for name in ("o", "dq"):
        out[name] = out[name].transpose(0, 1).contiguous().reshape(h, m, d)
    return out


def last_head_previous_values(*, q, kt, vt, do):
    """The last head reads the values of the head before it (a head index off by one at the edge of
    the grid); every other head is right."""
    vt = vt.clone()
    vt[-1] = vt[-2]
    return _flash_heads(q, kt, vt, do, causal=False)


def dkdv_summed_over_heads(*, q, kt, vt, do):
    """dK and dV summed over the heads, as a grouped-query kernel sums the heads that share one K
    and V head, for heads that each have their own."""
    out = _flash_heads(q, kt, vt, do, causal=False)
    for name in ("dkt", "dvt"):
        out[name] = out[name].float().sum(0, keepdim=True).expand_as(out[name]).to(BF16).contiguous()
    return out


def backward_next_head_do(*, q, kt, vt, do):
    """The backward reads the next head's dO (a head stride off by one in dO's pointer), the
    forward is right: o passes, dq, dK, dV do not."""
    right = _flash_heads(q, kt, vt, do, causal=False)
    wrong = _flash_heads(q, kt, vt, do.roll(-1, 0), causal=False)
    return {**wrong, "o": right["o"]}


def causal_mask_flat_rows(*, q, kt, vt, do):
    """The causal mask compares the key's position with the query's row in the flattened [H * M]
    rows: head 0 is masked right, every later head's queries see every key."""
    first = _flash_heads(q[:1], kt[:1], vt[:1], do[:1], causal=True)
    rest = _flash_heads(q[1:], kt[1:], vt[1:], do[1:], causal=False)
    return {name: torch.cat([first[name], rest[name]]) for name in first}


def forward_kernel_path(bug: str, operator: str) -> str:
    """The import path of forward operator ``operator``'s wrong kernel ``bug`` (as ``--backend`` takes it)."""
    prefix = "forward_causal_" if operator.endswith("causal") else "forward_"
    return f"{__name__}:{prefix}{bug}"


def _forward_kernel(cfg: Flash, causal: bool, doc: str):
    def kernel(*, q, kt, vt):
        return flash.forward(q, kt, vt, causal=causal, cfg=cfg)
    kernel.__doc__ = doc
    return kernel


for _name, (_cfg, _doc) in FORWARD_BUGS.items():
    globals()[f"forward_{_name}"] = _forward_kernel(_cfg, False, _doc)
for _name, (_cfg, _doc) in FORWARD_CAUSAL_BUGS.items():
    globals()[f"forward_causal_{_name}"] = _forward_kernel(_cfg, True, _doc)
for _name, (_cfg, _doc) in BUGS.items():
    globals()[_name] = _kernel(_cfg, False, _doc)
for _name, (_cfg, _doc) in CAUSAL_BUGS.items():
    globals()[_name] = _kernel(_cfg, True, _doc)
