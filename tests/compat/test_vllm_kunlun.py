"""The Triton kernels Kunlunxin's vLLM plugin runs on the P800 (vllm-kunlun 0.11.1, downloaded at
test time), as written, on kunlun:xpu2, kunlun:xpu3 (host emulation), cpu and gpu:interpret,
against torch references written from the math: the chunked gated delta rule of Qwen3-Next
(flash-linear-attention pieces: the chunk-local cumsum, beta·K·Kᵀ with the decay, the unit
lower-triangular solve, the WY recomputation of w and u, the state recurrence, the output),
the gated RMS norm, the L2 norm, the causal conv1d of the Mamba layers, the sparse-MLA index
conversion and the GDN gating.

Launch code: the plugin's own where it is Triton (`chunk_scaled_dot_kkt_fwd`,
`chunk_gated_delta_rule_fwd_h`, `layer_norm_fwd`, `causal_conv1d_fn_triton`,
`triton_convert_req_index_to_global_index`, `fused_gdn_gating`, `chunk_local_cumsum`, which also
passes Kunlun Triton's `is_use_mask_zero=True`); where its wrapper calls the chip's native ops
(`torch.ops.xspeedgate_ops`, `kunlun_ops`) instead, the kernel is launched as upstream
flash-linear-attention launches it (grid, block sizes). The kernels use 64x64 fp32 `tl.dot`
tiles, BLOCK_N=256 conv tiles and block pointers' `.dtype.element_ty`: on kunlun their plans cut
tiles read in two roles, early returns and yielding branches."""
import math

import pytest
import torch
import torch.nn.functional as F

import targets.kunlun
from compiler import use_target
from compiler.target import register_target

pytestmark = pytest.mark.integration
register_target("kunlun", targets.kunlun.TARGET)

TARGETS = ["kunlun:xpu2", "kunlun:xpu3", "cpu", "gpu:interpret"]
B, T, H, K, V, BT = 1, 100, 2, 128, 64, 64   # T leaves a masked last chunk
NT = (T + BT - 1) // BT


def _inputs():
    g = torch.Generator().manual_seed(46)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return dict(q=r(B, T, H, K) * 0.1, k=F.normalize(r(B, T, H, K), dim=-1), v=r(B, T, H, V),
                beta=torch.rand(B, T, H, generator=g), gate=-torch.rand(B, T, H, generator=g) * 0.1,
                A=torch.tril(r(B, T, H, BT) * 0.1, -1), h=r(B, NT, H, K, V) * 0.1)


def _chunks(x: torch.Tensor, dim: int = 1):
    """(start, chunk) of `x` along the time axis, BT at a time."""
    for s in range(0, x.shape[dim], BT):
        yield s, x.narrow(dim, s, min(BT, x.shape[dim] - s))


def _chunk_cumsum(g: torch.Tensor) -> torch.Tensor:
    return torch.cat([c.cumsum(1) for _, c in _chunks(g)], dim=1)


def _padded(x: torch.Tensor, s: int) -> torch.Tensor:
    """The time chunk of x starting at s, zero-padded to BT rows (the kernels' masked rows)."""
    c = torch.zeros((BT,) + x.shape[1:], dtype=x.dtype)
    n = min(BT, x.shape[0] - s)
    c[:n] = x[s:s + n]
    return c


# -- the cases: name -> run(m, inputs) giving (result, reference, (rtol, atol)) ---------------------------
def cumsum_scalar(m, d):
    g = d["gate"]
    return m["fla.cumsum"].chunk_local_cumsum.__wrapped__(g, BT), _chunk_cumsum(g), 1e-5


def cumsum_vector(m, d):
    s = d["v"][..., :32].contiguous()
    o = torch.empty_like(s)
    m["fla.cumsum"].chunk_local_cumsum_vector_kernel[(1, NT, B * H)](
        s, o, None, None, T=T, B=B, H=H, S=32, BT=BT, BS=32, HEAD_FIRST=False, REVERSE=False)
    return o, _chunk_cumsum(s), 1e-5


def scaled_dot_kkt(m, d):
    k, beta, gate = d["k"], d["beta"], _chunk_cumsum(d["gate"])
    got = m["fla.chunk_scaled_dot_kkt"].chunk_scaled_dot_kkt_fwd(k, beta, gate)
    want = torch.zeros(B, T, H, BT)
    for h in range(H):
        for s, kc in _chunks(k[0, :, h], 0):
            n = kc.shape[0]
            gc, bc = gate[0, s:s + n, h], beta[0, s:s + n, h]
            a = (bc[:, None] * kc) @ kc.t() * torch.exp(gc[:, None] - gc[None, :])
            want[0, s:s + n, h, :n] = torch.tril(a, -1)
    return got, want, 1e-5


