"""Liger-Kernel 0.8.5's forward kernels, unchanged, through the library's own host functions, on
cpu, gpu:interpret and kunlun:xpu3 (host emulation), against torch references.

Each (kernel, target) is its own test. A case that fails today for a reason named in XFAIL is
marked xfail(strict=True): it must fail, so when the missing feature lands the case passes, the
run fails loudly, and the marker is removed. Sizes are small (the interpreter is slow) and fit
Kunlun's local memory."""
import pytest
import torch
import torch.nn.functional as F

from compiler import use_target

pytestmark = pytest.mark.integration

TARGETS = ["cpu", "gpu:interpret", "kunlun:xpu3"]
# (kernel, targets) -> (why it fails today, the error it fails with); every Liger kernel tried runs today
XFAIL: dict = {}


def xfail_marks(table, name, target):
    for (n, targets), (why, exc) in table.items():
        if n == name and target in targets:
            return [pytest.mark.xfail(strict=True, reason=why, raises=exc)]
    return []


def cases(names, table=None):
    table = XFAIL if table is None else table
    return [pytest.param(name, t, id=f"{name}-{t}", marks=xfail_marks(table, name, t)) for name in names
            for t in TARGETS]


def _rms_ref(x, w, eps, offset):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (offset + w.float())).to(x.dtype)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _jsd_ref(log_q, log_p, beta):
    p, q = log_p.exp(), log_q.exp()
    m = beta * p + (1 - beta) * q
    return (beta * (p * (log_p - m.log())).sum(-1) + (1 - beta) * (q * (log_q - m.log())).sum(-1)).mean()


def run_case(name, m, g):
    """(result, reference, (rtol, atol)) of one Liger op on inputs from generator `g`."""
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    if name == "rms_norm":
        x, w = r(6, 100), r(100)
        y = m["rms_norm"].rms_norm_forward(x, w, 1e-6, 0.0, "llama", None)[0]
        y1 = m["rms_norm"].rms_norm_forward(x, w, 1e-6, 1.0, "gemma", None)[0]
        return torch.stack([y, y1]), torch.stack([_rms_ref(x, w, 1e-6, 0.0), _rms_ref(x, w, 1e-6, 1.0)]), 1e-5
    if name == "fused_add_rms_norm":
        x, res, w = r(6, 100), r(6, 100), r(100)
        y, s = m["fused_add_rms_norm"].fused_add_rms_norm_forward(x, res, w, 1e-6, 0.0, "llama")[:2]
        return torch.stack([y, s]), torch.stack([_rms_ref(x + res, w, 1e-6, 0.0), x + res]), 1e-5
    if name == "layer_norm":
        x, w, b = r(6, 100), r(100), r(100)
        return m["layer_norm"].layer_norm_forward(x, w, b, 1e-5)[0], F.layer_norm(x, (100,), w, b, 1e-5), 1e-5
    if name == "rope":
        q, k = r(2, 4, 6, 16), r(2, 2, 6, 16)
        # as rotary embeddings make them: both halves of the head dim share the frequencies
        cos, sin = (torch.cat([h, h], dim=-1) for h in (r(1, 6, 8), r(1, 6, 8)))
        q2, k2 = m["rope"].rope_forward(q.clone(), k.clone(), cos, sin)[:2]
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        ref = torch.cat([(q * c + _rotate_half(q) * s).flatten(), (k * c + _rotate_half(k) * s).flatten()])
        return torch.cat([q2.flatten(), k2.flatten()]), ref, 1e-5
    if name == "swiglu":
        a, b = r(6, 100), r(6, 100)
        return m["swiglu"].swiglu_forward(a, b)[2], F.silu(a) * b, 1e-5
    if name == "geglu":
        a, b = r(6, 100), r(6, 100)
        return m["geglu"].geglu_forward(a, b)[2], F.gelu(a, approximate="tanh") * b, 1e-5
    if name == "cross_entropy":
        logits, tgt = r(6, 100), torch.randint(0, 100, (6,), generator=g)
        tgt[1] = -100
        loss = m["cross_entropy"].cross_entropy_forward(logits.clone(), tgt, None, -100, 0.0, 0.0, "mean", None,
                                                        False)[0]
        return loss, F.cross_entropy(logits, tgt, ignore_index=-100), 1e-5
    if name == "softmax":
        x = r(6, 100)
        return m["softmax"]._softmax_forward(x)[0], x.softmax(-1), 1e-5
    if name == "kl_div":
        lp, tp = r(6, 100).log_softmax(-1), r(6, 100).softmax(-1)
        got = torch.stack([m["kl_div"].kldiv_forward_triton(lp, tp, False, "batchmean", 1e-10),
                           m["kl_div"].kldiv_forward_triton(lp, tp.log(), True, "sum", 1e-10)])
        want = torch.stack([F.kl_div(lp, tp, reduction="batchmean"),
                            F.kl_div(lp, tp.log(), reduction="sum", log_target=True)])
        return got, want, 1e-5
    if name == "jsd":
        lq, lp = r(6, 100).log_softmax(-1), r(6, 100).log_softmax(-1)
        got = torch.stack([m["jsd"].jsd_forward(lq.clone(), lp, None, beta, -100, False)[0] for beta in (0.5, 0.3)])
        return got, torch.stack([_jsd_ref(lq, lp, 0.5), _jsd_ref(lq, lp, 0.3)]), 1e-5
    raise AssertionError(name)


