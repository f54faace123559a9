"""Every library op a Llama-style model and its serving loop use, with each target's default config,
in fp32/fp16/bf16, both policies, on kunlun:xpu2 and kunlun:xpu3 (host emulation): it fits local
memory (the renderer's plan), builds through the emulation (which enforces the dialect lint and the
fence rules) and equals the cpu target, bitwise in strict. Decode and prefill shapes with GQA and
head_dim 64 and 128. Slow tier: about 300 kernel builds on a fresh cache."""
import pytest
import torch

import kernels as KL
import kernels.activation as AC
import kernels.embedding as EM
import kernels.kv_cache as KV
import kernels.quant_matmul as QM
import kernels.rope as RP
import kernels.sampling as SM
import kernels.serving_attention as SA
import targets.kunlun
from compiler import numerics, use_target
from compiler.target import register_target

register_target("kunlun", targets.kunlun.TARGET)

pytestmark = pytest.mark.slow
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _r(*shape, dt, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dt)


def _kv_cache_write(dt):
    k, v = _r(5, 2, 64, dt=dt, seed=30), _r(5, 2, 64, dt=dt, seed=31)
    slots = torch.tensor([3, 0, -1, 9, 4])

    def run():
        kc, vc = torch.zeros(3, 4, 2, 64, dtype=dt), torch.zeros(3, 4, 2, 64, dtype=dt)   # 3 pages of 4 slots
        KV.kv_cache_write(k, v, kc, vc, slots)
        return kc, vc
    return run


def _paged_decode(dt, d):
    q = _r(3, 8, d, dt=dt, seed=40)
    kc, vc = _r(6, 16, 2, d, dt=dt, seed=41), _r(6, 16, 2, d, dt=dt, seed=42)   # 6 pages of 16 slots
    bt, lens = torch.tensor([[0, 3], [1, 4], [2, 5]], dtype=torch.int32), torch.tensor([20, 32, 7], dtype=torch.int32)
    return lambda: SA.paged_decode_attention(q, kc, vc, bt, lens)


def _cases(dt):
    """name -> a call returning tensors; fresh inputs of dtype `dt`, Llama-like shapes."""
    x, res, w, b = (_r(7, 256, dt=dt, seed=1) * 2, _r(7, 256, dt=dt, seed=2), _r(256, dt=dt, seed=3),
                    _r(256, dt=dt, seed=4))
    a, wt, bias = _r(19, 96, dt=dt, seed=5), _r(96, 80, dt=dt, seed=6), _r(80, dt=dt, seed=7)
    q, k, v = _r(1, 8, 33, 64, dt=dt, seed=8), _r(1, 2, 33, 64, dt=dt, seed=9), _r(1, 2, 33, 64, dt=dt, seed=10)
    qd, kd, vd = (_r(2, 8, 1, 128, dt=dt, seed=11), _r(2, 2, 70, 128, dt=dt, seed=12),
                  _r(2, 2, 70, 128, dt=dt, seed=13))
    rq, rk, pos = _r(5, 8, 128, dt=dt, seed=14), _r(5, 2, 128, dt=dt, seed=15), torch.tensor([0, 7, 3, 99, 12])
    cos, sin = RP.rope_cos_sin(128, 128)
    w8, s8 = QM.quantize_int8(_r(96, 80, dt=torch.float32, seed=16), group_size=32)
    logits = _r(4, 1000, dt=dt, seed=17) * 3
    table, ids = _r(50, 128, dt=dt, seed=18), torch.tensor([4, 0, 49, 7, 7])
    return {
        "matmul_bias_silu": lambda: KL.matmul(a, wt, bias, "silu"),
        "w8_matmul": lambda: QM.w8_matmul(a, w8, s8, group_size=32),
        "rms_norm": lambda: KL.rms_norm(x, w),
        "add_rms_norm": lambda: KL.add_rms_norm(x, res, w),
        "layer_norm": lambda: KL.layer_norm(x, w, b),
        "attention_prefill_gqa_d64": lambda: KL.attention(q, k, v, causal=True),
        "attention_decode_gqa_d128": lambda: KL.attention(qd, kd, vd),
        "rope_d128": lambda: RP.rope(rq, rk, cos, sin, pos, rotary_dim=128),
        "silu_and_mul": lambda: AC.silu_and_mul(_r(6, 2 * 160, dt=dt, seed=19)),
        "embedding": lambda: EM.embedding(ids, table),
        "kv_cache_write": _kv_cache_write(dt),
        "paged_decode_d64": _paged_decode(dt, 64),
        "paged_decode_d128": _paged_decode(dt, 128),
        "log_softmax": lambda: SM.log_softmax(logits),
        "greedy": lambda: SM.greedy(logits),
    }


NAMES = sorted(_cases(torch.float32))


def _flat(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor)]


@pytest.mark.parametrize("arch", ["xpu2", "xpu3"])
@pytest.mark.parametrize("policy", ["strict", "fast"])
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", NAMES)
def test_library_op_default_config_on_kunlun_equals_cpu(name, dtype, policy, arch):
    dt = DTYPES[dtype]
    call = _cases(dt)[name]
    with use_target(f"kunlun:{arch}"), numerics(policy):
        got = _flat(call())
    with use_target("cpu"), numerics(policy):
        ref = _flat(call())
    assert len(got) == len(ref) > 0
    for g, r in zip(got, ref):
        if policy == "strict" or not r.dtype.is_floating_point:
            assert torch.equal(g.view(torch.uint8) if g.dtype.is_floating_point else g,
                               r.view(torch.uint8) if r.dtype.is_floating_point else r), name
        else:
            tol = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[r.dtype]
            torch.testing.assert_close(g.float(), r.float(), rtol=tol, atol=tol)
