"""Embedding lookup: out[..., :] = table[ids[...], :].

ids: any shape, int32 or int64 (narrowed on the host for 32-bit-index targets), every id in
[0, vocab) (checked: an id out of range would read outside the table). table: [vocab, D], fp32/
fp16/bf16, last dim contiguous. The rows are copied bit for bit. One program per id, walking D in
BLOCK chunks.
"""
from __future__ import annotations

import torch

from compiler import kernel, language as tl
from compiler.opspec import OpSpec, Problem, Work, npow2

from .checks import cdiv, check_device, check_tensor
from .configs import select
from .indices import check_range, index_tensor


@kernel
def embedding_kernel(ids_ptr, table_ptr, out_ptr, D, s_table, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    row = tl.load(ids_ptr + t).to(tl.int64)
    for c0 in range(0, D, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = cols < D
        tl.store(out_ptr + t * D + cols, tl.load(table_ptr + row * s_table + cols, mask=m), mask=m)


def embedding(ids: torch.Tensor, table: torch.Tensor, *, config: dict | None = None) -> torch.Tensor:
    """table[ids]: [*ids.shape, D]."""
    op = "embedding"
    check_tensor(op, "table", table, dims=2)
    if table.stride(1) != 1:
        table = table.contiguous()
    flat = index_tensor(op, "ids", ids.reshape(-1) if isinstance(ids, torch.Tensor) else ids)
    check_range(op, "ids", flat, 0, table.shape[0])
    check_device(op, ids=flat, table=table)
    D = table.shape[1]
    out = torch.empty((*ids.shape, D), dtype=table.dtype, device=table.device)
    if flat.numel() == 0 or D == 0:
        return out
    cfg = dict(config) if config else select(SPEC, None, D=D)
    embedding_kernel[(flat.numel(),)](flat, table, out, D, table.stride(0), **cfg)
    return out


def embedding_ref(ids, table):
    return table[ids.long()]


def _problem(s: dict) -> Problem:
    g = torch.Generator().manual_seed(0)
    table = torch.randn(s["vocab"], s["D"], generator=g)
    ids = torch.randint(0, s["vocab"], (s["tokens"],), generator=g)
    return Problem(run=lambda cfg: embedding(ids, table, config=cfg), ref=lambda: embedding_ref(ids, table).double(),
                   eager=lambda: torch.nn.functional.embedding(ids, table))


def _probe(cfg: dict, shape: dict) -> None:
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(shape.get("dtype", "fp32"), torch.float32)
    embedding(torch.tensor([1, 0], dtype=torch.int32), torch.zeros(2, 2 * cfg["BLOCK"] + 1, dtype=dt), config=cfg)


SPEC = OpSpec(
    name="embedding",
    key_dims={"D": "align32"},
    space=tuple({"BLOCK": b} for b in (64, 128, 256, 512, 1024, 2048)),
    spaces={"scratchpad": tuple({"BLOCK": b} for b in (64, 128, 256, 512, 1024))},
    defaults={"cache": {"BLOCK": 1024}, "scratchpad": {"BLOCK": 1024}, "simt": {"BLOCK": 1024}},
    clamp=lambda cfg, dims: {**cfg, "BLOCK": min(cfg["BLOCK"], max(64, npow2(dims["D"])))},
    dims_of=lambda s: {"D": s["D"]},
    problem=_problem,
    describe=lambda s: f"{s['tokens']} ids, [{s['vocab']}, {s['D']}]",
    probe=_probe,
    work=lambda cfg, s: Work(programs=s["tokens"], elements=2 * s["D"], segments=2 * cdiv(s["D"], cfg["BLOCK"]),
                             flops=0),
    tune_shapes=({"label": "prefill", "tokens": 256, "vocab": 32000, "D": 4096},),
    quick_shapes=({"label": "tiny", "tokens": 8, "vocab": 100, "D": 64},),
    bit_neutral=frozenset({"BLOCK"}),   # a copy
)
SPECS = (SPEC,)

__all__ = ["embedding", "embedding_ref", "embedding_kernel", "SPEC", "SPECS"]