def solve_tril(m, d):
    A = d["A"]
    Ad = torch.empty(B, T, H, 16)
    m["fla.solve_tril"].solve_tril_16x16_kernel[((T + 15) // 16, B * H)](A=A, Ad=Ad, cu_seqlens=None,
                                                                         chunk_indices=None, T=T, H=H, BT=BT)
    want = torch.empty_like(Ad)
    for h in range(H):
        for s in range(0, T, 16):
            n, off = min(16, T - s), s % BT
            blk = torch.zeros(16, 16)
            blk[:n] = A[0, s:s + n, h, off:off + 16]
            want[0, s:s + n, h] = torch.linalg.inv(torch.eye(16) + torch.tril(blk, -1))[:n]   # (I + A)^-1
    return Ad, want, 1e-5


def wy_recompute(m, d):
    k, v, beta, A = d["k"], d["v"], d["beta"], d["A"]
    gate = _chunk_cumsum(d["gate"])
    w, u = torch.empty_like(k), torch.empty_like(v)
    for kern in ("recompute_u_fwd_kernel", "recompute_w_fwd_kernel"):
        getattr(m["fla.wy_fast"], kern)[(NT, B * H)](k=k, v=v, beta=beta, w=w, u=u, A=A, g=gate, cu_seqlens=None,
                                                     chunk_indices=None, T=T, H=H, Hg=H, K=K, V=V, BT=BT, BK=64,
                                                     BV=64)
    ww, uw = torch.empty_like(w), torch.empty_like(u)
    for h in range(H):
        for s in range(0, T, BT):
            n = min(BT, T - s)
            a = A[0, s:s + n, h, :n]
            uw[0, s:s + n, h] = a @ (v[0, s:s + n, h] * beta[0, s:s + n, h, None])
            ww[0, s:s + n, h] = a @ (k[0, s:s + n, h] * (beta[0, s:s + n, h] * gate[0, s:s + n, h].exp())[:, None])
    return torch.cat([w.flatten(), u.flatten()]), torch.cat([ww.flatten(), uw.flatten()]), 1e-5


def delta_rule_state(m, d):
    k, v, gate = d["k"], d["v"], _chunk_cumsum(d["gate"])
    w = d["k"] * 0.5
    h, v_new, _ = m["fla.chunk_delta_h"].chunk_gated_delta_rule_fwd_h(k, w, v, gate)
    hw, vw = torch.empty_like(h), torch.empty_like(v_new)
    for hd in range(H):
        state = torch.zeros(K, V)
        for t, s in enumerate(range(0, T, BT)):
            n = min(BT, T - s)
            hw[0, t, hd] = state
            vn = v[0, s:s + n, hd] - w[0, s:s + n, hd] @ state
            vw[0, s:s + n, hd] = vn
            g, g_last = gate[0, s:s + n, hd], gate[0, s + n - 1, hd]
            state = state * g_last.exp() + k[0, s:s + n, hd].t() @ (vn * (g_last - g).exp()[:, None])
    return torch.cat([h.flatten(), v_new.flatten()]), torch.cat([hw.flatten(), vw.flatten()]), 2e-5


def chunk_output(m, d):
    q, k, v, h, gate = d["q"], d["k"], d["v"], d["h"], _chunk_cumsum(d["gate"])
    o = torch.empty_like(v)
    scale = K ** -0.5
    m["fla.chunk_o"].chunk_fwd_kernel_o[(1, NT, B * H)](q, k, v, h, gate, o, None, None, scale, T=T, H=H, Hg=H,
                                                        K=K, V=V, BT=BT, BK=64, BV=64)
    want = torch.empty_like(o)
    for hd in range(H):
        for t, s in enumerate(range(0, T, BT)):
            n = min(BT, T - s)
            qc, kc, vc, g = q[0, s:s + n, hd], k[0, s:s + n, hd], v[0, s:s + n, hd], gate[0, s:s + n, hd]
            a = torch.tril(qc @ kc.t() * torch.exp(g[:, None] - g[None, :]))
            want[0, s:s + n, hd] = scale * ((qc @ h[0, t, hd]) * g.exp()[:, None] + a @ vc)
    return o, want, 1e-5


def gated_rms_norm(m, d):
    x, z, w = d["v"].reshape(-1, 128)[:7], d["q"].reshape(-1, 128)[:7].contiguous(), d["h"][0, 0, 0, :, 0]
    x, z, w = x.repeat(1, 2), z.repeat(1, 2) * 10, w.repeat(2)
    y = m["fla.layernorm_guard"].layer_norm_fwd(x, w, None, 1e-6, z=z, group_size=128, is_rms_norm=True)[0]
    xg = x.view(7, 2, 128)
    want = (xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + 1e-6)).view(7, 256) * w * F.silu(z)
    return y, want, 1e-5


