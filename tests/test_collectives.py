"""Parallel layout (pure) and collectives on real ranks: spawned processes on 127.0.0.1 (gloo).

World 4 (laid out tp 2 x pp 2) checks every collective on the world and on its tp/pp groups, for
several dtypes and sizes (including sizes not divisible by the group size) in one spawn. The
other spawns check the failures: a rank that exits early, hangs, makes a different call, or is
killed during a transfer is named, within the timeout, by every survivor, also by survivors that
read the store after rank 0 (whose process serves it) has raised, and when rank 0 itself dies.
"""
from __future__ import annotations

import os
import re
import sys
import time

import pytest
import torch

from runtime.collectives import (BackendUnavailable, CollectiveTimeout, resolve_backend, run_ranks,
                                 split_counts)
from runtime.layout import LayoutError, ParallelLayout

pytestmark = pytest.mark.integration

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]


# -- layout -------------------------------------------------------------------------------------
def test_layout_tp2_pp2():
    lay = ParallelLayout(4, tp=2, pp=2)
    assert lay.dp == 1
    assert [lay.tp_group(r) for r in range(4)] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert [lay.pp_group(r) for r in range(4)] == [(0, 2), (1, 3), (0, 2), (1, 3)]
    assert lay.groups("tp") == [(0, 1), (2, 3)] and lay.groups("pp") == [(0, 2), (1, 3)]
    assert lay.groups("dp") == [(0,), (1,), (2,), (3,)]


def test_layout_with_dp_and_nodes():
    lay = ParallelLayout(16, tp=4, pp=2, ranks_per_node=8)
    assert lay.dp == 2
    assert lay.tp_group(5) == (4, 5, 6, 7)           # consecutive, inside node 0
    assert lay.dp_group(5) == (1, 5)
    assert lay.pp_group(5) == (5, 13)                # across nodes
    assert lay.node_of(13) == 1
    for r in range(16):                               # every rank appears once per kind
        assert sum(r in g for g in lay.groups("tp")) == 1


@pytest.mark.parametrize("kw, msg", [
    (dict(world=6, tp=4), "not divisible"),
    (dict(world=0), "positive"),
    (dict(world=8, tp=4, ranks_per_node=2), "straddle"),
    (dict(world=6, tp=2, ranks_per_node=4), "whole number of nodes"),
])
def test_layout_errors(kw, msg):
    with pytest.raises(LayoutError, match=msg):
        ParallelLayout(**kw)


def test_layout_rank_out_of_range():
    with pytest.raises(LayoutError, match="outside 0..3"):
        ParallelLayout(4, tp=2).tp_group(4)


def test_split_counts():
    assert split_counts(10, 4) == [3, 3, 2, 2] and split_counts(3, 4) == [1, 1, 1, 0]


def test_xccl_unavailable_names_what_is_missing():
    with pytest.raises(BackendUnavailable, match="kunlun target's BKCL binding"):
        resolve_backend("xccl")


# -- collectives on 4 ranks ---------------------------------------------------------------------
def _data(shape, dtype, rank):
    """Small integers (exact in every dtype and in any summation order), different per rank."""
    g = torch.Generator().manual_seed(1000 + rank)
    return torch.randint(-8, 8, shape, generator=g).to(dtype)


def _check_group(comm, ranks, tag):
    """Every collective on `comm` (whose members are global `ranks`) against a local reference
    built from every member's data (each rank can regenerate any rank's data from the seed)."""
    size, me = len(ranks), comm.rank
    for dtype in DTYPES:
        for n in (1, 7, 2 * size + 1, 16):            # 1 and 7 are not divisible by 2 or 4
            everyone = [_data((n, 3), dtype, r) for r in ranks]
            stack = torch.stack(everyone)
            for op, ref in (("sum", stack.sum(0)), ("max", stack.amax(0)), ("min", stack.amin(0)),
                            ("avg", _avg(stack, size))):
                x = everyone[me].clone()
                assert comm.all_reduce(x, op).wait() is x
                assert torch.equal(x, ref.to(dtype)), (tag, "all_reduce", op, dtype, n)
            got = comm.all_gather(everyone[me]).wait()
            assert torch.equal(got, torch.cat(everyone)), (tag, "all_gather", dtype, n)
            # uneven all_gather: rank i contributes n + i rows
            sizes = [n + i for i in range(size)]
            parts = [_data((n + i, 3), dtype, r) for i, r in enumerate(ranks)]
            got = comm.all_gather(parts[me], sizes=sizes).wait()
            assert torch.equal(got, torch.cat(parts)), (tag, "all_gather uneven", dtype, n)
            for op, ref in (("sum", stack.sum(0)), ("max", stack.amax(0)), ("avg", _avg(stack, size))):
                got = comm.reduce_scatter(everyone[me].clone(), op).wait()
                want = torch.tensor_split(ref.to(dtype), size)[me]
                assert torch.equal(got, want), (tag, "reduce_scatter", op, dtype, n)
            y = everyone[me].clone()
            comm.broadcast(y, src=size - 1).wait()
            assert torch.equal(y, everyone[-1]), (tag, "broadcast", dtype, n)
    # send/recv around a ring, both directions posted before either wait (no deadlock)
    x = _data((5,), torch.float32, ranks[me])
    buf = torch.empty(5)
    hs = comm.send(x, (me + 1) % size)
    hr = comm.recv(buf, (me - 1) % size)
    hs.wait()
    assert torch.equal(hr.wait(), _data((5,), torch.float32, ranks[(me - 1) % size])), (tag, "send/recv")
    comm.barrier().wait()


