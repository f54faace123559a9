"""The tensor-parallel MLP example on 2 cpu ranks equals the single-rank MLP (fp32 tolerance:
the second matmul's K is split across ranks, which changes the summation order)."""
from __future__ import annotations

import pytest

import torch

from examples.tp_mlp import make_weights, mlp_single, tp_mlp_rank
from runtime.collectives import run_ranks

pytestmark = pytest.mark.integration


def test_tp_mlp_equals_single_rank():
    dim, hidden, batch = 48, 200, 19       # odd sizes: uneven micro-batches, masked kernel edges
    ref = mlp_single(*make_weights(dim, hidden, batch))       # compiles once; ranks load from cache
    ys = run_ranks(tp_mlp_rank, 2, dim, hidden, batch, 3, timeout=60, deadline=120)
    assert torch.equal(ys[0], ys[1])                          # every rank holds the same y
    torch.testing.assert_close(ys[0], ref, rtol=1e-5, atol=1e-5)
