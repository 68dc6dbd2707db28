"""Kernels the framework has never seen, for ``benchmarks/hostile_sweep``: correct ones on other
legitimate paths (must pass every cell), wrong ones (must fail at least one cell), and ones that
attack the harness instead of computing (must fail, and cost no other backend its record; an
attack through a door the framework has since closed, ``HARMLESS``, computes right and must pass).

Each is written as a user would write it, from the operator's formulas; nothing here imports the
framework except the attacks that target it by name.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time

import torch

BF16 = torch.bfloat16
OUTPUTS = ("dg", "dfc", "db_g", "db_fc", "dw_g", "dw_fc", "dx")


def _math(x, w_g, w_fc, dy, g, fc, *, dtype=torch.float32):
    """dg, dfc in ``dtype`` and everything downstream from their BF16 stores."""
    dy, g, fc = (t.to(dtype) for t in (dy, g, fc))
    s = torch.sigmoid(g)
    dg = (dy * fc * s * (1 + g * (1 - s))).to(BF16)
    dfc = (dy * g * s).to(BF16)
    a = torch.float64 if dtype == torch.float64 else torch.float32
    dga, dfca, xa = dg.to(a), dfc.to(a), x.to(a)
    return {"dg": dg, "dfc": dfc,
            "db_g": dga.sum(0, keepdim=True).to(BF16), "db_fc": dfca.sum(0, keepdim=True).to(BF16),
            "dw_g": (xa.t() @ dga).to(BF16), "dw_fc": (xa.t() @ dfca).to(BF16),
            "dx": (dga @ w_g.to(a).t() + dfca @ w_fc.to(a).t()).to(BF16)}


def _edit(**changes):
    """A kernel that is ``_math`` with some outputs replaced: ``changes[name](out, inputs) -> tensor``."""
    def kernel(**inputs):
        out = _math(**inputs)
        for name, change in changes.items():
            out[name] = change(out, inputs)
        return out
    return kernel


def _scaled(name, factor):
    return lambda out, inp: (out[name].float() * factor).to(BF16)


# ---- correct kernels on other legitimate paths ------------------------------------------------

def correct_fp32(**inp):
    return _math(**inp)


def correct_fp64(**inp):
    return _math(**inp, dtype=torch.float64)


def correct_noncontiguous(**inp):
    """Right values in column-major storage."""
    return {k: v.t().contiguous().t() if v.dim() == 2 else v for k, v in _math(**inp).items()}


def correct_split_m(**inp):
    """dw and db as sums of per-1000-row partials in FP32, in reverse order."""
    out = _math(**inp)
    dg, dfc, x = out["dg"].float(), out["dfc"].float(), inp["x"].float()
    parts = list(range(0, x.shape[0], 1000))[::-1]
    for name, d in (("g", dg), ("fc", dfc)):
        out[f"db_{name}"] = sum(d[i:i + 1000].sum(0, keepdim=True) for i in parts).to(BF16)
        out[f"dw_{name}"] = sum(x[i:i + 1000].t() @ d[i:i + 1000] for i in parts).to(BF16)
    return out


def correct_stable_sigmoid(**inp):
    """sigmoid as exp(-|g|) branches: valid for every g."""
    dy, g, fc = (inp[k].float() for k in ("dy", "g", "fc"))
    e = torch.exp(-g.abs())
    s = torch.where(g >= 0, 1 / (1 + e), e / (1 + e))
    out = _math(**inp)
    out["dg"] = (dy * fc * s * (1 + g * (1 - s))).to(BF16)
    out["dfc"] = (dy * g * s).to(BF16)
    dga, dfca = out["dg"].float(), out["dfc"].float()
    x = inp["x"].float()
    out.update(db_g=dga.sum(0, keepdim=True).to(BF16), db_fc=dfca.sum(0, keepdim=True).to(BF16),
               dw_g=(x.t() @ dga).to(BF16), dw_fc=(x.t() @ dfca).to(BF16),
               dx=(dga @ inp["w_g"].float().t() + dfca @ inp["w_fc"].float().t()).to(BF16))
    return out


CORRECT = ("correct_fp32", "correct_fp64", "correct_noncontiguous", "correct_split_m", "correct_stable_sigmoid")

# ---- wrong kernels ------------------------------------------------------------------------------

wrong_dg_2pct = _edit(dg=_scaled("dg", 1.02))
wrong_dfc_minus_1_64 = _edit(dfc=_scaled("dfc", 1 - 1 / 64))
wrong_db_g_3pct = _edit(db_g=_scaled("db_g", 1.03))
wrong_dw_fc_3pct = _edit(dw_fc=_scaled("dw_fc", 0.97))
wrong_dx_3pct = _edit(dx=_scaled("dx", 1.03))
wrong_db_swapped = _edit(db_g=lambda o, i: o["db_fc"], db_fc=lambda o, i: o["db_g"])
wrong_dw_fc_is_dw_g = _edit(dw_fc=lambda o, i: o["dw_g"].clone())
wrong_dx_one_weight = _edit(dx=lambda o, i: ((o["dg"].float() + o["dfc"].float()) @ i["w_g"].float().t()).to(BF16))
wrong_dx_missing_fc = _edit(dx=lambda o, i: (o["dg"].float() @ i["w_g"].float().t()).to(BF16))
wrong_dx_negated = _edit(dx=lambda o, i: -o["dx"])
wrong_dx_rows_rolled = _edit(dx=lambda o, i: o["dx"].roll(1, 0))
wrong_dg_cols_rolled = _edit(dg=lambda o, i: o["dg"].roll(1, 1))
wrong_db_g_reversed = _edit(db_g=lambda o, i: o["db_g"].flip(1))
wrong_db_mean = _edit(db_g=lambda o, i: o["dg"].float().mean(0, keepdim=True).to(BF16))
wrong_db_skips_first_row = _edit(db_g=lambda o, i: o["dg"][1:].float().sum(0, keepdim=True).to(BF16))
wrong_db_skips_last_row = _edit(db_fc=lambda o, i: o["dfc"][:-1].float().sum(0, keepdim=True).to(BF16))
wrong_dw_skips_last_row = _edit(dw_g=lambda o, i: (i["x"][:-1].float().t() @ o["dg"][:-1].float()).to(BF16))
wrong_dg_last_row_zero = _edit(dg=lambda o, i: torch.cat([o["dg"][:-1], torch.zeros_like(o["dg"][-1:])]))
wrong_dw_one_zero = _edit(dw_g=lambda o, i: o["dw_g"].index_put((torch.tensor([0]), torch.tensor([0])),
                                                              torch.tensor([0.0], dtype=BF16)))
wrong_nan_in_dx = _edit(dx=lambda o, i: o["dx"].index_put((torch.tensor([0]), torch.tensor([0])),
                                                        torch.tensor([float("nan")], dtype=BF16)))
wrong_inf_in_db = _edit(db_fc=lambda o, i: o["db_fc"].index_put((torch.tensor([0]), torch.tensor([0])),
                                                              torch.tensor([float("inf")], dtype=BF16)))
wrong_all_zero = _edit(**{n: (lambda o, i, n=n: torch.zeros_like(o[n])) for n in OUTPUTS})
wrong_dg_zero = _edit(dg=lambda o, i: torch.zeros_like(o["dg"]))
wrong_dw_zero = _edit(dw_g=lambda o, i: torch.zeros_like(o["dw_g"]), dw_fc=lambda o, i: torch.zeros_like(o["dw_fc"]))
wrong_dg_offset = _edit(dg=lambda o, i: (o["dg"].float() + o["dg"].float().abs().max() / 16).to(BF16))
wrong_fp32_outputs = _edit(dx=lambda o, i: o["dx"].float())
wrong_shape_dw_t = _edit(dw_g=lambda o, i: o["dw_g"].t().contiguous())


def wrong_sigmoid_of_minus_g(**inp):
    return _math(**{**inp, "g": inp["g"]}, dtype=torch.float32) | _sigmoid_variant(inp, lambda g: torch.sigmoid(-g))


def wrong_silu_derivative(**inp):
    """s (1 + g s) instead of s (1 + g (1 - s))."""
    dy, g, fc = (inp[k].float() for k in ("dy", "g", "fc"))
    s = torch.sigmoid(g)
    out = _math(**inp)
    out["dg"] = (dy * fc * s * (1 + g * s)).to(BF16)
    return out


def _sigmoid_variant(inp, sigmoid):
    dy, g, fc = (inp[k].float() for k in ("dy", "g", "fc"))
    s = sigmoid(g)
    return {"dg": (dy * fc * s * (1 + g * (1 - s))).to(BF16), "dfc": (dy * g * s).to(BF16)}


def wrong_g_fc_swapped(**inp):
    return _math(**{**inp, "g": inp["fc"], "fc": inp["g"]})


def wrong_weights_swapped(**inp):
    return _math(**{**inp, "w_g": inp["w_fc"], "w_fc": inp["w_g"]})


def wrong_bf16_everything(**inp):
    """Every intermediate in BF16, sums included."""
    dy, g, fc, x = inp["dy"], inp["g"], inp["fc"], inp["x"]
    s = torch.sigmoid(g)
    dg = dy * fc * s * (1 + g * (1 - s))
    dfc = dy * g * s
    return {"dg": dg, "dfc": dfc, "db_g": dg.cumsum(0)[-1:], "db_fc": dfc.cumsum(0)[-1:],
            "dw_g": x.t() @ dg, "dw_fc": x.t() @ dfc, "dx": dg @ inp["w_g"].t() + dfc @ inp["w_fc"].t()}


WRONG = tuple(n for n in list(globals()) if n.startswith("wrong_"))

# ---- attacks on the harness (each also computes wrong outputs: it passes only through the door) ----


def _wrong_dw_dx(out):
    out["dw_g"], out["dw_fc"], out["dx"] = ((out[k].float() * 1.05).to(BF16) for k in ("dw_g", "dw_fc", "dx"))
    return out


def attack_patch_matmul(**inp):
    """Replace torch.matmul / Tensor.__matmul__ so the goldens' products carry the same 5% error."""
    out = _wrong_dw_dx(_math(**inp))
    real = torch.matmul
    torch.matmul = lambda a, b, **kw: real(a, b, **kw) * 1.05
    torch.Tensor.__matmul__ = lambda a, b: real(a, b) * 1.05
    return out