def _avg(stack, size):
    if stack.dtype.is_floating_point:
        return stack.double().sum(0) / size
    return torch.div(stack.sum(0), size, rounding_mode="trunc")


def _world4(comm):
    from runtime.layout import ParallelLayout
    from runtime.stream import Stream
    lay = ParallelLayout(comm.size, tp=2, pp=2)
    groups = comm.split(lay)
    me = comm.global_rank
    assert groups["tp"].ranks == lay.tp_group(me) and groups["pp"].ranks == lay.pp_group(me)
    _check_group(comm, comm.ranks, "world")
    _check_group(groups["tp"], groups["tp"].ranks, "tp")
    _check_group(groups["pp"], groups["pp"].ranks, "pp")
    # a tp all_reduce really stays inside the tp group: sum of global ranks of the group
    x = torch.tensor([float(me)])
    groups["tp"].all_reduce(x).wait()
    # issued on a stream: the stream's handle yields the op's result
    s = Stream("comm")
    y = torch.tensor([1.0])
    assert torch.equal(groups["pp"].all_reduce(y, stream=s).wait(), torch.tensor([2.0]))
    s.close()
    return {"tp": groups["tp"].ranks, "pp": groups["pp"].ranks, "dp": groups["dp"].ranks,
            "tp_sum": x.item()}


def test_collectives_world4_tp2_pp2():
    res = run_ranks(_world4, 4, timeout=30, deadline=90)
    assert [r["tp"] for r in res] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert [r["pp"] for r in res] == [(0, 2), (1, 3), (0, 2), (1, 3)]
    assert [r["dp"] for r in res] == [(0,), (1,), (2,), (3,)]
    assert [r["tp_sum"] for r in res] == [1.0, 1.0, 5.0, 5.0]


# -- a rank that exits early --------------------------------------------------------------------
TIMEOUT_S = 3.0   # a wait the timeout does not end fails the test through run_ranks' deadline (it names the rank)


def _early_exit(comm):
    x = torch.ones(4)
    comm.all_reduce(x).wait()                         # everyone is connected and in step
    if comm.rank == 1:
        os._exit(0)                                   # leaves without a word
    t0 = time.monotonic()
    try:
        comm.all_reduce(torch.ones(4)).wait()
        out = {"error": None}
    except CollectiveTimeout as e:
        out = {"error": str(e), "missing": list(e.missing), "type": type(e).__name__}
    out["elapsed"] = time.monotonic() - t0
    return out                                        # rank 0 exits at once: the library held its store


def test_rank_exiting_early_is_named_within_timeout():
    res = run_ranks(_early_exit, 3, timeout=TIMEOUT_S, deadline=60)
    assert res[1] is None
    for r in (0, 2):
        assert res[r]["error"] is not None, f"rank {r}: the collective succeeded without rank 1"
        assert res[r]["missing"] == [1], res[r]
        assert "rank(s) [1] did not arrive" in res[r]["error"]


