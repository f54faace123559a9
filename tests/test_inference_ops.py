"""Inference ops (rope, act-and-mul, kv-cache write, embedding, add_layer_norm, sampling, serving
attention, int8 matmul):
each against its fp64 reference in fp32/fp16/bf16 on cpu; on kunlun (host emulation) and
gpu:interpret (the Triton interpreter) against the cpu target, bitwise in strict and within
tolerance in fast; batch invariance with torch.equal (a token/row alone vs inside batches of 2, 3,
16 and a permuted batch); clear errors for bad arguments."""
import pytest
from tiers import on_targets
import torch

import targets.kunlun
from compiler import numerics, use_target
from compiler.launch_record import recording
from compiler.target import register_target
import kernels.activation as AC
import kernels.add_norm as AN
import kernels.embedding as EM
import kernels.kv_cache as KV
import kernels.quant_matmul as QM
import kernels.rope as RP
import kernels.sampling as SM
import kernels.serving_attention as SA

pytestmark = pytest.mark.compile

register_target("kunlun", targets.kunlun.TARGET)

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = (F32, F16, BF16)
TOL = {F32: dict(rtol=1e-5, atol=1e-5), F16: dict(rtol=1e-3, atol=1e-3), BF16: dict(rtol=8e-3, atol=8e-3)}


def _g(seed):
    return torch.Generator().manual_seed(seed)


def randn(*shape, dtype=F32, seed=0):
    return torch.randn(*shape, generator=_g(seed)).to(dtype)


def _bits(out):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.clone() for o in outs if o is not None]


def assert_same(got, ref, policy):
    for g, r in zip(_bits(got), _bits(ref)):
        if policy == "strict" or not r.dtype.is_floating_point:
            assert torch.equal(g.view(torch.uint8) if g.dtype.is_floating_point else g,
                               r.view(torch.uint8) if r.dtype.is_floating_point else r)
        else:
            torch.testing.assert_close(g.float(), r.float(), **TOL.get(r.dtype, TOL[F32]))


def run_on(target, policy, fn):
    with use_target(target), numerics(policy):
        return _bits(fn())


def assert_batch_invariant(fn, n, rows_of):
    """fn(index tensor of rows) -> output; rows_of(out) splits it per input row."""
    alone = [rows_of(fn(torch.tensor([i])))[0] for i in range(n)]
    for m in (2, 3, 16):
        out = rows_of(fn(torch.arange(m)))
        for i in range(m):
            assert torch.equal(out[i], alone[i]), f"row {i} differs inside a batch of {m}"
    p = torch.randperm(n, generator=_g(99))
    out = rows_of(fn(p))
    for j, i in enumerate(p.tolist()):
        assert torch.equal(out[j], alone[i]), "rows differ inside a permuted batch"


TARGETS = on_targets("kunlun:xpu3", "kunlun:xpu2", "gpu:interpret")
POLICIES = ("fast", "strict")


# =============================================================================================
# rope
# =============================================================================================
def _rope_inputs(dtype, tokens=6, hq=3, hk=2, D=64, seed=1):
    q, k = randn(tokens, hq, D, dtype=dtype, seed=seed), randn(tokens, hk, D, dtype=dtype, seed=seed + 1)
    pos = torch.randint(0, 200, (tokens,), generator=_g(seed + 2))
    return q, k, pos


@pytest.mark.sampled
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rot", [64, 32, 18])
def test_rope_matches_reference(dtype, neox, rot):
    q, k, pos = _rope_inputs(dtype)
    cos, sin = RP.rope_cos_sin(200, rot)
    qo, ko = RP.rope(q, k, cos, sin, pos, rotary_dim=rot, neox=neox)
    qr, kr = RP.rope_ref(q, k, cos, sin, pos, rotary_dim=rot, neox=neox)
    # fp32 arithmetic, one rounding: within one ulp of the fp64 reference's rounding
    torch.testing.assert_close(qo, qr, **TOL[dtype])
    torch.testing.assert_close(ko, kr, **TOL[dtype])
    assert torch.equal(qo[..., rot:], q[..., rot:])   # pass-through dims copied
    # in place: the same bits written into q and k
    q2, k2 = q.clone(), k.clone()
    a, b = RP.rope(q2, k2, cos, sin, pos, rotary_dim=rot, neox=neox, inplace=True)
    assert a is q2 and b is k2 and torch.equal(q2, qo) and torch.equal(k2, ko)


def test_rope_q_only_int32_positions_and_table_dtype():
    q, _, pos = _rope_inputs(BF16)
    cos, sin = RP.rope_cos_sin(200, 64, dtype=BF16)
    qo, ko = RP.rope(q, None, cos, sin, pos.to(torch.int32))
    assert ko is None
    torch.testing.assert_close(qo, RP.rope_ref(q, None, cos, sin, pos)[0], **TOL[BF16])


@pytest.mark.sampled
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("policy", POLICIES)
def test_rope_matches_cpu_on_other_targets(target, policy):
    q, k, pos = _rope_inputs(F16, tokens=5, hq=5, hk=3, D=80)
    cos, sin = RP.rope_cos_sin(200, 48)
    for neox in (True, False):
        fn = lambda: RP.rope(q, k, cos, sin, pos, rotary_dim=48, neox=neox)   # noqa: E731
        assert_same(run_on(target, policy, fn), run_on("cpu", policy, fn), policy)