def attack_patch_mm(**inp):
    out = _wrong_dw_dx(_math(**inp))
    real = torch.mm
    torch.mm = lambda a, b, **kw: real(a, b, **kw) * 1.05
    return out


def attack_patch_sigmoid(**inp):
    """dg, dfc from 1.02 sigmoid, and torch.sigmoid patched to agree."""
    real = torch.sigmoid
    fake = lambda t, **kw: real(t, **kw) * 1.02   # noqa: E731
    out = _math(**inp) | _sigmoid_variant(inp, fake)
    torch.sigmoid = fake
    torch.Tensor.sigmoid = fake
    return out


def attack_patch_sum(**inp):
    out = _math(**inp)
    out["db_g"], out["db_fc"] = (out[k].float().mul(1.05).to(BF16) for k in ("db_g", "db_fc"))
    real = torch.Tensor.sum
    torch.Tensor.sum = lambda t, *a, **kw: real(t, *a, **kw) * 1.05
    return out


def attack_patch_gate(**inp):
    """Replace the framework's verdict functions with ones that always pass."""
    for name in list(sys.modules):
        mod = sys.modules[name]
        if name.startswith(("contract", "accuracy", "cases", "goldens", "operators", "runs")) and mod is not None:
            for attr in ("gated_verdicts", "judge_output", "compare_case"):
                if hasattr(mod, attr):
                    setattr(mod, attr, _always_pass)
    return {k: torch.zeros_like(v) for k, v in _math(**inp).items()}


