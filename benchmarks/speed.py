"""Speed of the library kernels against torch eager and torch.compile (inductor) on LLM shapes.

    python -m benchmarks.speed [--quick] [--ops norm,matmul,attention] [--repeat R]
                                 [--dtypes fp32,bf16] [--no-compile]

Each case runs the tilejit kernel (`kernels.*`), the torch eager reference op and the same
reference function wrapped in `torch.compile` (one compiled function per case, dynamic=False), all
in this one process with torch's default thread count. The reference ops are:

- layer_norm: torch.nn.functional.layer_norm (weight and bias);
- rms_norm:   torch ops, x * rsqrt(mean(x^2) + eps) * w, computed in fp32 and cast back;
- matmul:     a @ b;
- attention:  torch.nn.functional.scaled_dot_product_attention (enable_gqa for GQA). Decode
  (seq_q = 1) runs non-causal on both sides: torch's is_causal is top-left aligned, which for one
  query would see only key 0; tilejit's bottom-right causal mask equals no mask there.

Times: every callable is warmed up (the first tilejit call compiles or loads its kernel; the first
torch.compile call traces and compiles, timed separately as "compile s"), then each of R samples
times a batch of back-to-back calls sized to last >= ~20 ms; the median sample / calls is
reported. Samples of tilejit, eager and compiled are taken round-robin, so a burst of load from
another process does not land on one of them only (with 2 cpus, a 2-thread op whose second
thread waits for a busy core takes a scheduler time slice, ~4-8 ms, per call). Ratios are speeds relative to tilejit: "vs eager" = t_eager / t_tilejit (> 1: tilejit
is faster), "vs compile" = t_compile / t_tilejit. The goal column is the cpu target's goal for
the ratio vs eager. Every case also checks that tilejit's output matches eager's. "tj rate" is
tilejit's achieved rate: GFLOP/s for matmul and attention (2 flops per multiply-add), GB/s for the
norms (bytes read and written once), and "of limit" its share of this machine's fp32 FMA peak (for
bf16, its bf16 dot peak where the CPU has AMX or AVX512-BF16: the instruction the fast bf16 dots run on)
or copy bandwidth, all measured at the start (benchmarks/machine.py).
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kernels as K  # noqa: E402
from benchmarks import machine  # noqa: E402
from compiler.autotune import timing  # noqa: E402
from compiler.autotune.timing import spread  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
GOALS = {"layer_norm": 1.0, "rms_norm": 1.0, "attention": 0.8, "matmul": 0.5}
MIN_SAMPLE_S = 0.02


# --------------------------------------------------------------------------- torch references
def torch_layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def torch_rms_norm(x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (y * w.float()).to(x.dtype)


def torch_matmul(a, b):
    return a @ b


def torch_attention(q, k, v, causal):
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)


# --------------------------------------------------------------------------- cases
class Case:
    def __init__(self, op, label, make, tj, ref, tol):
        self.op, self.label, self.make, self.tj, self.ref, self.tol = op, label, make, tj, ref, tol

    def work(self, inputs, out) -> tuple[str, float]:
        """("flop", flops) of a matmul or attention call, ("byte", bytes moved) of a norm call."""
        if self.op == "matmul":
            a, b = inputs
            return "flop", 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
        if self.op == "attention":
            q, k, _, causal = inputs
            full = 4.0 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * q.shape[3]
            return "flop", full / 2 if causal and q.shape[2] == k.shape[2] else full
        return "byte", float(sum(t.numel() * t.element_size() for t in (*inputs, out)))


def norm_cases(rows_list, N):
    out = []
    for rows in rows_list:
        def make_ln(dt, rows=rows):
            g = torch.Generator().manual_seed(0)
            return (torch.randn(rows, N, generator=g).to(dt), torch.randn(N, generator=g).to(dt),
                    torch.randn(N, generator=g).to(dt))

        def make_rms(dt, rows=rows):
            g = torch.Generator().manual_seed(1)
            return torch.randn(rows, N, generator=g).to(dt), torch.randn(N, generator=g).to(dt)

        out.append(Case("layer_norm", f"[{rows}, {N}]", make_ln, lambda x, w, b: K.layer_norm(x, w, b, 1e-5),
                        torch_layer_norm, 1e-2))
        out.append(Case("rms_norm", f"[{rows}, {N}]", make_rms, lambda x, w: K.rms_norm(x, w, 1e-6),
                        torch_rms_norm, 1e-2))
    return out


def matmul_cases(shapes):
    out = []
    for name, (M, N, Kd) in shapes:
        def make(dt, M=M, N=N, Kd=Kd):
            g = torch.Generator().manual_seed(2)
            return (torch.randn(M, Kd, generator=g).to(dt),
                    (torch.randn(Kd, N, generator=g) * Kd ** -0.5).to(dt))
        out.append(Case("matmul", f"{name} {M}x{N}x{Kd}", make, lambda a, b: K.matmul(a, b), torch_matmul, 2e-2))
    return out


def attention_cases(shapes):
    out = []
    for name, (B, Hq, Hkv, Sq, Sk, D, causal) in shapes:
        def make(dt, B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D, causal=causal):
            g = torch.Generator().manual_seed(3)
            return (torch.randn(B, Hq, Sq, D, generator=g).to(dt), torch.randn(B, Hkv, Sk, D, generator=g).to(dt),
                    torch.randn(B, Hkv, Sk, D, generator=g).to(dt), causal)
        kv = f"/{Hkv}" if Hkv != Hq else ""
        label = f"{name} ({B},{Hq}{kv},{Sq},{D}) kv{Sk}{' causal' if causal else ''}"
        out.append(Case("attention", label, make, lambda q, k, v, c: K.attention(q, k, v, causal=c),
                        torch_attention, 2e-2))
    return out


def build_cases(quick: bool):
    if quick:
        return (norm_cases([1024, 32], 1024)
                + matmul_cases([("decode", (16, 1024, 1024)), ("prefill", (128, 1024, 1024)),
                                 ("square", (512, 512, 512))])
                + attention_cases([("prefill", (1, 8, 8, 256, 256, 64, True)),
                                    ("gqa", (2, 8, 2, 256, 256, 64, True)),
                                    ("decode", (4, 8, 8, 1, 512, 64, False))]))
    return (norm_cases([4096, 32], 4096)
            + matmul_cases([("decode", (16, 4096, 4096)), ("prefill", (512, 4096, 4096)),
                             ("square", (1024, 1024, 1024))])
            + attention_cases([("prefill", (1, 32, 32, 512, 512, 128, True)),
                                ("gqa", (4, 32, 8, 512, 512, 128, True)),
                                ("decode", (8, 32, 32, 1, 2048, 128, False))]))


# --------------------------------------------------------------------------- timing
def _calls_per_sample(fn, args) -> int:
    """Back-to-back calls that make one sample last >= MIN_SAMPLE_S (from the fastest of 3 calls)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return max(1, math.ceil(MIN_SAMPLE_S / max(best, 1e-7)))