@pytest.mark.parametrize("policy", POLICIES)
def test_rope_batch_invariant(policy):
    q, k, pos = _rope_inputs(BF16, tokens=20, hq=4, hk=2, D=64)
    cos, sin = RP.rope_cos_sin(200, 64)
    with numerics(policy):
        assert_batch_invariant(lambda idx: RP.rope(q[idx], k[idx], cos, sin, pos[idx], neox=False), 20,
                               lambda out: [torch.cat([out[0][i].flatten(), out[1][i].flatten()])
                                            for i in range(out[0].shape[0])])


@pytest.mark.no_toolchain
def test_rope_bad_arguments():
    q, k, pos = _rope_inputs(F32)
    cos, sin = RP.rope_cos_sin(200, 64)
    with pytest.raises(ValueError, match="rope: rotary_dim must be an even int"):
        RP.rope(q, k, cos, sin, pos, rotary_dim=33)
    with pytest.raises(ValueError, match="rope: argument 'positions' has values"):
        RP.rope(q, k, cos, sin, pos + 1000)
    with pytest.raises(TypeError, match="rope: argument 'k' has dtype"):
        RP.rope(q, k.half(), cos, sin, pos)
    with pytest.raises(TypeError, match="rope: argument 'positions' has dtype float32"):
        RP.rope(q, k, cos, sin, pos.float())
    with pytest.raises(ValueError, match=r"rope: cos must be \[max_pos, rotary_dim // 2 = 16\]"):
        RP.rope(q, k, cos, sin, pos, rotary_dim=32)


# =============================================================================================
# act-and-mul
# =============================================================================================
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", sorted(AC.ACTS))
@pytest.mark.sampled
def test_act_and_mul_matches_reference(dtype, act):
    x = randn(3, 5, 2 * 300, dtype=dtype, seed=3) * 3
    y = AC.act_and_mul(x, act)
    assert y.shape == (3, 5, 300) and y.dtype == dtype
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == F32 else TOL[dtype]   # erf: |error| <= 1.5e-7
    torch.testing.assert_close(y, AC.act_and_mul_ref(x, act), **tol)
    out = torch.empty_like(y)
    assert AC.act_and_mul(x, act, out=out) is out and torch.equal(out, y)


def test_silu_and_gelu_and_mul_names():
    x = randn(4, 64, seed=4)
    assert torch.equal(AC.silu_and_mul(x), AC.act_and_mul(x, "silu"))
    assert torch.equal(AC.gelu_and_mul(x), AC.act_and_mul(x, "gelu_tanh"))
    assert torch.equal(AC.gelu_and_mul(x, "none"), AC.act_and_mul(x, "gelu_erf"))
    # the non-contiguous input is read correctly
    xt = randn(64, 8, seed=5).t()
    torch.testing.assert_close(AC.silu_and_mul(xt), AC.act_and_mul_ref(xt, "silu"), rtol=1e-5, atol=1e-5)


@pytest.mark.sampled
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("policy", POLICIES)
def test_act_and_mul_matches_cpu_on_other_targets(target, policy):
    x = randn(3, 2 * 300, dtype=BF16, seed=6) * 3
    for act in AC.ACTS:
        fn = lambda: AC.act_and_mul(x, act)   # noqa: E731
        assert_same(run_on(target, policy, fn), run_on("cpu", policy, fn), policy)


@pytest.mark.parametrize("policy", POLICIES)
def test_act_and_mul_batch_invariant(policy):
    x = randn(20, 2 * 200, dtype=F16, seed=7)
    with numerics(policy):
        for act in AC.ACTS:
            assert_batch_invariant(lambda idx: AC.act_and_mul(x[idx], act), 20, lambda out: list(out))


@pytest.mark.no_toolchain
def test_act_and_mul_bad_arguments():
    with pytest.raises(ValueError, match="silu_and_mul: the last dim of x must be even"):
        AC.silu_and_mul(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="act_and_mul: activation must be one of"):
        AC.act_and_mul(torch.zeros(2, 4), "relu")
    with pytest.raises(ValueError, match="silu_and_mul: out must be a contiguous"):
        AC.silu_and_mul(torch.zeros(2, 4), out=torch.zeros(2, 3))
    with pytest.raises(TypeError, match="silu_and_mul: argument 'x' has dtype int64"):
        AC.silu_and_mul(torch.zeros(2, 4, dtype=torch.int64))


# =============================================================================================
# kv-cache write
# =============================================================================================
def _kv_inputs(dtype, tokens=7, H=2, D=40, blocks=5, page=4, seed=8):
    k, v = randn(tokens, H, D, dtype=dtype, seed=seed), randn(tokens, H, D, dtype=dtype, seed=seed + 1)
    slots = torch.randperm(blocks * page, generator=_g(seed + 2))[:tokens]
    slots[2] = -1   # a padding token
    kc = torch.full((blocks, page, H, D), 7.0, dtype=dtype)
    return k, v, kc, kc.clone() * 2, slots


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_kv_cache_write_matches_reference(dtype):
    k, v, kc, vc, slots = _kv_inputs(dtype)
    rk, rv = kc.clone(), vc.clone()
    KV.kv_cache_write_ref(k, v, rk, rv, slots)
    KV.kv_cache_write(k, v, kc, vc, slots)
    assert torch.equal(kc, rk) and torch.equal(vc, rv)
    assert not torch.equal(kc, torch.full_like(kc, 7.0))   # something was written
    # int32 slots and a non-contiguous k (token stride) write the same
    kc2, vc2 = torch.full_like(kc, 7.0), torch.full_like(vc, 14.0)
    kbig = torch.cat([k, k], 1)[:, :2]
    KV.kv_cache_write(kbig, v, kc2, vc2, slots.to(torch.int32))
    assert torch.equal(kc2, rk) and torch.equal(vc2, rv)


