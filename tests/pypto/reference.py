"""An independent torch model of the PyPTO kernels' arithmetic, for the interpreter tests.

Same math as ``operators/swiglu_backward/kernels/pypto/kernels.py`` written with torch only: FP32 math on BF16
inputs, BF16 stores of dg / dfc / dx, per-tile FP32 partials of db and dw added into the
output in the schedule's accumulator dtype, tile by tile, the tail tile with valid_m rows.
It deliberately does not reuse goldens/ (the framework's goldens are tested elsewhere).
"""
import torch

BF16, FP32 = torch.bfloat16, torch.float32


def sigmoid(g: torch.Tensor, form: str) -> torch.Tensor:
    if form == "exp_ratio":
        e = torch.exp(g)
        return e / (e + 1.0)
    return torch.reciprocal(torch.exp(-g) + 1.0)


def kernel_math(x, w_g, w_fc, dy, g, fc, *, tile_b=1024, tile_w=2048, tile_x=1024,
                acc_dtype=BF16, sigmoid_form="exp_ratio"):
    m, k = x.shape
    n = w_g.shape[1]
    dg = torch.empty(m, n, dtype=BF16)
    dfc = torch.empty(m, n, dtype=BF16)
    db_g = torch.zeros(1, n, dtype=acc_dtype)
    db_fc = torch.zeros(1, n, dtype=acc_dtype)
    for r0 in range(0, m, tile_b):
        sl = slice(r0, min(m, r0 + tile_b))
        dy32, g32, fc32 = dy[sl].float(), g[sl].float(), fc[sl].float()
        s = sigmoid(g32, sigmoid_form)
        silu_bwd = s * (g32 * (1.0 - s) + 1.0)
        dg32 = (dy32 * fc32) * silu_bwd
        dfc32 = dy32 * (g32 * s)
        dg[sl], dfc[sl] = dg32.to(BF16), dfc32.to(BF16)
        db_g = db_g + dg32.sum(0, keepdim=True).to(acc_dtype)
        db_fc = db_fc + dfc32.sum(0, keepdim=True).to(acc_dtype)
    dw_g = torch.zeros(k, n, dtype=acc_dtype)
    dw_fc = torch.zeros(k, n, dtype=acc_dtype)
    for r0 in range(0, m, tile_w):
        sl = slice(r0, min(m, r0 + tile_w))
        xt = x[sl].float().T
        dw_g = dw_g + (xt @ dg[sl].float()).to(acc_dtype)
        dw_fc = dw_fc + (xt @ dfc[sl].float()).to(acc_dtype)
    dx = torch.empty(m, k, dtype=BF16)
    for r0 in range(0, m, tile_x):
        sl = slice(r0, min(m, r0 + tile_x))
        dx[sl] = (dg[sl].float() @ w_g.float().T + dfc[sl].float() @ w_fc.float().T).to(BF16)
    return {"dg": dg, "dfc": dfc, "db_g": db_g.to(BF16), "db_fc": db_fc.to(BF16),
            "dw_g": dw_g.to(BF16), "dw_fc": dw_fc.to(BF16), "dx": dx}


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in BF16 units in the last place (0 = same bits; +0/-0 count as equal)."""
    def ordered(t):
        i = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(i < 0, -32768 - i, i)  # monotone map of the sign-magnitude encoding
    return (ordered(a.to(BF16)) - ordered(b.to(BF16))).abs()
