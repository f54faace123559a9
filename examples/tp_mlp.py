"""A tensor-parallel MLP on 2 cpu ranks: y = gelu(x @ W1 + b1) @ W2 + b2.

    .venv/bin/python -m examples.tp_mlp [--world 2] [--batch 64] [--dim 128] [--hidden 512]

Megatron's split, which needs one all_reduce per MLP and nothing in between:

- column-parallel first matmul: rank r holds the columns F_r of W1 (and b1), computes
  h_r = gelu(x @ W1[:, F_r] + b1[F_r]) -- the activation is elementwise, so it applies per shard;
- row-parallel second matmul: rank r holds the rows F_r of W2 and computes the partial sum
  p_r = h_r @ W2[F_r, :]; y = sum_r p_r + b2 (the all_reduce; b2 is added once, after it).

The batch runs as micro-batches: the matmuls of micro-batch i+1 run on the compute stream while
the all_reduce of micro-batch i runs on the comm stream (an event orders each all_reduce after the
matmul that produced its input). Both matmuls are tilejit's `kernels.matmul`.

Why the result is equal to the single-rank one only within fp32 tolerance, not bit for bit:
h is bitwise the same (each element of h is the same ascending-k chain over the same D inputs),
but the second matmul's K (the hidden size F) is split across ranks, so y = (sum over F_0) +
(sum over F_1) instead of one ascending chain over F: a different summation order, so different
roundings (about 1e-6 relative here).
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402

import torch  # noqa: E402

import kernels  # noqa: E402
from compiler import current_target  # noqa: E402
from compiler.clihelp import description, line_buffered, step  # noqa: E402
from runtime.collectives import run_ranks, split_counts  # noqa: E402
from runtime.stream import Event, Stream  # noqa: E402


def make_weights(dim: int, hidden: int, batch: int, seed: int = 0):
    """The full model and input, the same on every rank (a seeded generator)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, dim, generator=g)
    w1 = torch.randn(dim, hidden, generator=g) / dim ** 0.5
    b1 = torch.randn(hidden, generator=g) * 0.1
    w2 = torch.randn(hidden, dim, generator=g) / hidden ** 0.5
    b2 = torch.randn(dim, generator=g) * 0.1
    return x, w1, b1, w2, b2


def mlp_single(x, w1, b1, w2, b2) -> torch.Tensor:
    """The single-rank MLP with the same kernels."""
    return kernels.matmul(kernels.matmul(x, w1, b1, activation="gelu"), w2, b2)


def shard(w1, b1, w2, rank: int, world: int):
    """Rank's shards: columns of W1 and b1, rows of W2 (contiguous copies, as if loaded so)."""
    counts = split_counts(w1.shape[1], world)
    lo = sum(counts[:rank])
    cols = slice(lo, lo + counts[rank])
    return w1[:, cols].contiguous(), b1[cols].contiguous(), w2[cols, :].contiguous()


def mlp_tensor_parallel(comm, x, w1_r, b1_r, w2_r, b2, micro_batches: int = 4) -> torch.Tensor:
    """This rank's part of the MLP; returns the full y (every rank ends with the same y)."""
    compute, comm_stream = Stream("compute"), Stream("comm")
    y = torch.empty(x.shape[0], w2_r.shape[1], dtype=x.dtype)
    reduces = []
    for rows in torch.tensor_split(torch.arange(x.shape[0]), micro_batches):
        if len(rows) == 0:
            continue
        sl = slice(int(rows[0]), int(rows[-1]) + 1)
        part = y[sl]                              # the partial sum is written straight into y
        compute.submit(lambda xs=x[sl], out=part: kernels.matmul(
            kernels.matmul(xs, w1_r, b1_r, activation="gelu"), w2_r, out=out))
        ready = Event().record(compute)           # this micro-batch's partial sum exists
        comm_stream.wait_event(ready)
        reduces.append(comm.all_reduce(part, stream=comm_stream))
    for h in reduces:
        h.wait()
    compute.synchronize()
    compute.close(), comm_stream.close()
    return y.add_(b2)


def tp_mlp_rank(comm, dim: int, hidden: int, batch: int, micro_batches: int = 4, seed: int = 0):
    """Entry point of one rank (for run_ranks): builds the same model everywhere, shards, runs."""
    torch.set_num_threads(1)
    x, w1, b1, w2, b2 = make_weights(dim, hidden, batch, seed)
    w1_r, b1_r, w2_r = shard(w1, b1, w2, comm.rank, comm.size)
    return mlp_tensor_parallel(comm, x, w1_r, b1_r, w2_r, b2, micro_batches)


def main(argv=None):
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--micro-batches", type=int, default=4)
    a = ap.parse_args(argv)
    line_buffered()
    print(f"a tensor-parallel MLP ({a.dim} -> {a.hidden} -> {a.dim}, batch {a.batch}) on target "
          f"'{current_target().name}', {a.world} cpu ranks (gloo)")
    with step("single-rank reference (compiles, or loads, the kernels)"):
        ref = mlp_single(*make_weights(a.dim, a.hidden, a.batch))
    with step(f"{a.world} ranks, {a.micro_batches} micro-batches each"):
        ys = run_ranks(tp_mlp_rank, a.world, a.dim, a.hidden, a.batch, a.micro_batches)
    for r, y in enumerate(ys):
        diff = (y - ref).abs().max().item()
        rel = diff / ref.abs().max().item()
        print(f"rank {r}: max |y_tp - y_single| = {diff:.3e} (relative to max |y|: {rel:.1e}); "
              f"bitwise equal: {torch.equal(y, ref)}")
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    print("tensor-parallel result equals the single-rank one within fp32 tolerance")


if __name__ == "__main__":
    main()