@pytest.mark.parametrize("target", TARGETS)
def test_kv_cache_write_matches_cpu_on_other_targets(target):
    k, v, kc, vc, slots = _kv_inputs(F16, D=96)

    def fn():
        a, b = kc.clone(), vc.clone()
        KV.kv_cache_write(k, v, a, b, slots)
        return a, b
    assert_same(run_on(target, "strict", fn), run_on("cpu", "strict", fn), "strict")


@pytest.mark.no_toolchain
def test_kv_cache_write_bad_arguments():
    k, v, kc, vc, slots = _kv_inputs(F32)
    with pytest.raises(ValueError, match=r"kv_cache_write: argument 'slot_mapping' has values in \[-?\d+, 99\]"):
        KV.kv_cache_write(k, v, kc, vc, torch.full_like(slots, 99))
    with pytest.raises(TypeError, match="kv_cache_write: argument 'k_cache' has dtype"):
        KV.kv_cache_write(k, v, kc.half(), vc, slots)
    with pytest.raises(ValueError, match="kv_cache_write: k_cache has shape"):
        KV.kv_cache_write(k, v, kc[:, :, :1], vc, slots)
    with pytest.raises(ValueError, match="kv_cache_write: slot_mapping has 3 entries"):
        KV.kv_cache_write(k, v, kc, vc, slots[:3])


# =============================================================================================
# embedding
# =============================================================================================
@pytest.mark.sampled
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("id_dtype", [torch.int32, torch.int64], ids=str)
def test_embedding_matches_reference(dtype, id_dtype):
    table = randn(50, 300, dtype=dtype, seed=9)
    ids = torch.randint(0, 50, (3, 7), generator=_g(10)).to(id_dtype)
    out = EM.embedding(ids, table)
    assert out.shape == (3, 7, 300) and torch.equal(out, EM.embedding_ref(ids, table))


@pytest.mark.parametrize("target", TARGETS)
def test_embedding_matches_cpu_on_other_targets(target):
    table, ids = randn(50, 200, dtype=BF16, seed=11), torch.randint(0, 50, (9,), generator=_g(12))
    fn = lambda: EM.embedding(ids, table)   # noqa: E731
    assert_same(run_on(target, "strict", fn), run_on("cpu", "strict", fn), "strict")


@pytest.mark.no_toolchain
def test_embedding_bad_ids():
    with pytest.raises(ValueError, match=r"embedding: argument 'ids' has values in \[0, 50\], outside"):
        EM.embedding(torch.tensor([0, 50]), torch.zeros(50, 4))
    with pytest.raises(TypeError, match="embedding: argument 'ids' has dtype float32"):
        EM.embedding(torch.tensor([0.0]), torch.zeros(50, 4))


# =============================================================================================
# add_layer_norm
# =============================================================================================
def _aln_inputs(dtype, rows=9, N=300, seed=13):
    return (randn(rows, N, dtype=dtype, seed=seed) * 2 + 1, randn(rows, N, dtype=dtype, seed=seed + 1),
            randn(N, dtype=dtype, seed=seed + 2), randn(N, dtype=dtype, seed=seed + 3))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.sampled
def test_add_layer_norm_matches_reference_and_layer_norm(dtype, policy):
    import kernels   # noqa: PLC0415
    x, r, w, b = _aln_inputs(dtype)
    with numerics(policy):
        y, s = AN.add_layer_norm(x, r, w, b)
        ry, rs = AN.add_layer_norm_ref(x, r, w, b)
        assert torch.equal(s, rs)
        torch.testing.assert_close(y, ry, **(dict(rtol=2e-5, atol=2e-5) if dtype == F32 else TOL[dtype]))
        # the same passes as layer_norm on the rounded sum: equal bits with the same BLOCK
        cfg = kernels.config_for("add_layer_norm", None, N=x.shape[-1])
        assert cfg["BLOCK"] == (64 if policy == "strict" else kernels.config_for("layer_norm", None, N=300)["BLOCK"])
        assert torch.equal(y, kernels.layer_norm(s, w, b, config=cfg))
        y2, _ = AN.add_layer_norm(x, r)
        torch.testing.assert_close(y2, AN.add_layer_norm_ref(x, r)[0], **(dict(rtol=2e-5, atol=2e-5) if dtype == F32
                                                                           else TOL[dtype]))


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("N, BLOCK", [(300, 512), (256, 256)])
def test_add_layer_norm_of_one_chunk_has_the_bits_of_the_passes(dtype, N, BLOCK):
    """A row of one chunk computes x + r once and keeps it (ONE_CHUNK); its outputs equal, bitwise,
    those of the three passes that recompute it, with the same BLOCK (EVEN: N == BLOCK)."""
    x, r, w, b = _aln_inputs(dtype, N=N)
    outs = []
    for one in (False, True):
        y, s = torch.empty_like(x), torch.empty_like(x)
        AN.add_layer_norm_kernel[(x.shape[0],)](x, r, w, b, y, s, N, N, 1, N, 1, N, 1e-5, HAS_W=True, HAS_B=True,
                                                BLOCK=BLOCK, ONE_CHUNK=one, EVEN=one and N == BLOCK)
        outs.append((y, s))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


