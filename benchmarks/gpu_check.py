"""Device check for the gpu target: run on a machine with a CUDA (or ROCm) GPU, < 5 minutes.

    python benchmarks/gpu_check.py            # exits 0 with a message when there is no GPU

1. correctness of every library kernel (kernels.matmul / layer_norm / rms_norm / add_rms_norm /
   attention) on CUDA tensors under `compiler.use_target("gpu")`, fast policy, vs the fp64 references;
2. strict-policy bitwise parity with the cpu target on small shapes (torch.equal);
3. timings vs torch (cuBLAS matmul, SDPA, torch layer_norm / rms_norm) as ratios torch_time / ours
   (>= 1.0 means tilejit is faster), and strict vs fast.
Goals (issue 4, H100/H200, fast): matmul bf16 4096^3 >= 0.9x cuBLAS, attention >= 0.8x SDPA,
norms >= 1.0x torch; strict within 4x of fast.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA/ROCm device visible to torch; nothing to check (skipped).")
        return 0
    import compiler  # noqa: PLC0415
    import kernels  # noqa: PLC0415
    import targets.gpu  # noqa: PLC0415
    compiler.register_target("gpu", targets.gpu.TARGET)
    dev = "cuda"
    tgt = compiler.get_target("gpu")
    print(f"device: {torch.cuda.get_device_name()} arch={tgt.arch} torch={torch.__version__}")
    failures = []
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    def check(name, got, ref, **tol):
        try:
            torch.testing.assert_close(got.float().cpu(), ref.float().cpu(), **tol)
            print(f"  ok    {name}")
        except AssertionError as e:
            failures.append(name)
            print(f"  FAIL  {name}: {str(e).splitlines()[0]}")

    # ---- 1. correctness, fast policy ------------------------------------------------------------
    print("1. correctness (fast) vs fp64 references")
    with compiler.use_target("gpu"), compiler.numerics("fast"):
        for dt, tol in ((torch.float32, dict(rtol=1e-4, atol=1e-4)), (torch.float16, {}), (torch.bfloat16, {})):
            a, b, bias = rnd(300, 200, dtype=dt).to(dev), rnd(200, 150, dtype=dt).to(dev), rnd(150, dtype=dt).to(dev)
            check(f"matmul {dt}", kernels.matmul(a, b, bias=bias, activation="gelu"),
                  kernels.matmul_ref(a, b, bias=bias, activation="gelu"), **tol)
            a3 = rnd(3, 64, 96, dtype=dt).to(dev)
            check(f"matmul batched {dt}", kernels.matmul(a3, b[:96]), kernels.matmul_ref(a3, b[:96]), **tol)
            x, w, bb = rnd(64, 1000, dtype=dt).to(dev), rnd(1000, dtype=dt).to(dev), rnd(1000, dtype=dt).to(dev)
            check(f"layer_norm {dt}", kernels.layer_norm(x, w, bb), kernels.layer_norm_ref(x, w, bb), **tol)
            check(f"rms_norm {dt}", kernels.rms_norm(x, w), kernels.rms_norm_ref(x, w), **tol)
            y, res = kernels.add_rms_norm(x, x * 0.5, w)
            ry, rres = kernels.add_rms_norm_ref(x, x * 0.5, w)
            check(f"add_rms_norm {dt}", y, ry, **tol)
            check(f"add_rms_norm residual {dt}", res, rres, **tol)
            q, k, v = (rnd(2, 4, 100, 64, dtype=dt).to(dev), rnd(2, 2, 120, 64, dtype=dt).to(dev),
                       rnd(2, 2, 120, 64, dtype=dt).to(dev))
            for causal in (False, True):
                check(f"attention causal={causal} {dt}", kernels.attention(q, k, v, causal=causal),
                      kernels.attention_ref(q, k, v, causal=causal), **tol)

    # ---- 2. strict: bitwise parity with the cpu target --------------------------------------------
    print("2. strict policy: bitwise parity gpu vs cpu (torch.equal)")
    cases = [
        ("matmul fp32", kernels.matmul, (rnd(33, 70), rnd(70, 40)), dict(activation="silu")),
        ("matmul bf16", kernels.matmul, (rnd(33, 70, dtype=torch.bfloat16), rnd(70, 40, dtype=torch.bfloat16)), {}),
        ("layer_norm", kernels.layer_norm, (rnd(8, 300), rnd(300), rnd(300)), {}),
        ("rms_norm fp16", kernels.rms_norm, (rnd(8, 300, dtype=torch.float16), rnd(300, dtype=torch.float16)), {}),
        ("attention", kernels.attention, (rnd(1, 2, 40, 32), rnd(1, 2, 50, 32), rnd(1, 2, 50, 32)),
         dict(causal=True)),
    ]
    for name, f, args, kw in cases:
        with compiler.numerics("strict"):
            with compiler.use_target("cpu"):
                c = f(*args, **kw)
            with compiler.use_target("gpu"):
                gg = f(*[a.to(dev) for a in args], **kw)
        c, gg = (c[0], gg[0]) if isinstance(c, tuple) else (c, gg)
        same = torch.equal(c, gg.cpu())
        if not same:
            failures.append(f"strict {name}")
        diff = (c.float() - gg.cpu().float()).abs().max().item()
        print(f"  {'ok  ' if same else 'FAIL'}  strict {name}" + ("" if same else f" (max |diff| {diff:g})"))

    # ---- 3. timings --------------------------------------------------------------------------------
    print("3. timings (ratio = torch time / tilejit time; >= 1 is faster than torch)")

    def bench(fn, reps=20):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(3):
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            torch.cuda.synchronize()
            best = min(best, start.elapsed_time(end) / reps)
        return best

    def ratio(name, ours, theirs, goal):
        with compiler.use_target("gpu"), compiler.numerics("fast"):
            t_ours = bench(ours)
        with compiler.use_target("gpu"), compiler.numerics("strict"):
            t_strict = bench(ours, reps=1)
        t_torch = bench(theirs)
        r = t_torch / t_ours
        print(f"  {name:32s} tilejit {t_ours:8.3f} ms  torch {t_torch:8.3f} ms  ratio {r:5.2f} (goal >= {goal})"
              f"  strict/fast {t_strict / t_ours:5.2f} (goal <= 4)")

    bf = torch.bfloat16
    a, b = rnd(4096, 4096, dtype=bf).to(dev), rnd(4096, 4096, dtype=bf).to(dev)
    ratio("matmul bf16 4096^3", lambda: kernels.matmul(a, b), lambda: a @ b, 0.9)
    q, k, v = (rnd(4, 16, 2048, 128, dtype=bf).to(dev) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    ratio("attention bf16 4x16x2048x128 causal", lambda: kernels.attention(q, k, v, causal=True),
          lambda: sdpa(q, k, v, is_causal=True), 0.8)
    x, w, bb = rnd(8192, 4096, dtype=bf).to(dev), rnd(4096, dtype=bf).to(dev), rnd(4096, dtype=bf).to(dev)
    ratio("layer_norm bf16 8192x4096", lambda: kernels.layer_norm(x, w, bb),
          lambda: torch.nn.functional.layer_norm(x, (4096,), w, bb), 1.0)
    if hasattr(torch.nn.functional, "rms_norm"):
        ratio("rms_norm bf16 8192x4096", lambda: kernels.rms_norm(x, w),
              lambda: torch.nn.functional.rms_norm(x, (4096,), w, 1e-6), 1.0)

    print("FAILED: " + ", ".join(failures) if failures else "all correctness and parity checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
