"""A memory plan for kernels that do not fit LM as written (targets/kunlun/plan): tiles used in two
roles read once per role (K·Kᵀ, g[:, None] - g[None, :]), branches of a run-time `if` (an early
return) cut like any region, scans (reverse ones too) and arg-reductions cut with a carried
prefix / (value, index), and, for a loop that carries a whole tile and reduces along it, the GM
scratch tier: the tile kept in the core's slot of a workspace the launcher takes once, streamed
through LM. Each runs in host emulation on xpu2 and xpu3, bitwise equal to cpu in strict;
TILEJIT_KUNLUN_SPILL=0 refuses the spill with LMBudgetError."""
import contextlib
import re

import pytest
import torch

import targets.kunlun
from compiler import get_target, kernel, language as tl, numerics, render_only, use_target
from compiler.target import register_target
from targets.kunlun.plan.explain import LMBudgetError
from targets.kunlun.runtime import scratch as workspaces
from targets.kunlun.tune.cost_model import tier_costs

pytestmark = pytest.mark.emulation
register_target("kunlun", targets.kunlun.TARGET)
ARCHS = ("kunlun:xpu2", "kunlun:xpu3")


@kernel
def kkt(k_ptr, g_ptr, a_ptr, T, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, DECAY: tl.constexpr):
    """A = (k kᵀ) * exp(g_i - g_j) (without the decay factor unless DECAY), strictly lower
    triangular: `k` and `g` each in two roles."""
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    acc = tl.zeros([BT, BT], dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        b_k = tl.load(k_ptr + t[:, None] * K + kk[None, :], mask=(t[:, None] < T) & (kk[None, :] < K), other=0.0)
        acc += tl.dot(b_k, tl.trans(b_k))
    if DECAY:
        g = tl.load(g_ptr + t, mask=t < T, other=0.0)
        acc = acc * tl.exp(g[:, None] - g[None, :])
    acc = tl.where(t[:, None] > t[None, :], acc, 0.0)
    tl.store(a_ptr + t[:, None] * BT + tl.arange(0, BT)[None, :], acc, mask=t[:, None] < T)


@kernel
def early_return_softmax(x_ptr, y_ptr, skip_ptr, n, BLOCK: tl.constexpr):
    """A row softmax after an early return for a skipped row (the rest of the kernel is a branch)."""
    row = tl.program_id(0)
    if tl.load(skip_ptr + row) != 0:
        return
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n + cols, e / tl.sum(e, 0), mask=cols < n)


@kernel
def scan_and_arg(x_ptr, c_ptr, r_ptr, i_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    tl.store(c_ptr + row * n + cols, tl.cumsum(tl.where(cols < n, x, 0.0), axis=0), mask=cols < n)
    tl.store(r_ptr + row * n + cols, tl.cumsum(tl.where(cols < n, x, 0.0), axis=0, reverse=True), mask=cols < n)
    v, i = tl.max(x, axis=0, return_indices=True)
    tl.store(i_ptr + row, i)
    tl.store(i_ptr + 4 + row, tl.argmin(tl.where(cols < n, x, float("inf")), axis=0))


@kernel
def topk_mask(x_ptr, o_ptr, n, K: tl.constexpr, BLOCK: tl.constexpr):
    """The k largest of a row kept: the loop carries the whole row and takes its maximum each time."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    keep = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(K):
        m = tl.max(x, 0)
        keep = tl.where(x == m, 1.0, keep)
        x = tl.where(x == m, -float("inf"), x)
    tl.store(o_ptr + row * n + cols, keep, mask=cols < n)


@contextlib.contextmanager
def _spill_off():
    """TILEJIT_KUNLUN_SPILL=0 while the block runs."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILEJIT_KUNLUN_SPILL", "0")
        yield


def _source(launch, target="kunlun:xpu3", policy="fast"):
    with use_target(target), numerics(policy), render_only() as seen:
        launch()
    return seen[0].source


def _same_everywhere(run, policy):
    """{target: outputs}: cpu, xpu2 and xpu3; strict bitwise equal to cpu."""
    out = {}
    for t in ("cpu", *ARCHS):
        with use_target(t), numerics(policy):
            out[t] = run()
    if policy == "strict":
        for t in ARCHS:
            for a, b in zip(out[t], out["cpu"]):
                assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), f"{t} differs from cpu in strict"
    return out