@pytest.mark.sampled
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("policy", POLICIES)
def test_add_layer_norm_matches_cpu_on_other_targets(target, policy):
    x, r, w, b = _aln_inputs(F16, rows=5)
    fn = lambda: AN.add_layer_norm(x, r, w, b)   # noqa: E731
    assert_same(run_on(target, policy, fn), run_on("cpu", policy, fn), policy)


@pytest.mark.parametrize("policy", POLICIES)
def test_add_layer_norm_batch_invariant(policy):
    x, r, w, b = _aln_inputs(BF16, rows=20, N=3000)
    with numerics(policy):
        assert_batch_invariant(lambda idx: AN.add_layer_norm(x[idx], r[idx], w, b), 20,
                               lambda out: [torch.cat([out[0][i], out[1][i]]) for i in range(out[0].shape[0])])


def test_add_layer_norm_replays_its_launch_plan_with_the_same_bits():
    """A second call with the same signature skips the checks and replays the recorded launch (the
    library ops' hit path): new outputs, the bits of the first call; a residual of another shape
    is still refused by name."""
    x, r, w, b = _aln_inputs(BF16, rows=4, N=256)
    y, s = AN.add_layer_norm(x, r, w, b)
    assert any(AN.ADD_LAYER_NORM_OP.plans.values())
    y2, s2 = AN.add_layer_norm(x, r, w, b)
    assert y2.data_ptr() != y.data_ptr() and torch.equal(y2, y) and torch.equal(s2, s)
    with pytest.raises(ValueError, match="add_layer_norm: residual has shape"):
        AN.add_layer_norm(x, r[:2], w, b)


@pytest.mark.no_toolchain
def test_add_layer_norm_bad_arguments():
    x, r, w, b = _aln_inputs(F32)
    with pytest.raises(ValueError, match="add_layer_norm: residual has shape"):
        AN.add_layer_norm(x, r[:2], w, b)
    with pytest.raises(TypeError, match="add_layer_norm: argument 'residual' has dtype"):
        AN.add_layer_norm(x, r.half(), w, b)
    with pytest.raises(ValueError, match="add_layer_norm: bias has 3 elements"):
        AN.add_layer_norm(x, r, w, b[:3])


