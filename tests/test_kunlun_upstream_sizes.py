"""Triton-style kernels at the block sizes their authors launch them with (tests/kunlun_triton_style.py)
run on kunlun:xpu3 in host emulation, whose LM check enforces the 8 KB limit on what the memory plan
emits, against torch: a row softmax with BLOCK 8192, a layer norm with BLOCK 1024 over 4096
columns, a grouped matmul with 64x64x32 tiles and loop-carried pointer tiles, a causal flash
attention with 64x64 tiles and head_dim 128, a cross-entropy over a 32K vocabulary with int64
labels. Without the plan every one of them is refused for LM."""
from __future__ import annotations

import math

import pytest

import torch
import torch.nn.functional as F

import targets.kunlun
from compiler import use_target
from compiler.target import register_target

import kunlun_triton_style as K  # tests/ is on sys.path (conftest.py lives there)

pytestmark = pytest.mark.emulation

register_target("kunlun", targets.kunlun.TARGET)
TARGET = "kunlun:xpu3"


def _g(seed):
    return torch.Generator().manual_seed(seed)


def test_softmax_block_8192():
    x = torch.randn(3, 5000, generator=_g(1)) * 3
    out = torch.empty_like(x)
    with use_target(TARGET):
        K.softmax_rows[(3,)](out, x, x.stride(0), out.stride(0), 5000, BLOCK=8192)
    torch.testing.assert_close(out, torch.softmax(x, 1), rtol=1e-5, atol=1e-6)


def test_layer_norm_block_1024_over_4096():
    x, w, b = torch.randn(2, 4096, generator=_g(2)), torch.randn(4096, generator=_g(3)), torch.randn(4096, generator=_g(4))
    y, mean, rstd = torch.empty_like(x), torch.empty(2), torch.empty(2)
    with use_target(TARGET):
        K.layer_norm_rows[(2,)](x, y, w, b, mean, rstd, x.stride(0), 4096, 1e-5, BLOCK=1024)
    torch.testing.assert_close(y, F.layer_norm(x, (4096,), w, b, 1e-5), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mean, x.mean(1), rtol=1e-5, atol=1e-6)


def test_grouped_matmul_64x64x32_tiles():
    M, N, Kd = 128, 128, 96
    a, b = torch.randn(M, Kd, generator=_g(5)), torch.randn(Kd, N, generator=_g(6))
    c = torch.empty(M, N)
    with use_target(TARGET):
        K.matmul_grouped[(math.ceil(M / 64) * math.ceil(N / 64),)](
            a, b, c, M, N, Kd, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=2)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def test_causal_flash_attention_64x64_head_dim_128():
    Z, H, T, D = 1, 2, 96, 128
    q, k, v = (torch.randn(Z, H, T, D, generator=_g(7 + i)) for i in range(3))
    out, lse = torch.empty_like(q), torch.empty(Z * H, T)
    scale = D ** -0.5
    with use_target(TARGET):
        K.flash_attn_fwd[(math.ceil(T / 64), Z * H)](q, k, v, out, lse, scale, *q.stride(), *k.stride(), *v.stride(),
                                                      *out.stride(), H, T, HEAD_DIM=D, BLOCK_M=64, BLOCK_N=64,
                                                      CAUSAL=True)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)


def test_cross_entropy_32k_vocab_int64_labels():
    V = 32000
    x = torch.randn(3, V, generator=_g(10)) * 2
    labels = torch.tensor([5, V - 1, -100], dtype=torch.int64)
    loss, grad = torch.empty(3), x.clone()
    with use_target(TARGET):
        K.cross_entropy_fwd[(3,)](grad, grad.stride(0), labels, loss, V, -100, BLOCK=4096)
    want = F.cross_entropy(x, labels, ignore_index=-100, reduction="none")
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    p = torch.softmax(x, 1)
    p[0, 5] -= 1
    p[1, V - 1] -= 1
    p[2] = 0
    torch.testing.assert_close(grad, p, rtol=1e-5, atol=1e-6)
