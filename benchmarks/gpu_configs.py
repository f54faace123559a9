"""Times candidate configs of the gpu target's matmul and attention on a CUDA GPU, beside torch
(cuBLAS, SDPA), to choose the `simt` defaults in kernels/matmul.py and kernels/attention.py.

    python benchmarks/gpu_configs.py            # exits 0 with a message when there is no GPU

Each row: the config (block sizes, num_warps, num_stages), tilejit's time, torch's, and their
ratio (torch / tilejit: >= 1 is faster than torch). A config the device cannot run (too much
shared memory, say) prints its error and the sweep goes on. Strict-policy matmul rows show how
BLOCK_K (bit-neutral in strict, where the dot is one fma chain) moves strict's time.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402

import torch  # noqa: E402

from benchmarks.gpu_check import _bench  # noqa: E402
from compiler.clihelp import description  # noqa: E402




def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--ops", default="matmul,attention", help="comma-separated: matmul, attention (default both)")
    ops = ap.parse_args(argv).ops.split(",")
    if not torch.cuda.is_available():
        print("gpu_configs: no CUDA device visible to torch; nothing to time (skipped).")
        return 0
    import compiler  # noqa: PLC0415
    import kernels  # noqa: PLC0415
    import targets.gpu  # noqa: PLC0415
    compiler.register_target("gpu", targets.gpu.TARGET)
    def row(label, ours, theirs, reps=20):
        try:
            t = _bench(ours, reps=reps)
        except Exception as e:  # noqa: BLE001 - a config the device cannot run is a row of the table
            print(f"  {label:44s} cannot run: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            return
        t_torch = _bench(theirs, reps=reps)
        print(f"  {label:44s} tilejit {t:8.3f} ms  torch {t_torch:8.3f} ms  ratio {t_torch / t:5.2f}")

    print(f"device: {torch.cuda.get_device_name()} torch={torch.__version__}")
    with compiler.use_target("gpu"):
        if "matmul" in ops:
            _matmul_rows(row, kernels, compiler)
        if "attention" in ops:
            _attention_rows(row, kernels, compiler)
    return 0


def _candidates(spec, compiler) -> list[dict]:
    """The op's autotune candidates on the gpu target (its `simt` space)."""
    return spec.candidates(compiler.get_target("gpu").caps)


def _label(cfg: dict) -> str:
    tiles = "x".join(str(v) for k, v in cfg.items() if k.startswith("BLOCK"))
    return f"{tiles} w{cfg['num_warps']} s{cfg['num_stages']}"


def _matmul_rows(row, kernels, compiler) -> None:
    from kernels.matmul import SPEC  # noqa: PLC0415
    bf, dev = torch.bfloat16, "cuda"
    for M, N, K in ((4096, 4096, 4096), (16, 4096, 4096), (512, 4096, 4096)):
        a, b = torch.randn(M, K, device=dev, dtype=bf), torch.randn(K, N, device=dev, dtype=bf)
        print(f"matmul bf16 {M}x{N}x{K} (fast)")
        for cfg in _candidates(SPEC, compiler):
            row(_label(cfg), lambda cfg=cfg: kernels.matmul(a, b, config=cfg), lambda: a @ b)
        row("default", lambda: kernels.matmul(a, b), lambda: a @ b)
    print("matmul bf16 4096^3 (strict, vs fast cuBLAS)")
    with compiler.numerics("strict"):
        for bk in (32, 16, 8):
            cfg = dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=bk)
            row(f"64x128x{bk}", lambda cfg=cfg: kernels.matmul(a, b, config=cfg), lambda: a @ b, reps=2)


def _attention_rows(row, kernels, compiler) -> None:
    from kernels.attention import SPEC  # noqa: PLC0415
    bf, dev = torch.bfloat16, "cuda"
    for label, (B, H, HKV, SQ, SK), causal in (("prefill 4x16x2048x128 causal", (4, 16, 16, 2048, 2048), True),
                                                ("decode 8x32/8 q1 kv2048 d128", (8, 32, 8, 1, 2048), False)):
        q = torch.randn(B, H, SQ, 128, device=dev, dtype=bf)
        k, v = (torch.randn(B, HKV, SK, 128, device=dev, dtype=bf) for _ in range(2))
        print(f"attention bf16 {label} (fast)")

        def sdpa():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=HKV != H)
        for cfg in _candidates(SPEC, compiler):
            row(_label(cfg), lambda cfg=cfg: kernels.attention(q, k, v, causal=causal, config=cfg), sdpa)
        row("default", lambda: kernels.attention(q, k, v, causal=causal), sdpa)


if __name__ == "__main__":
    sys.exit(main())