# =============================================================================================
# sampling: greedy, softmax, log_softmax
# =============================================================================================
def _logits(dtype, rows=6, V=3000, seed=20):
    x = randn(rows, V, dtype=dtype, seed=seed) * 4
    x[1, 7] = x[1, V - 500] = x[1].max() + 1   # a tie: the lower index wins
    x[2, -1] = x[2].max() + 1               # the maximum in the last (edge) chunk
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.sampled
def test_greedy_is_argmax_with_ties_to_the_lowest_index(dtype, policy):
    x = _logits(dtype)
    with numerics(policy):
        idx = SM.greedy(x)
        assert idx.dtype == torch.int64 and idx[1] == 7 and idx[2] == 2999
        assert torch.equal(idx, SM.greedy_ref(x))
        for block in (16, 128, 4096):   # any BLOCK: the same index
            assert torch.equal(SM.greedy(x, config={"BLOCK": block}), idx)
        assert SM.greedy(x.reshape(2, 3, -1)).shape == (2, 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.sampled
def test_softmax_and_log_softmax_match_reference(dtype, log):
    x = _logits(dtype)
    f = SM.log_softmax if log else SM.softmax
    for t in (1.0, 0.7):
        y = f(x, t)
        assert y.dtype == dtype
        tol = dict(rtol=1e-5, atol=3e-5 if log else 1e-6) if dtype == F32 else TOL[dtype]
        torch.testing.assert_close(y, SM.softmax_ref(x, t, log), **tol)
    y32 = f(x, out_dtype=torch.float32)
    assert y32.dtype == F32
    torch.testing.assert_close(y32, SM.softmax_ref(x, 1.0, log, out_dtype=F32), rtol=1e-5, atol=3e-5)


# per-row sampling parameters: greedy rows (T = 0), top-k only, top-p only, both, neither
SAMPLING = dict(temperature=torch.tensor([0.7, 1.0, 0.0, 1.3, 0.5, 1.0]), top_k=torch.tensor([40, 0, 5, 0, 100, 1]),
                top_p=torch.tensor([0.8, 0.9, 1.0, 1.0, 0.5, 1.0]), seed=torch.tensor([1, 2, 3, -4, 2 ** 40 + 5, 6]),
                offset=torch.tensor([0, 10, 20, 30, 40, 50]))


@pytest.mark.sampled
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("policy", POLICIES)
def test_sample_matches_reference_draw(dtype, policy):
    """The fp64, sorting reference with the same Philox draws picks the same tokens."""
    x = _logits(dtype)
    with numerics(policy):
        assert torch.equal(SM.sample(x, **SAMPLING), SM.sample_ref(x, **SAMPLING))
        for opts in (dict(), dict(top_k=20), dict(top_p=0.7, temperature=0.6)):
            for seed in (0, 99):
                got = SM.sample(x, seed=seed, offset=3, **opts)
                assert got.dtype == torch.int64 and torch.equal(got, SM.sample_ref(x, seed=seed, offset=3, **opts))
        assert torch.equal(SM.sample(x, top_k=1), SM.greedy(x)) and torch.equal(SM.sample(x, 0.0), SM.greedy(x))
        assert not torch.equal(SM.sample(x, seed=1), SM.sample(x, seed=2))   # the seed chooses the draw


def test_sample_frequencies_follow_the_filtered_softmax():
    """4000 draws (offsets 0..3999) of one row: top-k 4 of 6 then top-p 0.92 of their mass."""
    x = torch.tensor([2.0, 1.0, 0.5, 3.0, -1.0, 0.0])
    n = 4000
    got = SM.sample(x.expand(n, -1), 0.9, 4, 0.92, seed=5, offset=torch.arange(n))
    p = torch.softmax(x / 0.9, -1)
    keep = torch.tensor([True, True, False, True, False, False])   # by mass 3, 0, 1 reach 0.92 of the top 4
    kept = torch.where(keep, p, 0.0)
    kept_top4 = p[[3, 0, 1, 2]].sum()
    assert p[[3, 0]].sum() / kept_top4 < 0.92 <= p[[3, 0, 1]].sum() / kept_top4   # the premise of `keep`
    freq = torch.bincount(got, minlength=6).double() / n
    assert torch.equal(freq > 0, keep)
    torch.testing.assert_close(freq, (kept / kept.sum()).double(), atol=0.03, rtol=0)


def test_sample_keeps_every_tie_of_the_kth_value():
    x = torch.tensor([[5.0, 1.0, 5.0, 4.0, 5.0, 0.0]]).expand(600, -1)
    got = SM.sample(x, 1.0, 2, seed=11, offset=torch.arange(600))
    assert set(got.tolist()) == {0, 2, 4}    # top-2 ties with a third 5.0: all three are kept


@pytest.mark.sampled
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("policy", POLICIES)
def test_sampling_matches_cpu_on_other_targets(target, policy):
    x = _logits(BF16, rows=3, V=700)
    opts = {k: v[:3] for k, v in SAMPLING.items()}
    for fn in (lambda: SM.greedy(x), lambda: SM.softmax(x, 0.8), lambda: SM.log_softmax(x),
               lambda: SM.sample(x, **opts)):
        assert_same(run_on(target, policy, fn), run_on("cpu", policy, fn), policy)


@pytest.mark.parametrize("policy", POLICIES)
def test_sampling_batch_invariant(policy):
    x = _logits(F32, rows=20, V=1500)
    g = _g(21)
    per_row = dict(temperature=torch.rand(20, generator=g) + 0.3, top_k=torch.randint(0, 60, (20,), generator=g),
                   top_p=torch.rand(20, generator=g) * 0.7 + 0.3, seed=torch.arange(20) * 7919, offset=torch.arange(20))
    with numerics(policy):
        assert_batch_invariant(lambda idx: SM.log_softmax(x[idx]), 20, lambda out: list(out))
        assert_batch_invariant(lambda idx: SM.greedy(x[idx]), 20, lambda out: list(out))
        assert_batch_invariant(lambda idx: SM.sample(x[idx], **{k: v[idx] for k, v in per_row.items()}), 20,
                               lambda out: list(out))


@pytest.mark.no_toolchain
def test_sampling_bad_arguments():
    with pytest.raises(ValueError, match="softmax: temperature must be a positive number"):
        SM.softmax(torch.zeros(2, 4), 0.0)
    with pytest.raises(ValueError, match="greedy: logits must have a non-empty last dim"):
        SM.greedy(torch.zeros(2, 0))
    with pytest.raises(TypeError, match="log_softmax: out_dtype must be"):
        SM.log_softmax(torch.zeros(2, 4), out_dtype=torch.float16)
    x = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"sample: argument 'top_p' must be in \(0, 1\], got 0.0"):
        SM.sample(x, top_p=0.0)
    with pytest.raises(ValueError, match="sample: argument 'temperature' must be a finite number >= 0"):
        SM.sample(x, torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="sample: argument 'top_k' has 3 values, expected one per row \\(2\\)"):
        SM.sample(x, top_k=torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="sample: argument 'seed' must be an integer"):
        SM.sample(x, seed=1.5)
    with pytest.raises(ValueError, match="sample: argument 'offset' must be an int32"):
        SM.sample(x, offset=2 ** 31)