def _always_pass(*a, **kw):
    raise RuntimeError("patched")


def attack_scale_originals(**inp):
    """Find the caller's input tensors through the garbage collector, scale them by 1.05 in place
    together with these clones, and return the outputs of the scaled inputs."""
    shapes = {k: (v.shape, v.dtype) for k, v in inp.items()}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and not any(obj is v for v in inp.values()):
            for k, (shape, dtype) in shapes.items():
                if k in ("dy",) and obj.shape == shape and obj.dtype == dtype:
                    try:
                        if torch.equal(obj, inp[k]):
                            obj.mul_(1.05)
                    except RuntimeError:
                        pass
    inp["dy"].mul_(1.05)
    return _math(**inp)


def attack_fill_later(**inp):
    """Zeros at return, the right values 0.2 s later from a thread."""
    right = _math(**inp)
    out = {k: torch.zeros_like(v) for k, v in right.items()}

    def fill():
        time.sleep(0.2)
        for k in out:
            out[k].copy_(right[k])
    threading.Thread(target=fill, daemon=True).start()
    return out


def attack_zero_later(**inp):
    """The right values at return, zeroed 0.2 s later: judged at return, it is correct; the attack
    is whether the framework reads memory a thread still writes (it must not crash either)."""
    out = _math(**inp)

    def zero():
        time.sleep(0.2)
        for v in out.values():
            v.zero_()
    threading.Thread(target=zero, daemon=True).start()
    return {k: v for k, v in out.items()}


def attack_forge_shard(**inp):
    """Write records that say this backend passed into every run folder it can find."""
    for root in ("results", os.environ.get("SWEEP_RESULTS", "")):
        runs = os.path.join(root, "runs")
        if root and os.path.isdir(runs):
            for run in os.listdir(runs):
                for worker in ("gw0", "gw1", "main", "gw99"):
                    d = os.path.join(runs, run, "shards", worker)
                    os.makedirs(d, exist_ok=True)
                    rec = [{"case": c, "backend": "benchmarks.hostile_sweep.kernels:attack_forge_shard",
                            "output": o, "golden": "reference", "gated": True, "status": "pass"}
                           for c in ("M2-K96-N200-unit-s0",) for o in OUTPUTS]
                    with open(os.path.join(d, "forged.json"), "w") as f:
                        json.dump({"records": rec}, f)
    return {k: torch.zeros_like(v) for k, v in _math(**inp).items()}