def sample_interleaved(fns, args, repeat: int) -> list[list[float]]:
    """`repeat` samples of the time per call of each of `fns`, taken round-robin (sample i of every
    fn, then sample i + 1, ...) so that load from other processes falls on all of them alike."""
    calls = [_calls_per_sample(fn, args) for fn in fns]
    samples = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(calls[i]):
                fn(*args)
            samples[i].append((time.perf_counter() - t0) / calls[i])
    return samples


def checked_samples(fns, args, repeat: int) -> tuple[list[list[float]], str | None]:
    """`sample_interleaved`, with each callable's fastest sample checked against a run on one thread
    (compiler/autotune/timing.py): samples whose parallel runs waited for busy cores are taken once
    more; (samples, None), or (the samples, why they still cannot be believed)."""
    why = None
    for attempt in range(2):
        samples = sample_interleaved(fns, args, repeat)
        why = None
        for fn, s in zip(fns, samples):
            if min(s) < timing.LONG_S:
                t = timing.Timing(statistics.median(s), spread(s), len(s), min(s))
                why = why or timing.implausible(t, timing.single_thread_best(lambda fn=fn: fn(*args)))
        if why is None:
            return samples, None
        time.sleep(0.2)   # let a burst of other work pass
    return samples, why


def time_interleaved(fns, args, repeat: int) -> list[float]:
    """Median time per call of each of `fns` (`sample_interleaved`)."""
    return [statistics.median(s) for s in sample_interleaved(fns, args, repeat)]


def best_ratio(base: list[float], mine: list[float]) -> float:
    """min(base) / min(mine): the speed-up between the two sides' fastest samples (other work only
    adds time), reported beside the median of the per-sample ratios."""
    return min(base) / min(mine)


def paired_ratio(base: list[float], mine: list[float]) -> tuple[float, float]:
    """(median, spread) of base[i] / mine[i] over samples taken in turn: a pair shares the
    machine's load of its moment, so a busy spell moves both sides of a ratio and not the median."""
    ratios = [b / m for b, m in zip(base, mine)]
    return statistics.median(ratios), spread(ratios)


def _fmt_t(s):
    if s is None:
        return "-"
    return f"{s * 1e3:.3f}" if s < 1e-2 else f"{s * 1e3:.1f}"