# =============================================================================================
# serving attention: varlen prefill, extend and decode; paged and dense; fixed split-KV
# =============================================================================================
def _decode_inputs(dtype, lens=(600, 17, 0, 300), hq=4, hk=2, D=40, page=16, seed=30, q_lens=None):
    """q rows (one per request, or q_lens[b] per request), a paged cache holding each request's
    lens[b] keys on shuffled pages, the block tables and lengths, and cu_seqlens_q."""
    g = _g(seed)
    B, pages = len(lens), -(-max(lens) // page)
    q_lens = [1] * B if q_lens is None else list(q_lens)
    q = torch.randn(sum(q_lens), hq, D, generator=g).to(dtype)
    kc = torch.randn(B * pages, page, hk, D, generator=g).to(dtype)
    vc = torch.randn(B * pages, page, hk, D, generator=g).to(dtype)
    bt = torch.randperm(B * pages, generator=g).reshape(B, pages)
    return q, kc, vc, bt, torch.tensor(lens), torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist())


def _dense(kc, vc, bt, lens):
    ks, vs = SA._gather(kc, bt, lens), SA._gather(vc, bt, lens)
    cu = torch.tensor([0] + torch.cumsum(lens, 0).tolist())
    return ks, vs, torch.cat(ks), torch.cat(vs), cu


MASKS = [dict(), dict(soft_cap=20.0), dict(window=100), dict(soft_cap=5.0, window=300)]
# (queries, keys) per request: an extend over a cached prefix crossing splits, a decode, a request
# without new tokens, a full prefill, queries that see no key (Lq > Lk)
EXTEND = dict(lens=(600, 17, 3, 300, 2), q_lens=(5, 1, 0, 300, 3))


def _opts_id(opts: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in opts.items()) or "causal"


