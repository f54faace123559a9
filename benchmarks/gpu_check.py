"""Device check for the gpu target: run on a machine with a CUDA (or ROCm) GPU, < 5 minutes.

    python benchmarks/gpu_check.py              # exits 0 with a message when there is no GPU
    python benchmarks/gpu_check.py --dry-run    # no GPU needed: sections 1-2 through gpu:interpret
                                                # on CPU tensors with tiny shapes, no timings
    TILEJIT_CACHE_STRICT=1 python benchmarks/gpu_check.py   # prove a pre-built cache is complete

0. the launch path: `gpu` resolves the device's arch and shares the fingerprint of `gpu:<arch>`
   (so entries pre-built without a GPU are hits); every Triton compile is a tilejit cache build,
   every kernel runs from a binary loaded out of a tilejit cache entry, and Triton's JIT never
   launches anything;
1. correctness of every library kernel (kernels.matmul / layer_norm / rms_norm / add_rms_norm /
   attention) on CUDA tensors under `compiler.use_target("gpu")`, fast policy, vs the fp64 references;
2. strict-policy bitwise parity with the cpu target on small shapes (torch.equal);
3. timings vs torch (cuBLAS matmul, SDPA, torch layer_norm / rms_norm) as ratios torch_time / ours
   (>= 1.0 means tilejit is faster), and strict vs fast. Timings still to run when --budget seconds
   have passed are skipped (and listed), so the script stays within its time.
Goals (H100/H200, fast policy): matmul bf16 4096^3 >= 0.9x cuBLAS, attention >= 0.8x SDPA,
norms >= 1.0x torch; strict within 4x of fast.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402


class PathCounter:
    """Counts, while installed, Triton compiles, tilejit gpu builds, binaries loaded from cache
    entries, and launches through Triton's own JIT (which the gpu target must never use)."""

    def __init__(self):
        import triton  # noqa: PLC0415
        import triton.compiler.compiler as cc  # noqa: PLC0415
        from triton.runtime.jit import JITFunction  # noqa: PLC0415

        from targets.gpu import toolchain  # noqa: PLC0415
        self.counts = dict(triton_compile=0, tilejit_builds=0, binaries_loaded=0, triton_jit_launches=0)
        self._undo = []

        def count(obj, attr, name):
            real = getattr(obj, attr)

            def wrapper(*a, **k):
                self.counts[name] += 1
                return real(*a, **k)
            setattr(obj, attr, wrapper)
            self._undo.append((obj, attr, real))
        count(cc, "compile", "triton_compile")
        if triton.compile is not cc.compile:
            count(triton, "compile", "triton_compile")
        count(toolchain, "compile_kernel", "tilejit_builds")
        count(toolchain, "load_compiled", "binaries_loaded")
        count(JITFunction, "run", "triton_jit_launches")

    def close(self) -> None:
        for obj, attr, real in reversed(self._undo):
            setattr(obj, attr, real)
        self._undo.clear()

    def problems(self) -> list[str]:
        c = self.counts
        out = []
        if c["triton_compile"] != c["tilejit_builds"]:
            out.append(f"{c['triton_compile']} triton.compile calls but {c['tilejit_builds']} tilejit builds")
        if c["triton_jit_launches"]:
            out.append(f"{c['triton_jit_launches']} launches through Triton's JITFunction")
        if not c["binaries_loaded"]:
            out.append("no binary was loaded from a tilejit cache entry")
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: sections 1-2 through gpu:interpret on CPU tensors, tiny shapes, no timings")
    ap.add_argument("--budget", type=float, default=270.0,
                    help="seconds after which the remaining timings are skipped (default 270)")
    args = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    t_start = time.perf_counter()
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_check: no CUDA/ROCm device visible to torch; nothing to check (skipped). "
              "--dry-run checks the script itself on CPU.")
        return 0
    import compiler  # noqa: PLC0415
    import kernels  # noqa: PLC0415
    import targets.gpu  # noqa: PLC0415
    from compiler.cache import STATS  # noqa: PLC0415
    compiler.register_target("gpu", targets.gpu.TARGET)
    dry = args.dry_run
    dev, gpu = ("cpu", "gpu:interpret") if dry else ("cuda", "gpu")
    failures = []
    tgt = compiler.get_target(gpu)
    if dry:
        print(f"dry run: target {gpu} on CPU tensors, tiny shapes, no timings; torch={torch.__version__}")
    else:
        print(f"device: {torch.cuda.get_device_name()} arch={tgt.arch} torch={torch.__version__}")
        print("0. launch path")
        same = tgt.fingerprint() == compiler.get_target(f"gpu:{tgt.arch}").fingerprint()
        print(f"  {'ok  ' if same else 'FAIL'}  'gpu' has the fingerprint of 'gpu:{tgt.arch}' "
              "(entries pre-built without a GPU are cache hits)")
        if not same:
            failures.append("fingerprint")
    counter = None if dry else PathCounter()
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    def check(name, got, ref, **tol):
        try:
            torch.testing.assert_close(got.float().cpu(), ref.float().cpu(), **tol)
            print(f"  ok    {name}")
        except AssertionError as e:
            failures.append(name)
            print(f"  FAIL  {name}: " + " ".join(str(e).split("\n")[:4]))

    # shapes: (device, dry run)
    def pick(full, tiny):
        return tiny if dry else full

    # ---- 1. correctness, fast policy ------------------------------------------------------------
    print("1. correctness (fast) vs fp64 references")
    M, K, N = pick((300, 200, 150), (20, 24, 12))
    B, MB, KB = pick((3, 64, 96), (2, 8, 16))
    R, C = pick((64, 1000), (4, 40))
    H, HKV, SQ, SK, D = pick((4, 2, 100, 120, 64), (2, 1, 8, 12, 16))
    with compiler.use_target(gpu), compiler.numerics("fast"):
        # fast results differ from the fp64 reference by the fp32 accumulation order, which can move the
        # final rounding by one ulp of the output dtype: fp16's ulp is up to 2^-9 relative (torch's
        # default rtol 1e-3 is below it), bf16's up to 2^-7 (rtol 1.6e-2, torch's bf16 default, given
        # explicitly: the comparison runs on fp32 copies)
        for dt, tol in ((torch.float32, dict(rtol=1e-4, atol=1e-4)), (torch.float16, dict(rtol=2e-3, atol=1e-4)),
                        (torch.bfloat16, dict(rtol=1.6e-2, atol=1e-5))):
            a, b, bias = rnd(M, K, dtype=dt).to(dev), rnd(K, N, dtype=dt).to(dev), rnd(N, dtype=dt).to(dev)
            check(f"matmul {dt}", kernels.matmul(a, b, bias=bias, activation="gelu"),
                  kernels.matmul_ref(a, b, bias=bias, activation="gelu"), **tol)
            a3 = rnd(B, MB, KB, dtype=dt).to(dev)
            check(f"matmul batched {dt}", kernels.matmul(a3, b[:KB]), kernels.matmul_ref(a3, b[:KB]), **tol)
            x, w, bb = rnd(R, C, dtype=dt).to(dev), rnd(C, dtype=dt).to(dev), rnd(C, dtype=dt).to(dev)
            check(f"layer_norm {dt}", kernels.layer_norm(x, w, bb), kernels.layer_norm_ref(x, w, bb), **tol)
            check(f"rms_norm {dt}", kernels.rms_norm(x, w), kernels.rms_norm_ref(x, w), **tol)
            y, res = kernels.add_rms_norm(x, x * 0.5, w)
            ry, rres = kernels.add_rms_norm_ref(x, x * 0.5, w)
            check(f"add_rms_norm {dt}", y, ry, **tol)
            check(f"add_rms_norm residual {dt}", res, rres, **tol)
            q, k, v = (rnd(2, H, SQ, D, dtype=dt).to(dev), rnd(2, HKV, SK, D, dtype=dt).to(dev),
                       rnd(2, HKV, SK, D, dtype=dt).to(dev))
            for causal in (False, True):
                check(f"attention causal={causal} {dt}", kernels.attention(q, k, v, causal=causal),
                      kernels.attention_ref(q, k, v, causal=causal), **attention_tolerance(tol, v))
        # a view 4 bytes past an aligned start: the binary compiled without that assumption runs
        x = rnd(R, C + 1).to(dev)[:, 1:]
        check("rms_norm on a misaligned view", kernels.rms_norm(x, w.float()), kernels.rms_norm_ref(x, w.float()),
              rtol=1e-4, atol=1e-4)

    # ---- 2. strict: bitwise parity with the cpu target --------------------------------------------
    print(f"2. strict policy: bitwise parity {gpu} vs cpu (torch.equal)")
    SM, SK2, SN = pick((33, 70, 40), (9, 20, 12))
    SR, SC = pick((8, 300), (3, 40))
    SQ2, SK3, SD = pick((40, 50, 32), (6, 9, 16))
    cases = [
        ("matmul fp32", kernels.matmul, (rnd(SM, SK2), rnd(SK2, SN)), dict(activation="silu")),
        ("matmul bf16", kernels.matmul, (rnd(SM, SK2, dtype=torch.bfloat16), rnd(SK2, SN, dtype=torch.bfloat16)), {}),
        ("layer_norm", kernels.layer_norm, (rnd(SR, SC), rnd(SC), rnd(SC)), {}),
        ("rms_norm fp16", kernels.rms_norm, (rnd(SR, SC, dtype=torch.float16), rnd(SC, dtype=torch.float16)), {}),
        ("attention", kernels.attention, (rnd(1, 2, SQ2, SD), rnd(1, 2, SK3, SD), rnd(1, 2, SK3, SD)),
         dict(causal=True)),
    ]
    for name, f, fargs, kw in cases:
        with compiler.numerics("strict"):
            with compiler.use_target("cpu"):
                c = f(*fargs, **kw)
            with compiler.use_target(gpu):
                gg = f(*[a.to(dev) for a in fargs], **kw)
        c, gg = (c[0], gg[0]) if isinstance(c, tuple) else (c, gg)
        same = torch.equal(c, gg.cpu())
        if not same:
            failures.append(f"strict {name}")
        diff = (c.float() - gg.cpu().float()).abs().max().item()
        print(f"  {'ok  ' if same else 'FAIL'}  strict {name}" + ("" if same else f" (max |diff| {diff:g})"))

    # ---- 3. timings --------------------------------------------------------------------------------
    print("3. timings (ratio = torch time / tilejit time; >= 1 is faster than torch)")
    bf = torch.bfloat16
    F = torch.nn.functional

    # each case makes its tensors only when it runs: (our launch, torch's launch)
    def matmul_case():
        a, b = rnd(4096, 4096, dtype=bf).to(dev), rnd(4096, 4096, dtype=bf).to(dev)
        return (lambda: kernels.matmul(a, b)), (lambda: a @ b)

    def attention_case():
        q, k, v = (rnd(4, 16, 2048, 128, dtype=bf).to(dev) for _ in range(3))
        return (lambda: kernels.attention(q, k, v, causal=True)), (lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=True))

    def norm_case(ours, theirs):
        def make():
            x, w, b = rnd(8192, 4096, dtype=bf).to(dev), rnd(4096, dtype=bf).to(dev), rnd(4096, dtype=bf).to(dev)
            return (lambda: ours(x, w, b)), (lambda: theirs(x, w, b))
        return make

    timings = [("matmul bf16 4096^3", matmul_case, 0.9),
               ("attention bf16 4x16x2048x128 causal", attention_case, 0.8),
               ("layer_norm bf16 8192x4096", norm_case(kernels.layer_norm,
                                                       lambda x, w, b: F.layer_norm(x, (4096,), w, b)), 1.0)]
    if hasattr(F, "rms_norm"):
        timings.append(("rms_norm bf16 8192x4096", norm_case(lambda x, w, b: kernels.rms_norm(x, w),
                                                             lambda x, w, b: F.rms_norm(x, (4096,), w, 1e-6)), 1.0))
    if dry:
        print("  (dry run: not timed) " + "; ".join(name for name, _, _ in timings))
    for name, setup, goal in [] if dry else timings:
        if time.perf_counter() - t_start > args.budget:
            print(f"  skipped {name}: past the {args.budget:.0f} s budget")
            continue
        ours, theirs = setup()
        with compiler.use_target(gpu), compiler.numerics("fast"):
            t_ours = _bench(ours)
        with compiler.use_target(gpu), compiler.numerics("strict"):
            t_strict = _bench(ours, reps=1)
        t_torch = _bench(theirs)
        r = t_torch / t_ours
        print(f"  {name:36s} tilejit {t_ours:8.3f} ms  torch {t_torch:8.3f} ms  ratio {r:5.2f} (goal >= {goal})"
              f"  strict/fast {t_strict / t_ours:5.2f} (goal <= 4)")

    if counter is not None:
        counter.close()
        c = counter.counts
        probs = counter.problems()
        failures += [f"path: {p}" for p in probs]
        print(f"path: {c['binaries_loaded']} binaries loaded from tilejit cache entries, {c['tilejit_builds']} built "
              f"here (= {c['triton_compile']} triton.compile calls), {c['triton_jit_launches']} Triton JIT launches"
              + ("" if not probs else "  FAIL: " + "; ".join(probs)))
    print(f"cache: {STATS.as_dict()}  total {time.perf_counter() - t_start:.0f} s")
    print("FAILED: " + ", ".join(failures) if failures else "all correctness and parity checks passed")
    return 1 if failures else 0


def attention_tolerance(tol: dict, v: torch.Tensor) -> dict:
    """Fast attention on fp16/bf16 rounds its probabilities to v's dtype for the P.V dot (narrow
    dots, docs/numerics.md), as FlashAttention and torch's fused SDPA do: each output moves by at
    most the dtype's unit roundoff times max |v|."""
    if v.dtype not in (torch.float16, torch.bfloat16):
        return tol
    unit = torch.finfo(v.dtype).eps / 2
    return {**tol, "atol": max(tol.get("atol", 0.0), unit * v.abs().max().item())}


def _bench(fn, reps=20):
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


if __name__ == "__main__":
    sys.exit(main())