NAMES = ["rms_norm", "layer_norm", "rope", "swiglu", "geglu", "cross_entropy", "softmax", "kl_div", "jsd",
         "fused_add_rms_norm"]


@pytest.mark.sampled
@pytest.mark.parametrize("name,target", cases(NAMES))
def test_liger_forward(liger, name, target):
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    with use_target(target):
        got, want, tol = run_case(name, liger, g)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def _upstream_sized(m, name, g):
    """Liger's op on a 32000-wide vocabulary, its host function choosing BLOCK_SIZE as on a GPU
    (32768: a 128 KB fp32 row tile)."""
    V = 32000
    if name == "cross_entropy":
        logits, tgt = torch.randn(4, V, generator=g) * 2, torch.randint(0, V, (4,), generator=g)
        tgt[2] = -100
        got = m["cross_entropy"].cross_entropy_forward(logits.clone(), tgt, None, -100, 0.0, 0.0, "mean", None,
                                                       False)[0]
        return got, F.cross_entropy(logits, tgt, ignore_index=-100)
    lq, lp = torch.randn(4, V, generator=g).log_softmax(-1), torch.randn(4, V, generator=g).log_softmax(-1)
    return m["jsd"].jsd_forward(lq.clone(), lp, None, 0.5, -100, False)[0], _jsd_ref(lq, lp, 0.5)


@pytest.mark.parametrize("policy", ["strict", pytest.param("fast", marks=pytest.mark.slow)])
@pytest.mark.parametrize("arch", ["xpu2", "xpu3"])
@pytest.mark.parametrize("name", ["cross_entropy", "jsd"])
@pytest.mark.sampled
def test_liger_at_upstream_block_sizes_on_kunlun(liger, name, arch, policy):
    """Liger's cross-entropy and JSD at the block size they launch with (BLOCK_SIZE 32768) on kunlun,
    which refused them with LMBudgetError before its plan cut a branch's tiles (the cross-entropy's
    row tile lies behind its early return for ignored rows): close to torch, and in strict bitwise
    equal to cpu."""
    from compiler import numerics  # noqa: PLC0415
    with use_target(f"kunlun:{arch}"), numerics(policy):
        got, want = _upstream_sized(liger, name, torch.Generator().manual_seed(7))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if policy == "strict":
        with use_target("cpu"), numerics(policy):
            assert torch.equal(got, _upstream_sized(liger, name, torch.Generator().manual_seed(7))[0])