def _fmt_r(r):
    return "-" if r is None else f"{r:.2f}x"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--quick", action="store_true", help="smaller shapes")
    ap.add_argument("--ops", default="", help="comma-separated filter (substring) of layer_norm, rms_norm, matmul, "
                                              "attention, or of a case label (e.g. decode)")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma-separated subset of fp32,bf16")
    ap.add_argument("--repeat", type=int, default=5, help="timed samples per callable; the median is reported")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its first call takes ~2-20 s)")
    args = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed

    wanted = [w.strip() for w in args.ops.split(",") if w.strip()]
    cases = [c for c in build_cases(args.quick)
             if not wanted or any(w in c.op or w in c.label for w in wanted)]
    if not cases:
        raise SystemExit(f"--ops {args.ops!r} matches no case")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]

    if not args.no_compile:
        # one compiled function per case: keep dynamo from falling back to eager after 8 recompiles
        for attr in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, attr):
                setattr(torch._dynamo.config, attr, max(getattr(torch._dynamo.config, attr), 1024))

    load0 = os.getloadavg()[0]
    rows = []
    t_all = time.perf_counter()
    for case in cases:
        for dname in dtypes:
            dt = DTYPES[dname]
            inputs = case.make(dt)
            t0 = time.perf_counter()
            out_tj = case.tj(*inputs)
            tj_first = time.perf_counter() - t0
            out_ref = case.ref(*inputs)
            diff = (out_tj.float() - out_ref.float()).abs().max().item()
            scale = max(out_ref.float().abs().max().item(), 1e-30)
            check = "ok" if diff <= case.tol * scale else f"MISMATCH {diff:.1e}"

            fns = [case.tj, case.ref]
            comp_warm = None
            if not args.no_compile:
                cfn = torch.compile(case.ref, dynamic=False)
                t0 = time.perf_counter()
                cfn(*inputs)
                comp_warm = time.perf_counter() - t0
                fns.append(cfn)
            samples, doubt = checked_samples(fns, inputs, args.repeat)
            t_tj, t_eager = statistics.median(samples[0]), statistics.median(samples[1])
            t_comp = statistics.median(samples[2]) if len(samples) > 2 else None
            best = best_ratio(samples[1], samples[0])
            rows.append((case, dname, t_tj, t_eager, t_comp, comp_warm, tj_first, check, case.work(inputs, out_tj),
                         best, doubt))
            print(f"  done {case.op} {case.label} {dname}: tilejit {_fmt_t(t_tj)} ms, eager {_fmt_t(t_eager)} ms"
                  + (f", compile {_fmt_t(t_comp)} ms (warm-up {comp_warm:.1f} s)" if t_comp else "")
                  + (f"; NOT BELIEVED: {doubt}" if doubt else ""), flush=True)
    elapsed = time.perf_counter() - t_all

    hdr = ("op", "shape", "dtype", "tilejit ms", "eager ms", "compile ms", "vs eager", "(best)", "vs compile", "goal",
           "met", "tj rate", "of limit", "tj 1st s", "compile s", "check")
    limits = {"flop": machine.fma_peak_gflops()[0] * 1e9, "byte": machine.copy_bandwidth_gbs() * 1e9}
    bf16_peak = (machine.bf16_dot_peak() or (0.0, ""))[0]
    cells = []
    for case, dname, t_tj, t_eager, t_comp, comp_warm, tj_first, check, (unit, amount), best, doubt in rows:
        limit = bf16_peak * 1e9 if unit == "flop" and dname == "bf16" and bf16_peak else limits[unit]
        r_e = t_eager / t_tj
        r_c = t_comp / t_tj if t_comp else None
        goal = GOALS[case.op]
        mark = "?" if doubt else ""
        cells.append((case.op, case.label, dname, _fmt_t(t_tj), _fmt_t(t_eager), _fmt_t(t_comp), _fmt_r(r_e) + mark,
                      _fmt_r(best) + mark, _fmt_r(r_c) + mark, f">={goal:.1f}x", "yes" if r_e >= goal else "NO",
                      f"{amount / t_tj / 1e9:.1f} {'GFLOP/s' if unit == 'flop' else 'GB/s'}",
                      f"{amount / t_tj / limit:.0%}", f"{tj_first:.2f}", "-" if comp_warm is None else f"{comp_warm:.1f}", check))
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(hdr)]
    left = {0, 1, 2, 15}

    def line(cols):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cols, widths)))

    print()
    print(f"tilejit (cpu) vs torch {torch.__version__}: {'quick' if args.quick else 'full'} shapes, median of "
          f"{args.repeat} samples, torch threads {torch.get_num_threads()}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, cpus {os.cpu_count()}")
    print(machine.summary_line())
    print(line(hdr))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print(line(c))
    print()
    print("vs eager = t_eager / t_tilejit, vs compile = t_compile / t_tilejit (median samples): > 1x means tilejit is "
          "faster; (best) = the same of the fastest samples. ?: a side's fastest sample stayed far slower than its "
          "run on one thread (its threads waited for busy cores): that row's ratios are not to be believed.")
    print("goal: the cpu target's goal for 'vs eager' (norms >= 1.0x eager, attention >= 0.8x SDPA, "
          "matmul >= 0.5x torch).")
    print("tj 1st s: tilejit's first call (compiles the kernel, or loads it from the cache); compile s: "
          "torch.compile's first call (trace + inductor; small when inductor's disk cache already holds the graph), "
          "not in the timings.")
    print("check: tilejit's output vs eager's, max abs diff <= tol * max|eager| (1e-2 norms, 2e-2 matmul/attention).")
    print("attention decode runs non-causal on both sides (one query at the end of the KV: same as bottom-right "
          "causal). Figures are machine-dependent: compare ratios within one run.")
    print(f"elapsed {elapsed:.1f} s; 1-min load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end "
          f"(this process adds ~1; more means other processes shared the {os.cpu_count()} cpus and the times are noisy)")


if __name__ == "__main__":
    main()