def test_a_run_in_which_no_rank_reports_raises(tmp_path, monkeypatch):
    """Every rank gone at bootstrap without a word (as when a script without a main guard spawns
    them: here the ranks cannot import their function's module) is an error naming the exit codes
    and the guard, not a list of Nones."""
    import importlib
    import shutil
    (tmp_path / "vanishing_rank_fn.py").write_text("def rank_fn(comm):\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("vanishing_rank_fn")
    monkeypatch.setitem(sys.modules, "vanishing_rank_fn", module)   # gone from sys.modules after the test
    fn = module.rank_fn
    (tmp_path / "vanishing_rank_fn.py").unlink()
    shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
    with pytest.raises(RuntimeError, match=r"rank_fn, world=2\): every rank exited without reporting a result or an "
                                           r"error \(exit codes \[1, 1\]\).*__name__ == '__main__'"):
        run_ranks(fn, 2, timeout=TIMEOUT_S, deadline=60)


def _hung_rank(comm):
    if comm.rank == 1:                                # alive, but never reaches the collective
        comm.store.wait(["test/hung/done"], __import__("datetime").timedelta(seconds=30))
        return None
    t0 = time.monotonic()
    try:
        comm.all_reduce(torch.ones(4)).wait()
        out = {"error": None}
    except CollectiveTimeout as e:
        out = {"error": str(e), "missing": list(e.missing)}
    out["elapsed"] = time.monotonic() - t0
    comm.store.set("test/hung/done", "1")
    return out


def test_hung_rank_times_out_naming_it():
    res = run_ranks(_hung_rank, 2, timeout=TIMEOUT_S, deadline=60)
    r0 = res[0]
    assert r0["error"] is not None and r0["missing"] == [1], r0
    assert "timed out after 3.0 s: rank(s) [1] did not arrive" in r0["error"], r0
    assert r0["elapsed"] > TIMEOUT_S - 0.5, r0   # not cut short (a busy machine only lengthens a wait)


# -- calls that differ across ranks ---------------------------------------------------------------
def _mismatched_calls(comm):
    """Each pair of calls differs in one thing; every rank must refuse it before the transfer,
    and the group stays usable afterwards."""
    from runtime.collectives import CollectiveError
    r = comm.rank
    cases = [("size", lambda: comm.all_reduce(torch.ones(4 if r == 0 else 8))),
             ("dtype", lambda: comm.all_reduce(torch.ones(4, dtype=torch.float32 if r == 0 else torch.int32))),
             ("reduction", lambda: comm.all_reduce(torch.ones(4), "sum" if r == 0 else "max")),
             ("op", lambda: comm.all_reduce(torch.ones(4)) if r == 0 else comm.broadcast(torch.ones(4))),
             ("gather rows", lambda: comm.all_gather(torch.ones(2 + r, 3))),
             ("broadcast src", lambda: comm.broadcast(torch.ones(4), src=r))]
    out = {}
    for name, call in cases:
        try:
            call().wait()
            out[name] = None
        except CollectiveError as e:
            out[name] = str(e)
    x = torch.full((4,), float(r + 1))
    out["after"] = comm.all_reduce(x).wait().tolist()
    return out


def test_calls_that_differ_across_ranks_are_refused_on_every_rank():
    res = run_ranks(_mismatched_calls, 2, timeout=TIMEOUT_S, deadline=90)
    for r in (0, 1):
        for name in ("size", "dtype", "reduction", "op", "gather rows", "broadcast src"):
            msg = res[r][name]
            assert msg is not None, f"rank {r}: mismatched {name} was accepted"
            assert "nothing was transferred" in msg, msg
        assert "rank 0: all_reduce float32[4] sum; rank 1: all_reduce float32[8] sum" in res[r]["size"], res[r]
        assert "int32" in res[r]["dtype"] and " max" in res[r]["reduction"], res[r]
        assert res[r]["after"] == [3.0] * 4, res[r]


# -- a rank killed during a transfer: every survivor names it, whichever raises first ---------------
def _dies_during_32mib(comm, victim, late):
    """Rank `victim` is killed during a 32 MiB all_reduce; the ranks in `late` wait for it only
    later (busy elsewhere), so the others raise and return first: rank 0, whose process serves
    the store, would exit (run_ranks returns) while the late ones have yet to read the store."""
    import signal
    from runtime.collectives import CollectiveError
    comm.all_reduce(torch.ones(4)).wait()             # connected and in step
    big = torch.ones(8 << 20)
    if comm.rank == victim:
        comm.all_reduce(big)
        os.kill(os.getpid(), signal.SIGKILL)
    h = comm.all_reduce(big)
    if comm.rank in late:
        time.sleep(0.5)
    t0 = time.monotonic()
    try:
        h.wait()
        return {"error": None}
    except CollectiveError as e:
        return {"error": str(e), "missing": list(e.missing), "elapsed": time.monotonic() - t0}


@pytest.mark.integration
# the last rank's case (like rank 2's, with other late readers) runs in slow
@pytest.mark.parametrize("victim, late", [(2, (1, 3)), (0, ()), pytest.param(3, (1, 2), marks=pytest.mark.slow)])
def test_every_survivor_names_the_rank_that_died(victim, late):
    """4 ranks, one killed mid-transfer, three runs: a survivor that reads the store after rank 0
    raised still names the dead rank (rank 0 holds the store until the others have read it), and
    when rank 0 itself dies, with the store it hosted, every survivor names it from its process."""
    res = run_ranks(_dies_during_32mib, 4, victim, late, timeout=TIMEOUT_S, deadline=60)
    assert res[victim] is None
    for r in set(range(4)) - {victim}:
        out = res[r]
        assert out["error"] is not None and out["missing"] == [victim], (r, out)
        gone = re.escape(f"rank(s) [{victim}] went away during it (rank {victim}'s process ") + r"\d+" + \
            re.escape(" on this host has exited")
        seen = re.escape(f"all_reduce #2 on group 'world' (ranks [0, 1, 2, 3]), seen from rank {r}")
        if victim == 0:   # the store went with rank 0
            want = f"{seen} failed: {gone}; the store could not be read: .+\\)\\. Cause: .+"
        else:
            want = f"{seen}, failed after every rank arrived: {gone}\\)\\. Cause: .+"
        assert re.fullmatch(want, out["error"]), (r, out["error"])