@pytest.mark.sampled
@pytest.mark.parametrize("opts", MASKS, ids=_opts_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("policy", POLICIES)
def test_decode_attention_matches_reference_and_paged_equals_dense(dtype, policy, opts):
    q, kc, vc, bt, lens, _ = _decode_inputs(dtype)
    ks, vs, k, v, cu = _dense(kc, vc, bt, lens)
    with numerics(policy):
        o = SA.paged_decode_attention(q, kc, vc, bt, lens, **opts)
        ref = SA.decode_attention_ref(q, ks, vs, **opts)
        torch.testing.assert_close(o, ref, **(dict(rtol=2e-5, atol=2e-5) if dtype == F32 else TOL[dtype]))
        assert torch.equal(o[2], torch.zeros_like(o[2]))   # a request of length 0
        # the same arithmetic, only the key addresses differ
        assert torch.equal(SA.decode_attention(q, k, v, cu, **opts), o)
        out = torch.empty_like(q)
        assert SA.paged_decode_attention(q, kc, vc, bt, lens, out=out, **opts) is out and torch.equal(out, o)


@pytest.mark.sampled
@pytest.mark.parametrize("opts", MASKS + [dict(causal=False), dict(causal=False, soft_cap=3.0)], ids=_opts_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("policy", POLICIES)
def test_varlen_prefill_and_extend_match_reference_and_paged_equals_dense(dtype, policy, opts):
    q, kc, vc, bt, lens, cu_q = _decode_inputs(dtype, **EXTEND)
    ks, vs, k, v, cu_k = _dense(kc, vc, bt, lens)
    q_lens = (cu_q[1:] - cu_q[:-1]).tolist()
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == F32 else TOL[dtype]
    with numerics(policy):
        o = SA.paged_attention(q, kc, vc, bt, lens, cu_q, **opts)
        torch.testing.assert_close(o, SA.varlen_attention_ref(q, ks, vs, q_lens, **opts), **tol)
        assert torch.equal(SA.varlen_attention(q, k, v, cu_q, cu_k, **opts), o)
    if not opts:   # the first query of the last request sits at key position 2 - 3 = -1: it sees no key
        assert torch.equal(o[-3], torch.zeros_like(o[-3])) and o[-2].abs().sum() > 0


@pytest.mark.sampled
@pytest.mark.parametrize("opts", [{}, {"window": 300, "soft_cap": 8.0}], ids=["plain", "window-soft_cap"])
@pytest.mark.parametrize("policy", POLICIES)
def test_decode_equals_prefill_at_the_same_position(policy, opts):
    """Every position of a causal prefill (or an extend) equals, bitwise, the decode step of that
    position, whatever the split schedule, BLOCK_M, paged or dense, alone or in a batch."""
    L = 700   # three splits
    q, kc, vc, bt, lens, cu_q = _decode_inputs(BF16, lens=(L,), q_lens=(L,), hq=4, hk=1, D=32, page=16, seed=33)
    _, _, k, v, cu_k = _dense(kc, vc, bt, lens)
    positions = torch.tensor([0, 1, 255, 256, 257, 511, 600, L - 1])
    with numerics(policy):
        prefill = SA.varlen_attention(q, k, v, cu_q, cu_k, **opts)
        for cfg in (None, {"BLOCK_M": 1}, {"BLOCK_M": 64}):
            assert torch.equal(SA.paged_attention(q, kc, vc, bt, lens, cu_q, config=cfg, **opts), prefill)
        # an extend: the last 40 tokens over a cached prefix of L - 40
        ext = SA.paged_attention(q[-40:], kc, vc, bt, lens, torch.tensor([0, 40]), **opts)
        assert torch.equal(ext, prefill[-40:])
        # decode of each position: a batch of requests that share the pages, one length each
        n = positions.numel()
        bt_n, lens_n = bt.expand(n, -1), positions + 1
        for parallel in (None, True, False):
            dec = SA.paged_attention(q[positions], kc, vc, bt_n, lens_n, None, _parallel=parallel, **opts)
            assert torch.equal(dec, prefill[positions])
        assert torch.equal(SA.paged_decode_attention(q[-1:], kc, vc, bt, lens, **opts), prefill[-1:])


@pytest.mark.parametrize("policy", POLICIES)
def test_paged_decode_is_invariant_to_page_assignment_and_batch(policy):
    q, kc, vc, bt, lens, _ = _decode_inputs(BF16, lens=tuple(range(5, 600, 37)), hq=2, hk=1, D=32)
    n = len(lens)
    with numerics(policy):
        full = SA.paged_decode_attention(q, kc, vc, bt, lens)
        # the same tokens on other pages: a permuted page pool
        perm = torch.randperm(kc.shape[0], generator=_g(31))
        inv = torch.argsort(perm)
        o2 = SA.paged_decode_attention(q, kc[perm], vc[perm], inv[bt], lens)
        assert torch.equal(o2, full)
        assert_batch_invariant(lambda idx: SA.paged_decode_attention(q[idx], kc, vc, bt[idx], lens[idx]), n,
                               lambda out: list(out))


@pytest.mark.parametrize("policy", POLICIES)
def test_varlen_prefill_is_batch_invariant(policy):
    lens = (40, 7, 300, 1, 90)
    q, kc, vc, bt, klens, cu_q = _decode_inputs(F16, lens=lens, q_lens=lens, hq=2, hk=2, D=32, page=8, seed=34)
    n = len(lens)

    def run(idx):
        ql = klens[idx]
        rows = torch.cat([torch.arange(cu_q[i], cu_q[i + 1]) for i in idx.tolist()])
        cq = torch.cat([torch.zeros(1, dtype=ql.dtype), ql.cumsum(0)])
        out = SA.paged_attention(q[rows], kc, vc, bt[idx], ql, cq)
        return [out[cq[i]:cq[i + 1]] for i in range(idx.numel())]
    with numerics(policy):
        alone = [run(torch.tensor([i]))[0] for i in range(n)]
        for idx in (torch.tensor([2, 0]), torch.tensor([4, 1, 3]), torch.randperm(n, generator=_g(35)),
                    torch.tensor([i % n for i in range(16)])):
            for j, out in enumerate(run(idx)):
                assert torch.equal(out, alone[int(idx[j])])


@pytest.mark.sampled
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("op", ["paged_decode_attention", "decode_attention", "paged_attention"])
def test_serving_attention_matches_cpu_on_other_targets(op, target, policy):
    q, kc, vc, bt, lens, _ = _decode_inputs(F16, lens=(300, 9, 0), hq=4, hk=2, D=32, page=8)
    _, _, k, v, cu = _dense(kc, vc, bt, lens)
    qp, kcp, vcp, btp, lensp, cu_q = _decode_inputs(F16, lens=(270, 6), q_lens=(4, 6), hq=2, hk=1, D=32, page=8)
    args = {"paged_decode_attention": (q, kc, vc, bt, lens), "decode_attention": (q, k, v, cu),
            "paged_attention": (qp, kcp, vcp, btp, lensp, cu_q)}[op]
    for opts in (dict(), dict(soft_cap=10.0, window=50)):
        fn = lambda: getattr(SA, op)(*args, **opts)   # noqa: E731
        assert_same(run_on(target, policy, fn), run_on("cpu", policy, fn), policy)


@pytest.mark.emulation
def test_serving_attention_head_dim_128_fits_kunlun_local_memory():
    """The scratchpad default chunks head_dim (BLOCK_DK 16, BLOCK_DO 32; no bit changes), so a
    head_dim-128 extend fits a Kunlun core's LM: strict bits equal the cpu target's."""
    q, kc, vc, bt, lens, cu_q = _decode_inputs(F16, lens=(300, 40), q_lens=(3, 2), hq=8, hk=2, D=128, seed=36)
    fn = lambda: SA.paged_attention(q, kc, vc, bt, lens, cu_q)   # noqa: E731
    assert_same(run_on("kunlun:xpu3", "strict", fn), run_on("cpu", "strict", fn), "strict")


def test_block_table_entries_past_a_requests_pages_may_hold_anything():
    q, kc, vc, bt, lens, _ = _decode_inputs(F32)
    ref = SA.paged_decode_attention(q, kc, vc, bt, lens)
    padded = bt.clone()
    for r, n in enumerate(lens.tolist()):   # lens 600, 17, 0, 300 over 38 pages of 16: most rows have spare
        padded[r, -(-n // kc.shape[1]):] = -1
    assert (padded == -1).any()
    assert torch.equal(SA.paged_decode_attention(q, kc, vc, padded, lens), ref)
    padded[1, 0] = kc.shape[0]   # a page request 1 reads
    with pytest.raises(ValueError, match=r"argument 'block_tables' has values in \[\d+, 152\], outside"):
        SA.paged_decode_attention(q, kc, vc, padded, lens)


@pytest.mark.no_toolchain
def test_serving_attention_bad_arguments():
    q, kc, vc, bt, lens, _ = _decode_inputs(F32)
    with pytest.raises(ValueError, match="paged_decode_attention: argument 'block_tables' has values"):
        SA.paged_decode_attention(q, kc, vc, bt + 1000, lens)
    with pytest.raises(ValueError, match="paged_decode_attention: argument 'seq_lens' has values"):
        SA.paged_decode_attention(q, kc, vc, bt, lens * 100)
    with pytest.raises(ValueError, match="kv heads must divide the 3 query heads"):
        SA.paged_decode_attention(q[:, :3], kc, vc, bt, lens)
    with pytest.raises(ValueError, match="window must be a non-negative int"):
        SA.paged_decode_attention(q, kc, vc, bt, lens, window=-1)
    with pytest.raises(ValueError, match=r"paged_decode_attention: argument 'q' must be 3-D"):
        SA.paged_decode_attention(q[0], kc, vc, bt, lens)
    with pytest.raises(ValueError, match="decode_attention: cu_seqlens_k has 2 entries"):
        SA.decode_attention(q, kc[0], vc[0], torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"paged_attention: cu_seqlens_q must be non-decreasing offsets from 0 to 4"):
        SA.paged_attention(q, kc, vc, bt, lens, torch.tensor([0, 1, 2, 3, 5]))
    with pytest.raises(ValueError, match="paged_attention: block_tables has 4 rows and seq_lens 4 entries; "
                                         "expected one per request \\(2\\)"):
        SA.paged_attention(q, kc, vc, bt, lens, torch.tensor([0, 1, 4]))
    with pytest.raises(ValueError, match="varlen_attention: a sliding window \\(window=8\\) needs causal=True"):
        SA.varlen_attention(q, kc[0], vc[0], torch.tensor([0, 4]), torch.tensor([0, 3]), causal=False, window=8)
    with pytest.raises(ValueError, match="varlen_attention: cu_seqlens_k must be non-decreasing offsets from 0 "
                                         "to at most 16"):
        SA.varlen_attention(q, kc[0], vc[0], torch.tensor([0, 4]), torch.tensor([0, 17]))


# =============================================================================================
# weight-only int8 matmul
# =============================================================================================
def _w8_inputs(dtype, M=37, K=96, N=50, group=None, seed=40):
    a = randn(M, K, dtype=dtype, seed=seed)
    w, sc = QM.quantize_int8(randn(K, N, seed=seed + 1), group)
    return a, w, sc


@pytest.mark.sampled
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("group", [None, 32])
@pytest.mark.parametrize("out_dtype", [None, F32], ids=str)
def test_w8_matmul_matches_reference(dtype, group, out_dtype):
    a, w, sc = _w8_inputs(dtype, group=group)
    c = QM.w8_matmul(a, w, sc, group_size=group, out_dtype=out_dtype)
    assert c.dtype == (out_dtype or dtype)
    ref = QM.w8_matmul_ref(a, w, sc, group, out_dtype=out_dtype)
    tol = dict(rtol=1e-5, atol=5e-5) if c.dtype == F32 else TOL[dtype]
    torch.testing.assert_close(c, ref, **tol)


@pytest.mark.sampled
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("policy", POLICIES)
def test_w8_matmul_matches_cpu_on_other_targets(target, policy):
    a, w, sc = _w8_inputs(BF16, M=9, K=64, N=40, group=16)
    fn = lambda: QM.w8_matmul(a, w, sc, group_size=16, out_dtype=F32)   # noqa: E731
    assert_same(run_on(target, policy, fn), run_on("cpu", policy, fn), policy)


@pytest.mark.parametrize("policy", POLICIES)
def test_w8_matmul_batch_invariant(policy):
    a, w, sc = _w8_inputs(F16, M=20, K=100, N=40)
    with numerics(policy):
        assert_batch_invariant(lambda idx: QM.w8_matmul(a[idx], w, sc), 20, lambda out: list(out))


def test_w8_matmul_runs_row_blocks_of_a_decode_batch_size():
    """BLOCK_M only groups rows (bit-neutral on cpu): a decode batch runs blocks of its own size,
    not the default 64 rows of which all but M are zeros (4x the dot's work at M = 16)."""
    a16, w, sc = _w8_inputs(F32, M=16, K=128, N=64, group=32)
    for M, rows in ((1, 1), (5, 8), (16, 16)):
        with recording() as launches:
            c = QM.w8_matmul(a16[:M], w, sc, group_size=32)
        (ck, grid, args), = launches
        assert dict(zip(QM.w8_matmul_kernel.arg_names, args))["BLOCK_M"] == rows and tuple(grid)[0] == 1
        torch.testing.assert_close(c, QM.w8_matmul_ref(a16[:M], w, sc, 32), rtol=1e-5, atol=5e-5)


@pytest.mark.no_toolchain
def test_w8_matmul_bad_arguments():
    a, w, sc = _w8_inputs(F32, group=32)
    with pytest.raises(TypeError, match="w8_matmul: argument 'w' has dtype float32"):
        QM.w8_matmul(a, w.float(), sc, group_size=32)
    with pytest.raises(ValueError, match="w8_matmul: group_size must be a positive int dividing K=96"):
        QM.w8_matmul(a, w, sc, group_size=40)
    with pytest.raises(ValueError, match="w8_matmul: a per-channel scale must have shape"):
        QM.w8_matmul(a, w, sc)
    with pytest.raises(ValueError, match=r"w8_matmul: w has shape \(96, 50\); expected \[K=95"):
        QM.w8_matmul(a[:, :95], w, sc, group_size=32)