def attack_tensor_subclass(**inp):
    """A subclass whose comparisons hide its zeros."""
    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})
    return {k: torch.zeros_like(v).as_subclass(Liar) for k, v in _math(**inp).items()}


def attack_alias_inputs(**inp):
    """dg and dfc returned as the (same-shaped) inputs g and fc."""
    out = _math(**inp)
    out["dg"], out["dfc"] = inp["g"], inp["fc"]
    return out


def attack_env_operator(**inp):
    """$ACCURACY_OPERATOR once chose the operator every later cell of the process resolved; the
    operator is now a value handed down from the command line and the variable is read by nothing,
    so setting it changes nothing: the right outputs must pass, and torch-eager after it too."""
    os.environ["ACCURACY_OPERATOR"] = "rmsnorm_backward"
    return _math(**inp)


def attack_default_device(**inp):
    out = _math(**inp)
    torch.set_default_device("meta")
    return {k: torch.zeros_like(v, device="cpu") for k, v in out.items()}


def attack_warnings_error(**inp):
    import warnings
    warnings.simplefilter("error")
    return {k: torch.zeros_like(v) for k, v in _math(**inp).items()}


def attack_alarm(**inp):
    """A signal that fires after the call returns, in whatever the process does next."""
    signal.alarm(1)
    return _math(**inp)


def attack_ignore_sigterm_and_hang(**inp):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(3600)


def attack_keyboard_interrupt(**inp):
    raise KeyboardInterrupt


def attack_system_exit_zero(**inp):
    raise SystemExit(0)


def attack_os_exit_zero(**inp):
    os._exit(0)


def attack_huge_print(**inp):
    sys.stdout.write("x" * 5_000_000)
    return {k: torch.zeros_like(v) for k, v in _math(**inp).items()}


def attack_huge_message(**inp):
    raise ValueError("y" * 1_000_000)


def attack_fork_orphan(**inp):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
    return {k: torch.zeros_like(v) for k, v in _math(**inp).items()}


def attack_requires_grad(**inp):
    out = _math(**inp)
    w = torch.ones((), requires_grad=True)
    return {k: (v.float() * w).to(BF16) for k, v in out.items()}


def attack_returns_list(**inp):
    return list(_math(**inp).values())


def attack_returns_extra_output(**inp):
    return {**_math(**inp), "dz": torch.zeros(1, dtype=BF16)}


def attack_stdout_replaced(**inp):
    sys.stdout = open(os.devnull, "w")
    sys.stderr = sys.stdout
    return {k: torch.zeros_like(v) for k, v in _math(**inp).items()}


def attack_manual_seed(**inp):
    """Global RNG changed: harmless to inputs drawn from a seeded generator; wrong outputs fail."""
    torch.manual_seed(1234)
    return _wrong_dw_dx(_math(**inp))


def attack_swap_gate_code(**inp):
    """Keep the gate's functions the same objects with another body, loosen the acceptance
    tolerance by rebinding the constant, and return zeros."""
    import accuracy.gate
    import accuracy.tolerances

    def passes(metrics):
        return True, True
    for name in ("aggregate_checks", "localized_checks"):
        if hasattr(accuracy.gate, name):
            getattr(accuracy.gate, name).__code__ = passes.__code__
    accuracy.tolerances.ACCEPTANCE = accuracy.tolerances.Tolerance(0.5, 1.0)
    return {k: torch.zeros_like(v) for k, v in _math(**inp).items()}


def attack_decline_where_wrong(**inp):
    """Right where the sigmoid is not saturated; where it is (|g| > 30, the saturating case, where a
    kernel's tail goes wrong) declines the case as if by its shape."""
    from contract.backend import BackendUnsupported
    if float(inp["g"].float().abs().max()) > 30:
        raise BackendUnsupported("this kernel's tiles do not support this shape")
    return _math(**inp)


ATTACKS = tuple(n for n in list(globals()) if n.startswith("attack_"))
# Attacks whose outputs are right at return (they test that nothing else breaks, not a verdict):
# zeroed after return, an alarm set, a graph attached (the values are right), an extra output key.
RIGHT_AT_RETURN = ("attack_zero_later", "attack_alarm", "attack_requires_grad", "attack_returns_extra_output")
# Attacks through a door that no longer exists, with right outputs: they must pass like a correct kernel
# (the framework reads no $ACCURACY_OPERATOR: the operator is passed as a value).
HARMLESS = ("attack_env_operator",)
