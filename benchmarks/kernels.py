"""The cpu target's speed goals in one table, from one run: each row a ratio against torch measured
in this process, its goal, and whether this run met it.

    python -m benchmarks.kernels [--repeat R] [--only matmul,launch] [--no-model] [--defaults]

Rows: matmul fp32 (1024^3, 512x4096x4096, decode 16x4096x4096) and bf16 (1024^3, decode) against
`a @ b` (oneDNN; AMX or AVX512-BF16 for bf16 where the CPU has them); layer_norm ([4096, 4096],
[32, 4096]) against F.layer_norm eager and under torch.compile; attention (1, 16, 1024, 64) causal
and a decode (8, 32, 1, 128) over 2048 keys against SDPA, fp32 and bf16; the host overhead of one
library call (kernels.rms_norm on [1, 64] minus the raw launch of its kernel); a warm `@kernel`
launch of a 16-element add against torch.add; a Llama-style model (2 layers, hidden 256, GQA 8/2
heads) prefill and decode against eager transformers, fp32 and bf16.

A ratio is the median over samples of t_torch / t_tilejit (> 1: tilejit is faster), each sample of
the two sides taken back to back, and its spread the (q3 - q1) / median of those per-sample ratios;
the two host-overhead rows are the overhead in us and the launch's time over torch.add's. Samples of
the compared callables are taken in turn (benchmarks.speed, benchmarks.dispatch, benchmarks.model_step time them; their
docstrings say how), so load from other processes falls on both sides; the load average printed
at the start and the end says how quiet the machine was. About 2 minutes on 2 cores with the
kernels cached (124 s measured, torch.compile's first compiles of layer_norm included).

The library ops use the autotuner's stored decisions for this machine where there are any (as a
user's calls do); the table's header names the ops that had one, and `--defaults` measures the
built-in default configs instead.
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from benchmarks import dispatch, machine, model_step, speed  # noqa: E402
from compiler.cache.decisions import DecisionStore, fingerprint_hash  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402
from compiler.numerics import current_policy  # noqa: E402
from compiler.target import current_target  # noqa: E402
from kernels.configs import tuned_decisions  # noqa: E402

F32, BF16 = torch.float32, torch.bfloat16


def _kernel_rows():
    """(row label, speed.Case, dtype, goal vs eager, goal vs torch.compile or None)."""
    mm = {c.label.split()[0]: c for c in speed.matmul_cases([
        ("1024^3", (1024, 1024, 1024)), ("prefill", (512, 4096, 4096)), ("decode", (16, 4096, 4096))])}
    ln = speed.norm_cases([4096, 32], 4096)[0::2]   # the layer_norm cases
    att = speed.attention_cases([("causal", (1, 16, 16, 1024, 1024, 64, True)),
                                  ("decode", (8, 32, 32, 1, 2048, 128, False))])
    rows = [("matmul fp32 1024^3", mm["1024^3"], F32, 0.9, None),
            ("matmul fp32 512x4096x4096", mm["prefill"], F32, 0.9, None),
            ("matmul fp32 decode 16x4096x4096", mm["decode"], F32, 0.9, None),
            ("matmul bf16 1024^3", mm["1024^3"], BF16, 0.8, None),
            ("matmul bf16 decode 16x4096x4096", mm["decode"], BF16, 0.8, None)]
    rows += [(f"layer_norm {dn} {c.label}", c, dt, 1.2, 1.0) for c in ln for dn, dt in (("fp32", F32), ("bf16", BF16))]
    rows += [(f"attention {dn} {c.label}", c, dt, 1.0, None) for c in att for dn, dt in (("fp32", F32), ("bf16", BF16))]
    return rows


def _measure_kernel(case, dtype, with_compile: bool, repeat: int):
    """(t_tilejit, t_eager, vs_eager, vs_compile, whether tilejit computed what eager did, why the
    timing cannot be believed or None: speed.checked_samples): vs_* are the (median, spread) of the
    per-sample speed-ups (speed.paired_ratio); vs_compile is (None, None) without torch.compile."""
    inputs = case.make(dtype)
    got, want = case.tj(*inputs).float(), case.ref(*inputs).float()
    ok = (got - want).abs().max().item() <= case.tol * max(want.abs().max().item(), 1e-30)
    fns = [case.tj, case.ref]
    if with_compile:
        fns.append(torch.compile(case.ref, dynamic=False))
        fns[-1](*inputs)
    (tj, eager, *compiled), doubt = speed.checked_samples(fns, inputs, repeat)
    vs_compile = speed.paired_ratio(compiled[0], tj) if compiled else (None, None)
    return statistics.median(tj), statistics.median(eager), speed.paired_ratio(eager, tj), vs_compile, ok, doubt


def _model_rows(repeat: int):
    a = model_step.parser().parse_args(["--hidden", "256", "--intermediate", "704", "--heads", "8",
                                        "--kv-heads", "2", "--vocab", "1024", "--repeat", str(repeat)])
    return [(f"model step {dn} {step} (2 layers, hidden 256, GQA 8/2)", t_tj, t_ref, ratio, sp)
            for step, dn, t_tj, t_ref, _, _, ratio, sp in model_step.run(a)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--repeat", type=int, default=5, help="timed samples per row; the median is reported")
    ap.add_argument("--only", default="", help="comma-separated substrings of row labels (matmul, bf16, launch, model)")
    ap.add_argument("--no-model", action="store_true", help="skip the model-step rows (they need transformers)")
    ap.add_argument("--defaults", action="store_true",
                    help="ignore the autotuner's stored decisions (measure the built-in configs)")
    a = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed
    with tuned_decisions(not a.defaults):
        _run(a)


def _configs_line(defaults: bool) -> str:
    """Which configs the library ops ran: the built-in ones, or stored decisions for some ops."""
    if defaults:
        return "configs: the built-in defaults (--defaults)"
    tgt, store = current_target(), DecisionStore()
    tuned = [op for op in ("matmul", "layer_norm", "attention", "rms_norm")
             if store.path(op, tgt.name, fingerprint_hash(tgt), current_policy()).exists()]
    if not tuned:
        return "configs: the built-in defaults (no stored autotune decisions for these ops)"
    return f"configs: stored autotune decisions for {', '.join(tuned)} ({store.dir}; --defaults ignores them)"


def _run(a) -> None:
    wanted = [w.strip() for w in a.only.split(",") if w.strip()]

    def picked(label):
        return not wanted or any(w in label for w in wanted)

    load0, t0 = os.getloadavg()[0], time.perf_counter()
    table = []   # (what, tilejit, baseline, ratio text, spread text, goal text, met)
    for label, case, dt, goal, goal_c in _kernel_rows():
        if not picked(label):
            continue
        t_tj, t_eager, (r, sp), (rc, sp_c), ok, doubt = _measure_kernel(case, dt, goal_c is not None, a.repeat)
        met = ok and not doubt and r >= goal and (rc is None or rc >= goal_c)
        ratio = (f"{r:.2f}x eager" + (f", {rc:.2f}x compile" if rc else "") + ("" if ok else " MISMATCH")
                 + (" ? (its threads waited for busy cores)" if doubt else ""))
        spreads = f"{sp:.0%}" + (f", {sp_c:.0%}" if rc else "")
        want = f">= {goal}x eager" + (f", >= {goal_c}x compile" if goal_c else "")
        table.append((label, f"{t_tj * 1e3:.3f} ms", f"{t_eager * 1e3:.3f} ms", ratio, spreads, want, met))
        print(f"  done {label}: {ratio}", flush=True)
    if picked("library call overhead"):
        lib, raw = dispatch.library_call(2500, max(a.repeat, 9))
        table.append(("library call overhead (rms_norm [1, 64])", f"{lib:.2f} us", f"{raw:.2f} us raw launch",
                      f"{lib - raw:.2f} us", "-", f"<= {dispatch.LIB_GOAL_US:.0f} us", lib - raw <= dispatch.LIB_GOAL_US))
    if picked("warm launch of a 16-element add"):
        t_add, t_torch = dispatch.add_vs_torch(5000, max(a.repeat, 9))
        table.append(("warm launch of a 16-element add", f"{t_add:.2f} us", f"{t_torch:.2f} us torch.add",
                      f"{t_add / t_torch:.2f}x torch.add", "-", f"<= {dispatch.ADD_GOAL:.0f}x",
                      t_add <= dispatch.ADD_GOAL * t_torch))
    if not a.no_model and picked("model step"):
        for label, t_tj, t_ref, r, sp in _model_rows(a.repeat):
            if picked(label):
                table.append((label, f"{t_tj * 1e3:.2f} ms", f"{t_ref * 1e3:.2f} ms", f"{r:.2f}x eager", f"{sp:.0%}",
                              ">= 1.0x eager", r >= 1.0))
    if not table:
        raise SystemExit(f"--only {a.only!r} matches no row")

    hdr = ("what", "tilejit", "torch", "ratio", "spread", "goal", "met")
    cells = [(w, t, b, r, s, g, "yes" if m else "NO") for w, t, b, r, s, g, m in table]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(hdr)]
    print()
    print(f"tilejit (cpu) vs torch {torch.__version__}, torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}, "
          f"median of {a.repeat} samples")
    print(machine.summary_line())
    print(_configs_line(a.defaults))
    for line in (hdr, tuple("-" * w for w in widths), *cells):
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
    met = sum(m for *_, m in table)
    print(f"\n{met} of {len(table)} goals met. ratio: the median over samples of t_torch / t_tilejit (> 1x: tilejit "
          f"is faster; the times columns are each side's median sample); spread: (q3 - q1) / median of those "
          f"per-sample ratios, a row is settled where it is small next to the ratio's distance from its goal; the "
          f"overhead rows are host time before any work. elapsed {time.perf_counter() - t0:.0f} s; 1-min load average {load0:.2f} at "
          f"the start, {os.getloadavg()[0]:.2f} at the end (this process adds ~1-2)")


if __name__ == "__main__":
    main()
