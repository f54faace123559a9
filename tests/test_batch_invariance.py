"""Batch invariance of the library kernels (DESIGN.md, numerics contract rule 3), bitwise:

row i of an output is the same whether it was computed alone or inside batches of 2, 3, 16, 100
and 256 rows or inside a permuted batch (matmul: rows of A; norms: rows; attention: one sequence
alone vs inside a batch of other sequences, and decode vs the last row of a causal prefill), and
20 repeated calls give identical bits. Run under both numerics policies.
"""
import pytest
from tiers import on_targets
import torch

from compiler import numerics
from kernels import add_rms_norm, attention, layer_norm, matmul, rms_norm

pytestmark = pytest.mark.compile

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
BATCHES = (2, 3, 16, 100, 256)
POLICIES = ("fast", "strict")


@pytest.fixture(params=POLICIES)
def policy(request):
    with numerics(request.param):
        yield request.param


def randn(*shape, dtype=F32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _perm(n, seed=99):
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))


def assert_rows_invariant(fn, X, n_rows=256):
    """fn maps a batch (leading dim = rows) to an output with the same leading dim."""
    alone = torch.cat([fn(X[i:i + 1]) for i in range(n_rows)])
    for m in BATCHES:
        out = fn(X[:m])
        assert torch.equal(out, alone[:m]), f"rows differ inside a batch of {m}"
    p = _perm(n_rows)
    out = fn(X[p])
    assert torch.equal(out, alone[p]), "rows differ inside a permuted batch"
    # 20 repeated calls on the full batch: identical bits
    first = fn(X)
    for _ in range(20):
        assert torch.equal(fn(X), first)


# =============================================================================================
# matmul: rows of A (M = 1 and M > 1 are separate specialisations; the config ignores M)
# =============================================================================================
@pytest.mark.sampled
@pytest.mark.parametrize("dtype,bias,activation", [(F32, False, None), (BF16, True, "gelu")], ids=str)
def test_matmul_rows_of_a(policy, dtype, bias, activation):
    K, N = 129, 100
    A = randn(256, K, dtype=dtype, seed=1)
    B = randn(K, N, dtype=dtype, seed=2)
    b = randn(N, dtype=dtype, seed=3) if bias else None
    assert_rows_invariant(lambda a: matmul(a, B, bias=b, activation=activation), A)


# targets that declare matmul's tiles bit-neutral, with the row blocks each proves it for (the
# Kunlun host emulation builds more slowly: fewer blocks, among them ones its memory plan cuts)
CHAINING = {"cpu": (1, 2, 4, 8, 16, 32, 64, 128), "kunlun:xpu2": (1, 8, 64)}


@pytest.mark.sampled
@pytest.mark.parametrize("target", on_targets(*CHAINING))
@pytest.mark.parametrize("dtype,bias,activation", [(F32, False, None), (BF16, True, "gelu")], ids=str)
def test_target_declares_block_m_bit_neutral_and_proves_it(policy, target, dtype, bias, activation):
    """cpu and kunlun declare matmul's BLOCK_M bit-neutral (each element of C is one ascending-k
    fma chain whatever the row block), so BLOCK_M may follow M there: every BLOCK_M gives the same
    bits, and config_for shrinks it for small M there only."""
    import kernels
    from compiler import get_target, use_target
    M, K, N = 37, 129, 100
    A, B = randn(M, K, dtype=dtype, seed=4), randn(K, N, dtype=dtype, seed=5)
    b = randn(N, dtype=dtype, seed=6) if bias else None
    base = kernels.config_for("matmul", target, N=N, K=K)
    with use_target(target):
        outs = [matmul(A, B, bias=b, activation=activation, config={**base, "BLOCK_M": bm})
                for bm in CHAINING[target]]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    assert "BLOCK_M" in get_target(target).caps.bit_neutral
    assert kernels.config_for("matmul", target, M=2, N=N, K=K)["BLOCK_M"] == 2
    # gpu: no such declaration (tl.dot's order may follow the tile shape), so BLOCK_M stays put
    assert "BLOCK_M" not in get_target("gpu:sm_90").caps.bit_neutral
    assert kernels.config_for("matmul", "gpu:sm_90", M=2, N=N, K=K) == kernels.config_for("matmul", "gpu:sm_90", N=N, K=K)


