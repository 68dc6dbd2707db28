"""The kernel the mutator edits: SwiGLU backward written plainly, as a user would, in one function.

FP32 math, the exp sigmoid, dg/dfc stored in BF16, db/dw/dx from the stored values in FP32
and stored once. Every line is a place a tiled kernel's author can slip.
"""
import torch


def kernel(*, x, w_g, w_fc, dy, g, fc):
    dyf = dy.float()
    gf = g.float()
    fcf = fc.float()
    s = torch.sigmoid(gf)
    silu = gf * s
    dsilu = s * (1 + gf * (1 - s))
    dg = (dyf * fcf * dsilu).to(torch.bfloat16)
    dfc = (dyf * silu).to(torch.bfloat16)
    dgf = dg.float()
    dfcf = dfc.float()
    xf = x.float()
    db_g = dgf[0:].sum(0, keepdim=True)
    db_fc = dfcf[0:].sum(0, keepdim=True)
    dw_g = xf.t() @ dgf
    dw_fc = xf.t() @ dfcf
    dx = dgf @ w_g.float().t() + dfcf @ w_fc.float().t()
    return {"dg": dg, "dfc": dfc, "db_g": db_g.to(torch.bfloat16), "db_fc": db_fc.to(torch.bfloat16),
            "dw_g": dw_g.to(torch.bfloat16), "dw_fc": dw_fc.to(torch.bfloat16), "dx": dx.to(torch.bfloat16)}
