"""Kunlun cost-model estimates (not measurements) for the library kernels, next to the arch's
roofline: `python -m benchmarks.kunlun_cost [--arch xpu2,xpu3] [--policy fast]`.

For each op and shape: the kunlun default config (config_for, LM-checked by the renderer), the
model's estimate (targets/kunlun/tune/cost_model.py), and two rooflines: `roof` = max(minimum bytes /
memory bandwidth, flops / the arch's published fp16 peak), and `roof_simd` with the fp32 SIMD peak
the generated code can reach at most (cores x 16 lanes x 2 flops x the model's assumed clock).
`est/roof_simd` says how far the emitted code is from streaming at full bandwidth; `vec %` is the
share of its element operations the renderer emitted for the 16-lane vector unit (the model prices
the rest at one lane); `dma x` is how many times the bytes its kernel names the memory plan moves
(re-reads of strip-mined passes, which the model charges).

A second table prices kernels whose tiles only run through the memory plan's lowest tier (GM
scratch: carried tiles kept in a per-core workspace, streamed through LM), per tier and program:
the compute on LM, the DMA of the kernel's tensors (GM) and that of the scratch tiles, so the
price of a spill is visible."""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402

import torch  # noqa: E402

import kernels  # noqa: E402
from compiler import get_target, kernel, numerics, render_only, use_target  # noqa: E402
from compiler import language as tl  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402
from targets.kunlun.tune import cost_model, footprint  # noqa: E402

F32 = 4
SHAPES = [
    ("matmul", dict(M=16, N=4096, K=4096), "decode 16x4096x4096"),
    ("matmul", dict(M=512, N=4096, K=4096), "prefill 512x4096x4096"),
    ("rms_norm", dict(rows=512, N=4096), "512x4096"),
    ("layer_norm", dict(rows=512, N=4096), "512x4096"),
    ("attention", dict(batch=1, heads=32, seq_q=512, seq_k=512, head_dim=128), "prefill b1 h32 s512 d128"),
    ("attention", dict(batch=8, heads=32, seq_q=1, seq_k=2048, head_dim=128), "decode b8 h32 kv2048 d128"),
    ("serving_attention", dict(batch=8, heads=32, kv_heads=8, seq_q=1, seq_k=1024, head_dim=128),
     "decode 8 req h32/8 kv1024 d128"),
    ("serving_attention", dict(batch=1, heads=32, kv_heads=8, seq_q=256, seq_k=256, head_dim=128),
     "prefill 1 req h32/8 q256 d128"),
]


@kernel
def topk_mask(x_ptr, o_ptr, n, K: tl.constexpr, BLOCK: tl.constexpr):
    """The k largest logits of a row kept, the rest zeroed (a top-k sampling filter): the loop
    carries the whole row and takes its maximum each iteration, so no cut of the row fits LM."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    keep = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(K):
        m = tl.max(x, 0)
        keep = tl.where(x == m, 1.0, keep)
        x = tl.where(x == m, -float("inf"), x)
    tl.store(o_ptr + row * n + cols, keep * tl.load(x_ptr + row * n + cols, mask=cols < n, other=0.0),
             mask=cols < n)


# (label, kernel, grid rows, launch arguments after the tensors, constexprs)
SPILLED = [
    ("top-50 of a 32000 vocabulary, 64 rows", topk_mask, 64, 32000, dict(K=50, BLOCK=32768)),
    ("top-8 of an 8192 vocabulary, 64 rows", topk_mask, 64, 8192, dict(K=8, BLOCK=8192)),
]


def spilled(arch: str, policy: str) -> None:
    """Per tier, the estimated cost of each SPILLED kernel (render only: nothing is built)."""
    tgt = get_target(f"kunlun:{arch}")
    print(f"\n{'arch':5} {'spilled kernel':40} {'LM us':>8} {'GM us':>8} {'GM scratch us':>14} {'scratch/core':>12} "
          f"{'est ms':>8}")
    for label, fn, rows, n, meta in SPILLED:
        x = torch.empty(rows, n)
        with use_target(tgt), numerics(policy), render_only() as seen:
            fn[(rows,)](x, torch.empty_like(x), n, **meta)
        plan = tgt.plan_of(seen[0].source)
        per = cost_model.tier_costs(plan, tgt.arch)
        est = cost_model.ASSUMED_LAUNCH_S + -(-rows // tgt.arch.cores) * sum(per.values())
        print(f"{arch:5} {label:40} {per['LM'] * 1e6:8.1f} {per['GM'] * 1e6:8.1f} {per['GM scratch'] * 1e6:14.1f} "
              f"{plan.scratch_slot:12d} {est * 1e3:8.3f}")


def work(op: str, s: dict) -> tuple[float, float]:
    """(minimum bytes moved, flops) of one call, fp32 tensors."""
    if op == "matmul":
        return (s["M"] * s["K"] + s["K"] * s["N"] + s["M"] * s["N"]) * F32, 2.0 * s["M"] * s["N"] * s["K"]
    if op in ("rms_norm", "layer_norm"):
        return 3 * s["rows"] * s["N"] * F32, 8.0 * s["rows"] * s["N"]
    b, h, sq, sk, d = s["batch"], s["heads"], s["seq_q"], s["seq_k"], s["head_dim"]
    return (2 * b * h * sq * d + 2 * b * s.get("kv_heads", h) * sk * d) * F32, 4.0 * b * h * sq * sk * d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--arch", default="xpu2,xpu3")
    ap.add_argument("--policy", default="fast", choices=("fast", "strict"))
    args = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    print(f"{'arch':5} {'op':10} {'shape':28} {'config':38} {'vec %':>5} {'dma x':>5} {'est ms':>9} {'roof ms':>9} {'roof_simd ms':>12} "
          f"{'est/roof_simd':>13}")
    for arch in args.arch.split(","):
        tgt = get_target(f"kunlun:{arch}")
        a = tgt.arch
        bw = a.mem_bandwidth or cost_model.FALLBACK_BANDWIDTH
        simd_peak = a.cores * a.fp32_lanes * 2 * cost_model.ASSUMED_CLOCK_HZ
        for op, shape, label in SHAPES:
            spec = kernels.OP_SPECS[op]
            with numerics(args.policy):
                cfg = kernels.config_for(op, tgt, **spec.dims_of(shape))
                est = cost_model.estimate(tgt, spec, cfg, shape, args.policy)
                prof = footprint.profile(tgt, spec, cfg, shape, args.policy)
            nbytes, flops = work(op, shape)
            roof = max(nbytes / bw, flops / a.peak_fp16_flops)
            roof_simd = max(nbytes / bw, flops / simd_peak)
            cfg_s = ",".join(f"{k}={v}" for k, v in sorted(cfg.items()))
            print(f"{arch:5} {op:10} {label:28} {cfg_s:38} {100 * prof.vector_share:5.0f} {prof.dma_bytes:5.2f} {est * 1e3:9.3f} {roof * 1e3:9.3f} "
                  f"{roof_simd * 1e3:12.3f} {est / roof_simd:13.1f}")
    for arch in args.arch.split(","):
        spilled(arch, args.policy)
    print("\nest: the cost model's estimate (an estimate, not a measurement; assumed figures at the top of "
          "targets/kunlun/tune/cost_model.py). xpu3's bandwidth is unknown: xpu2's 512 GB/s stands in. "
          "Spilled kernels: one program's time per tier (us), the launch's estimate from its waves of programs.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