@pytest.mark.sampled
@pytest.mark.parametrize("target", on_targets(*CHAINING))
@pytest.mark.parametrize("dtype,transposed", [(F32, False), (F32, True), (BF16, True)], ids=str)
def test_dot_chains_across_tiles_so_decode_may_pick_its_tiles(policy, target, dtype, transposed):
    """On cpu and kunlun a dot is one ascending-k fma chain per output element that continues
    across K tiles (Caps.dot_chains_across_tiles): every BLOCK_N and BLOCK_K (a multiple of the
    target's dot_k_grain: 32 for a bf16 dot on AMX) gives the same bits, so a decode call (M <= 16)
    may take its own tiles (matmul's dot_tiles) there, and only there. The outputs are fp32, so
    that a difference in the accumulation is not hidden by the rounding to bf16."""
    import kernels
    from compiler import get_target, use_target
    from kernels.matmul import SPEC
    M, K, N = 5, 1000, 200
    A = randn(M, K, dtype=dtype, seed=7)
    B = randn(N, K, dtype=dtype, seed=8).t() if transposed else randn(K, N, dtype=dtype, seed=8)
    caps = get_target(target).caps
    least = max(16, caps.dot_k_grain)
    tiles = ((16, least), (64, 512), (128, 32), (128, 128), (32, 1024)) if target == "cpu" \
        else ((16, 32), (64, 8), (32, 16))
    with use_target(target):
        outs = [matmul(A, B, config={"BLOCK_M": 8, "BLOCK_N": bn, "BLOCK_K": bk}, out_dtype=torch.float32)
                for bn, bk in tiles]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    assert caps.dot_chains_across_tiles
    # a K tile below the grain is launched at the grain (a stored or default config)
    assert SPEC.launched({"BLOCK_M": 8, "BLOCK_N": 16, "BLOCK_K": 16}, {"M": M, "N": N, "K": K}, policy,
                         caps)["BLOCK_K"] == least
    one, many = (kernels.config_for("matmul", target, M=m, N=4096, K=4096) for m in (1, 1000))
    assert one != many   # decode's own config (kunlun's differs in BLOCK_M: teams that share B)
    if target == "cpu":   # decode tiles by B's layout: rows of B contiguous, or B read down its columns
        down = kernels.config_for("matmul", target, M=1, N=4096, K=4096, b_row_major=False)
        assert (one["BLOCK_N"], one["BLOCK_K"], down["BLOCK_N"], down["BLOCK_K"], many["BLOCK_K"]) == (2048, 32, 64, 512, 64)
    assert not get_target("gpu:sm_90").caps.dot_chains_across_tiles
    one, many = (kernels.config_for("matmul", "gpu:sm_90", M=m, N=4096, K=4096) for m in (1, 1000))
    assert one == many


@pytest.mark.no_toolchain
def test_batch_dims_choose_only_free_params():
    """A default that reads a batch dim keeps what it chose only for the params that cannot change
    a bit on the target; the rest is the default of the key dims alone."""
    import dataclasses
    from compiler import get_target
    from kernels.matmul import SPEC
    spec = dataclasses.replace(SPEC, defaults={"cache": lambda d: {"BLOCK_M": 8, "BLOCK_N": 16, "BLOCK_K": 8}
                                               if d.get("M") == 1 else {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}})
    cpu = get_target("cpu").caps
    dims = {"M": 1, "N": 64, "K": 64}
    assert spec.default_config(cpu, dims) == {"BLOCK_M": 8, "BLOCK_N": 16, "BLOCK_K": 8}
    no_dot = dataclasses.replace(cpu, dot_chains_across_tiles=False)
    assert spec.default_config(no_dot, dims) == {"BLOCK_M": 8, "BLOCK_N": 64, "BLOCK_K": 64}
    neither = dataclasses.replace(no_dot, bit_neutral=frozenset())
    assert spec.default_config(neither, dims) == {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}


