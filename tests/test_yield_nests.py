"""The tiles a block yields (a loop's carried values, an `if`'s results) are written in one loop
nest per shape, so a value they share is evaluated once per element: a running maximum and its
index picked by one score (the sampling op's Gumbel pass computed its Philox draw and two logs
once for each of the two)."""
import pytest
import torch

import compiler
from compiler import kernel, language as tl

pytestmark = pytest.mark.compile


@kernel
def _running_best(x_ptr, v_ptr, i_ptr, n, IN_IF: tl.constexpr, BLOCK: tl.constexpr):
    best_v = tl.full([BLOCK], float("-inf"), tl.float32)
    best_i = tl.full([BLOCK], 0, tl.int32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n, other=0.0)
        if IN_IF:   # the block's results are the if's, then the loop's carried values
            if tl.load(x_ptr + start) > -1e30:
                score = tl.sqrt(tl.abs(x)) * 3.0
                better = score > best_v
                best_i = tl.where(better, cols, best_i)
                best_v = tl.where(better, score, best_v)
        else:
            score = tl.sqrt(tl.abs(x)) * 3.0
            better = score > best_v
            best_i = tl.where(better, cols, best_i)
            best_v = tl.where(better, score, best_v)
    tl.store(v_ptr + tl.arange(0, BLOCK), best_v)
    tl.store(i_ptr + tl.arange(0, BLOCK), best_i)


@pytest.mark.parametrize("in_if", [True, False])
@pytest.mark.parametrize("target", ["cpu", "kunlun:xpu3"])
def test_a_score_shared_by_two_yielded_tiles_is_computed_once(in_if, target):
    x = torch.randn(1000)
    v, i = torch.empty(32), torch.empty(32, dtype=torch.int32)
    with compiler.render_only() as seen, compiler.use_target(target):
        _running_best[(1,)](x, v, i, 1000, IN_IF=in_if, BLOCK=32)
    assert seen[0].source.count("sqrt") == 1, seen[0].source


@pytest.mark.parametrize("in_if", [True, False])
def test_the_tiles_yielded_together_hold_what_each_alone_would(in_if):
    n, lanes = 1000, 32
    x = torch.randn(n)
    x[37], x[101] = 4.0, -4.0   # equal scores in one lane: the first column stays
    v, i = torch.empty(lanes), torch.empty(lanes, dtype=torch.int32)
    _running_best[(1,)](x, v, i, n, IN_IF=in_if, BLOCK=lanes)
    score = torch.full((lanes * 32,), float("-inf"))
    score[:n] = torch.sqrt(x.abs()) * 3.0
    score[n:] = 0.0   # masked lanes load 0.0
    per_lane = score.view(-1, lanes)
    want_v = per_lane.max(0).values
    want_i = torch.stack([(per_lane[:, j] == want_v[j]).nonzero()[0, 0] * lanes + j for j in range(lanes)])
    torch.testing.assert_close(v, want_v, rtol=1e-6, atol=0)   # tl.sqrt need not be correctly rounded
    assert torch.equal(i.long(), want_i)
    assert i[37 % lanes] == 37


@kernel
def _rotate(x_ptr, y_ptr, z_ptr, o_ptr, n, WHILE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a, b, c = tl.load(x_ptr + offs), tl.load(y_ptr + offs), tl.load(z_ptr + offs)
    s, u = n * 0 + 1, n * 0 + 2
    if WHILE:
        i = 0
        while i < n:
            a, b = b, a
            a, b, c = b, c * 1.0 + 0.0, a
            s, u = u, s
            i += 1
    else:
        for _ in range(n):
            a, b = b, a                    # a swap of two carried tiles
            a, b, c = b, c * 1.0 + 0.0, a  # a rotation through an expression
            s, u = u, s                    # and of two scalars
    tl.store(o_ptr + offs, a)
    tl.store(o_ptr + BLOCK + offs, b)
    tl.store(o_ptr + 2 * BLOCK + offs, c + s * 1000.0 + u * 10000.0)


@pytest.mark.parametrize("target", ["cpu", pytest.param("kunlun:xpu3", marks=pytest.mark.emulation),
                                    pytest.param("gpu:interpret", marks=pytest.mark.emulation)])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("loop", ["for", "while"])
def test_carried_values_that_trade_places_each_get_the_others_old_value(target, n, loop):
    """`a, b = b, a` on loop-carried tiles: every slot is written from the values the iteration
    started with (each slot yielded into another is read from a copy, as the slot it came from is
    overwritten in the same step); the cpu and kunlun targets had given both slots b's value."""
    x, y, z = torch.arange(8.0), torch.arange(8.0) + 100, torch.arange(8.0) + 200
    want = [x, y, z]
    s, u = 1, 2
    for _ in range(n):
        want[0], want[1] = want[1], want[0]
        want = [want[1], want[2], want[0]]
        s, u = u, s
    o = torch.zeros(24)
    with compiler.use_target(target):
        _rotate[(1,)](x, y, z, o, n, WHILE=loop == "while", BLOCK=8)
    assert torch.equal(o, torch.cat([want[0], want[1], want[2] + s * 1000.0 + u * 10000.0]))