@pytest.mark.parametrize("decay,policy", [(False, "strict"), (True, "fast"),
                                          # the decay's strict plan cuts its rows into 32 chunks: a minute to build
                                          pytest.param(True, "strict", marks=pytest.mark.slow)])
def test_tiles_in_two_roles_are_read_once_per_role(decay, policy):
    T, K, BT = 100, 64, 64
    k, g = torch.randn(T, K) * 0.2, torch.randn(T).cumsum(0) * 0.05

    def run():
        a = torch.zeros(T, BT)
        kkt[(2,)](k, g, a, T, K=K, BT=BT, BK=32, DECAY=decay)
        return [a]
    src = _source(lambda: kkt[(2,)](k, g, torch.zeros(T, BT), T, K=K, BT=BT, BK=32, DECAY=decay), policy=policy)
    assert "tiles used in two roles read once per role" in src
    with _spill_off(), pytest.raises(LMBudgetError, match="no memory plan fits"):   # the opt-out refuses it
        _source(lambda: kkt[(2,)](k, g, torch.zeros(T, BT), T, K=K, BT=BT, BK=32, DECAY=decay), policy=policy)
    out = _same_everywhere(run, policy)
    kp, gp = torch.zeros(2 * BT, K), torch.zeros(2 * BT)   # the chunks' rows past T load as zeros
    kp[:T], gp[:T] = k, g
    kb, gb = kp.view(2, BT, K), gp.view(2, BT)
    decayed = torch.exp(gb[:, :, None] - gb[:, None, :]) if decay else 1.0
    want = (kb @ kb.transpose(1, 2) * decayed).tril(-1).reshape(2 * BT, BT)[:T]
    torch.testing.assert_close(out["kunlun:xpu3"][0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["strict", "fast"])
def test_an_early_return_leaves_the_rest_of_the_kernel_cuttable(policy):
    x, skip = torch.randn(3, 5000), torch.tensor([0, 1, 0], dtype=torch.int32)

    def run():
        y = torch.full_like(x, 7.0)
        early_return_softmax[(3,)](x, y, skip, 5000, BLOCK=8192)
        return [y]
    out = _same_everywhere(run, policy)
    want = torch.softmax(x, 1)
    want[1] = 7.0
    torch.testing.assert_close(out["kunlun:xpu2"][0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("policy", ["strict", "fast"])
def test_scans_and_arg_reductions_are_cut_with_what_they_carry(policy):
    x = torch.randn(3, 3000)
    x[1, :2500] = float("nan")   # NaN is ignored: the chunks all NaN so far give way to a number
    x[2] = 1.0   # ties: the lowest index

    def run():
        c, r, i = torch.zeros(3, 3000), torch.zeros(3, 3000), torch.zeros(8, dtype=torch.int32)
        scan_and_arg[(3,)](x, c, r, i, 3000, BLOCK=4096)
        return [c, r, i]
    src = _source(lambda: scan_and_arg[(3,)](x, torch.zeros(3, 3000), torch.zeros(3, 3000),
                                             torch.zeros(8, dtype=torch.int32), 3000, BLOCK=4096), policy=policy)
    assert "strip-mined: 4096 -> chunks of" in src
    out = _same_everywhere(run, policy)
    c, r, i = out["kunlun:xpu3"]
    torch.testing.assert_close(c[0], x[0].cumsum(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r[0], x[0].flip(0).cumsum(0).flip(0), rtol=1e-4, atol=1e-4)
    assert i[0] == x[0].argmax() and i[2] == 0 and i[6] == 0 and i[4] == x[0].argmin()
    assert i[1] == 2500 + x[1, 2500:].argmax() and i[5] == 2500 + x[1, 2500:].argmin()


@pytest.mark.parametrize("policy", ["strict", "fast"])
def test_a_carried_tile_no_cut_fits_runs_through_gm_scratch(policy):
    x = torch.randn(3, 5000)

    def run():
        o = torch.zeros_like(x)
        topk_mask[(3,)](x, o, 5000, K=5, BLOCK=8192)
        return [o]
    src = _source(lambda: topk_mask[(3,)](x, torch.zeros_like(x), 5000, K=5, BLOCK=8192), policy=policy)
    assert "GM scratch tj_scratch0 @0: 32768 bytes, fp32[8192]" in src
    assert "GM scratch workspace: 65536 bytes per core" in src and "__global_ptr__ char* tj_ws" in src
    out = _same_everywhere(run, policy)
    want = torch.zeros_like(x).scatter(1, x.topk(5, 1).indices, 1.0)
    assert torch.equal(out["kunlun:xpu3"][0], want)
    held = workspaces.stats()["kernels"]
    assert held.get("topk_mask", 0) >= 65536 * 12 * 64   # xpu3's slots: one per core, taken once


def test_the_spill_is_priced_per_tier_and_can_be_refused():
    x = torch.randn(2, 5000)
    tgt = get_target("kunlun:xpu3")
    src = _source(lambda: topk_mask[(2,)](x, torch.zeros_like(x), 5000, K=3, BLOCK=8192))
    cost = tier_costs(tgt.plan_of(src), tgt.arch)
    assert cost["GM scratch"] > cost["GM"] > 0 and cost["LM"] > 0
    with _spill_off(), pytest.raises(LMBudgetError, match="no memory plan fits(.|\n)*unset it to let the plan"):
        _source(lambda: topk_mask[(2,)](x, torch.zeros_like(x), 5000, K=4, BLOCK=8192))


def test_the_emulation_keeps_each_core_in_its_own_scratch_slot(tmp_path):
    """A core's DMA into the workspace must stay in its slot: the generated kernel runs; the same
    source with each core pointed at its neighbour's slot fails in the emulation."""
    import ctypes
    from test_kunlun_fidelity import _emulated   # tests/ is on sys.path

    n, rows = 3000, 2
    x = torch.randn(rows, n)
    src = _source(lambda: topk_mask[(rows,)](x, torch.zeros_like(x), n, K=2, BLOCK=8192))
    slot = int(re.search(r"GM scratch workspace: (\d+) bytes per core", src).group(1))
    own = "(cluster_id() * core_num() + core_id()) * "
    assert own + str(slot) in src
    ws = torch.zeros(slot * 12 * 64, dtype=torch.uint8)
    for tag, text, ok in (("own", src, True), ("neighbour", src.replace(own, "(cluster_id() * core_num() + "
                                                                          "(core_id() ^ 1)) * "), False)):
        d = tmp_path / tag
        d.mkdir()
        lib = _emulated(text, d, "xpu3", "tj_launch", [ctypes.c_void_p] + [ctypes.c_int] * 3 +
                        [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p])
        o = torch.zeros_like(x)
        ts = (x, o, ws)
        lo = (ctypes.c_uint64 * 3)(*[t.data_ptr() for t in ts])
        hi = (ctypes.c_uint64 * 3)(*[t.data_ptr() + t.numel() * t.element_size() for t in ts])
        lib.tj_emu_set_regions(3, lo, hi)
        rc = lib.tj_launch(None, rows, 1, 1, x.data_ptr(), o.data_ptr(), n, ws.data_ptr())
        err = lib.tj_emu_error().decode()
        if ok:
            assert rc == 0, err
            assert torch.equal(o, torch.zeros_like(x).scatter(1, x.topk(2, 1).indices, 1.0))
        else:
            assert rc != 0 and "outside every tensor passed to the kernel" in err, err


def test_inspect_says_which_tiles_went_where_and_why(capsys):
    from compiler.inspect import main as inspect_main   # noqa: PLC0415
    assert inspect_main(["benchmarks/kunlun_cost.py:topk_mask", "-s", "*fp32,*fp32,i32", "-c", "K=8", "-c",
                         "BLOCK=8192", "-t", "kunlun:xpu3", "--stage", "source"]) == 0
    out = capsys.readouterr().out
    assert "plan: GM scratch: 'keep', 'x' (carried by a loop that reduces along them)" in out
    assert re.search(r"GM scratch workspace: 65536 bytes per core, \d+ bytes a launch", out)
    assert "strip-mined: 8192 -> chunks of" in out and "GM scratch traffic:" in out