def test_matmul_batched_3d_slices(policy):
    # batch element z of a 3-D matmul equals the 2-D matmul of that slice
    A, B = randn(4, 33, 129, seed=4), randn(4, 129, 20, seed=5)
    out = matmul(A, B)
    for z in range(4):
        assert torch.equal(out[z], matmul(A[z], B[z]))


# =============================================================================================
# norms: rows (the row count is never a kernel argument; BLOCK depends on the row length only)
# =============================================================================================
@pytest.mark.parametrize("op,N,dtype", [("layer_norm", 3000, BF16), ("rms_norm", 3000, BF16),
                                        ("add_rms_norm", 3000, BF16), ("rms_norm", 1000, F32)], ids=str)
@pytest.mark.sampled
def test_norm_rows(policy, op, N, dtype):
    X = randn(256, N, dtype=dtype, seed=10)
    R = randn(256, N, dtype=dtype, seed=11)
    w, b = randn(N, dtype=dtype, seed=12), randn(N, dtype=dtype, seed=13)
    if op == "layer_norm":
        fn = lambda x: layer_norm(x, w, b, 1e-5)  # noqa: E731
        assert_rows_invariant(fn, X)
    elif op == "rms_norm":
        assert_rows_invariant(lambda x: rms_norm(x, w, 1e-6), X)
    else:
        # carry the residual alongside x: both outputs must be row-invariant
        XR = torch.stack([X, R], dim=1)   # [rows, 2, N]

        def fn(xr):
            normed, res = add_rms_norm(xr[:, 0], xr[:, 1], w, 1e-6)
            return torch.stack([normed, res], dim=1)
        assert_rows_invariant(fn, XR)


# =============================================================================================
# attention: one sequence alone vs inside a batch of others; decode vs prefill
# =============================================================================================
@pytest.mark.parametrize("Hq,Hkv,Sq,Sk,D,dtype,causal", [
    (4, 2, 40, 40, 64, F16, True),      # causal GQA prefill
    (2, 2, 1, 300, 80, BF16, False),    # decode: one query over a long KV, padded head dim
], ids=str)
@pytest.mark.sampled
def test_attention_sequences(policy, Hq, Hkv, Sq, Sk, D, dtype, causal):
    n = 256 if Sq == 1 else 100
    Q = randn(n, Hq, Sq, D, dtype=dtype, seed=20)
    K = randn(n, Hkv, Sk, D, dtype=dtype, seed=21)
    V = randn(n, Hkv, Sk, D, dtype=dtype, seed=22)

    def run(idx):
        out, lse = attention(Q[idx], K[idx], V[idx], causal=causal, return_lse=True)
        return out, lse

    alone = [run(slice(i, i + 1)) for i in range(n)]
    alone_out = torch.cat([a[0] for a in alone])
    alone_lse = torch.cat([a[1] for a in alone])
    for m in BATCHES:
        if m > n:
            continue
        out, lse = run(slice(0, m))
        assert torch.equal(out, alone_out[:m]) and torch.equal(lse, alone_lse[:m]), f"batch of {m}"
    p = _perm(n)
    out, lse = run(p)
    assert torch.equal(out, alone_out[p]) and torch.equal(lse, alone_lse[p]), "permuted batch"
    first = run(slice(None))
    for _ in range(20):
        again = run(slice(None))
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])


def test_attention_decode_matches_prefill_last_row(policy):
    # a causal prefill over S tokens, then decoding the last token alone against the same KV
    S, D = 300, 64
    q = randn(2, 4, S, D, dtype=F16, seed=30)
    k, v = randn(2, 2, S, D, dtype=F16, seed=31), randn(2, 2, S, D, dtype=F16, seed=32)
    pre, pre_lse = attention(q, k, v, causal=True, return_lse=True)
    dec, dec_lse = attention(q[:, :, -1:], k, v, causal=True, return_lse=True)
    assert torch.equal(dec, pre[:, :, -1:]) and torch.equal(dec_lse, pre_lse[:, :, -1:])


def test_policy_reaches_the_compiled_kernels(policy):
    from kernels.matmul import matmul_kernel
    matmul(randn(3, 5), randn(5, 4))
    assert any(key[1] == policy for key in matmul_kernel.compiled)