def l2_norm(m, d):
    x = d["v"].reshape(-1, V)
    mod = m["fla.l2norm"]
    y, y1, y2 = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    # upstream flash-linear-attention's l2norm_fwd: the block kernel for D <= 512 (its BT autotuned),
    # the row kernel beyond, the MBLOCK kernel where the default norm is off
    mod.l2norm_fwd_kernel[lambda meta: (triton_cdiv(x.shape[0], meta["BT"]),)](x, y, 1e-6, NB=1, T=x.shape[0], D=V,
                                                                               BD=V)
    mod.l2norm_fwd_kernel1[(x.shape[0],)](x, y1, eps=1e-6, D=V, BD=V)
    mod.l2norm_fwd_kernel2[(triton_cdiv(x.shape[0], 32),)](x, y2, 1e-6, x.shape[0], V, 32)
    want = x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)
    return torch.stack([y, y1, y2]), torch.stack([want] * 3), 1e-5


def triton_cdiv(a, b):
    return -(-a // b)


def causal_conv1d(m, d):
    dim, width, seqlens = 64, 4, torch.tensor([5, 1, 9])
    qsl = torch.cat([torch.zeros(1, dtype=torch.int32), seqlens.cumsum(0).to(torch.int32)])
    x = d["v"].reshape(-1, dim)[:int(seqlens.sum())].t()         # (dim, tokens), channel-last
    w, bias = d["h"][0, 0, 0, :dim, :width].contiguous(), d["q"][0, 0, 0, :dim].contiguous()
    states = d["k"].reshape(-1)[:4 * dim * (width - 1)].reshape(4, width - 1, dim).transpose(1, 2)   # stride_dim 1
    idx, has = torch.tensor([2, 0, 3], dtype=torch.int32), torch.tensor([True, False, True])
    st = states.clone()
    out = m["mamba.causal_conv1d"].causal_conv1d_fn_triton(x, w, bias, st, qsl, idx, has, "silu")
    want, want_st = torch.empty_like(x), states.clone()
    for i, (a, b) in enumerate(zip(qsl[:-1].tolist(), qsl[1:].tolist())):
        init = states[idx[i]] if has[i] else torch.zeros(dim, width - 1)
        xs = torch.cat([init, x[:, a:b]], dim=1)                   # (dim, width - 1 + len)
        want[:, a:b] = F.silu(F.conv1d(xs[None], w[:, None], bias, groups=dim)[0])
        want_st[idx[i]] = xs[:, -(width - 1):]
    return torch.cat([out.flatten(), st.flatten()]), torch.cat([want.flatten(), want_st.flatten()]), 1e-5


def sparse_mla_index(m, d):
    req = torch.tensor([0, 1, 1], dtype=torch.int32)
    table = torch.tensor([[3, 1, 4, 0], [2, 7, 5, 6]], dtype=torch.int32)
    tok = torch.randint(-1, 4 * 64 + 40, (3, 256), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    got = m["mla"].triton_convert_req_index_to_global_index(req, table, tok, BLOCK_SIZE=64, NUM_TOPK_TOKENS=256,
                                                             BLOCK_N=128)
    blk = (tok // 64).clamp(max=3).long()
    base = table[req.long()[:, None], blk]
    want = torch.where((tok < 0) | (tok // 64 >= 4), -1, base * 64 + tok % 64)
    return got, want, 0.0


def gdn_gating(m, d):
    a_log, a, dt_bias = d["q"][0, 0, 0, :20].contiguous(), d["v"].reshape(-1)[:6 * 20].reshape(6, 20) * 8, \
        d["k"][0, 0, 0, :20].contiguous()
    got = m["qwen3_next"].fused_gdn_gating(a_log, a, dt_bias)
    x = a + dt_bias
    want = -a_log.exp() * torch.where(x <= 20.0, torch.log1p(x.exp()), x)
    return got, want, 1e-5


CASES = {f.__name__: f for f in (cumsum_scalar, cumsum_vector, scaled_dot_kkt, solve_tril, wy_recompute,
                                 delta_rule_state, chunk_output, gated_rms_norm, l2_norm, causal_conv1d,
                                 sparse_mla_index, gdn_gating)}


# the builds of a minute on 2 cores (the chunk output's strip-mined plan, the conv's on the second arch)
SLOW = {("chunk_output", "kunlun:xpu2"), ("chunk_output", "kunlun:xpu3"), ("causal_conv1d", "kunlun:xpu2")}


@pytest.mark.sampled   # every kernel and every target in the default tiers; the whole grid in slow
@pytest.mark.parametrize("name,target", [pytest.param(n, t, marks=[pytest.mark.slow] if (n, t) in SLOW else [])
                                         for n in sorted(CASES) for t in TARGETS])
def test_vllm_kunlun_kernel(vllm_kunlun, name, target):
    with use_target(target):
        got, want, tol = CASES[name](vllm_kunlun, _inputs())
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    assert not math.isnan(float(got.float().sum()))
