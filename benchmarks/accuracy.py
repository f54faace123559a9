"""Accuracy of the library kernels against their fp64 references, per dtype and numerics policy.

    python -m benchmarks.accuracy [--quick] [--kernels matmul,attention ...] [--seed S]

For every kernel x dtype (fp32, fp16, bf16) x policy (fast, strict) and a few seeded shapes, the
kernel's output is compared with the fp64 reference (`kernels.*_ref(..., out_dtype=float64)`):

- ulp:     max distance in units in the last place OF THE OUTPUT DTYPE between the output and the
           fp64 reference rounded to that dtype. Both are read as integer bit patterns and mapped
           to a monotonic integer order (negative floats are sign-magnitude, so x < 0 maps to
           -(bits & ~sign)); +0 and -0 coincide. 0 = the correctly rounded result, 1 = faithful.
           "ulp" is over all elements; "ulp|sig" only over the significant elements (below).
- rel:     max |out - ref| / max(|ref|, tiny) over the significant elements, those with
           |ref| > 1e-3 * max|ref| of the tensor. Near-zero outputs of a sum that cancels (matmul,
           attention, layer_norm around the mean) have a large error relative to themselves that
           says nothing about the kernel, so they are left out of rel and ulp|sig.
- mean abs: mean |out - ref| over all elements.

A NaN or inf in the output where the reference is finite is reported as "nonfinite".
"""
from __future__ import annotations

import os
import sys

if __package__ in (None, ""):   # run as a file: import from this checkout, as `python -m` from its root does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

import kernels as K  # noqa: E402
from compiler import numerics  # noqa: E402
from compiler.clihelp import description, line_buffered  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
POLICIES = ("fast", "strict")
SIG_FRAC = 1e-3  # an element is "significant" when |ref| > SIG_FRAC * max|ref|


# --------------------------------------------------------------------------- error measures
def _ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Integer bit patterns of a float tensor mapped to a monotonic int64 order."""
    if t.dtype == torch.float32:
        bits, sign = t.view(torch.int32).to(torch.int64), 1 << 31
    elif t.dtype in (torch.float16, torch.bfloat16):
        bits, sign = t.view(torch.int16).to(torch.int64), 1 << 15
    else:
        raise TypeError(f"no ulp ordering for {t.dtype}")
    bits = bits & ((sign << 1) - 1)        # the raw unsigned pattern
    mag = bits & (sign - 1)                 # drop the sign bit
    return torch.where(bits >= sign, -mag, mag)


def ulp_distance(out: torch.Tensor, ref_rounded: torch.Tensor) -> torch.Tensor:
    return (_ordered_bits(out) - _ordered_bits(ref_rounded)).abs()


def measure(out: torch.Tensor, ref64: torch.Tensor) -> dict:
    """Error measures of `out` (fp32/fp16/bf16) against the fp64 reference `ref64`."""
    out, ref64 = out.reshape(-1), ref64.reshape(-1)
    finite_ref = torch.isfinite(ref64)
    nonfinite = int((~torch.isfinite(out) & finite_ref).sum())
    o, r = out[finite_ref], ref64[finite_ref]
    ulp = ulp_distance(o, r.to(out.dtype))
    err = (o.double() - r).abs()
    amax = r.abs().max().item() if r.numel() else 0.0
    sig = r.abs() > SIG_FRAC * amax
    tiny = torch.finfo(out.dtype).tiny
    rel = err[sig] / r[sig].abs().clamp_min(tiny)
    return {
        "ulp": int(ulp.max()) if ulp.numel() else 0,
        "ulp_sig": int(ulp[sig].max()) if sig.any() else 0,
        "rel": rel.max().item() if rel.numel() else 0.0,
        "mae": err.mean().item() if err.numel() else 0.0,
        "nonfinite": nonfinite,
    }


# --------------------------------------------------------------------------- cases
# Each case: name -> (list of full shapes, quick shape index, run(shape, dtype, gen) -> [(label, out, ref64)])
def _randn(shape, dtype, gen, scale=1.0):
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(dtype)


def _matmul(shape, dtype, gen, bias_gelu=False):
    M, N, Kd = shape
    a = _randn((M, Kd), dtype, gen)
    b = _randn((Kd, N), dtype, gen, scale=Kd ** -0.5)
    if bias_gelu:
        bias = _randn((N,), dtype, gen)
        out = K.matmul(a, b, bias=bias, activation="gelu")
        ref = K.matmul_ref(a, b, bias=bias, activation="gelu", out_dtype=torch.float64)
    else:
        out = K.matmul(a, b)
        ref = K.matmul_ref(a, b, out_dtype=torch.float64)
    return [("", out, ref)]


def _layer_norm(shape, dtype, gen):
    x = _randn(shape, dtype, gen, scale=2.0) + 0.5
    w = _randn(shape[-1:], dtype, gen)
    b = _randn(shape[-1:], dtype, gen)
    return [("", K.layer_norm(x, w, b), K.layer_norm_ref(x, w, b, out_dtype=torch.float64))]


def _rms_norm(shape, dtype, gen):
    x = _randn(shape, dtype, gen, scale=2.0)
    w = _randn(shape[-1:], dtype, gen)
    return [("", K.rms_norm(x, w), K.rms_norm_ref(x, w, out_dtype=torch.float64))]


def _add_rms_norm(shape, dtype, gen):
    x = _randn(shape, dtype, gen, scale=2.0)
    r = _randn(shape, dtype, gen)
    w = _randn(shape[-1:], dtype, gen)
    y, s = K.add_rms_norm(x, r, w)
    y_ref, s_ref = K.add_rms_norm_ref(x, r, w, out_dtype=torch.float64)
    # the residual sum is rounded once to the dtype: its reference is exact at that dtype
    return [("", y, y_ref), (" (x+r)", s, s_ref.double())]


def _attention(shape, dtype, gen, causal):
    B, Hq, Hkv, Sq, Sk, D = shape
    q = _randn((B, Hq, Sq, D), dtype, gen)
    k = _randn((B, Hkv, Sk, D), dtype, gen)
    v = _randn((B, Hkv, Sk, D), dtype, gen)
    out = K.attention(q, k, v, causal=causal)
    return [("", out, K.attention_ref(q, k, v, causal=causal, out_dtype=torch.float64))]


def _fmt_attn(s):
    B, Hq, Hkv, Sq, Sk, D = s
    kv = f"/{Hkv}" if Hkv != Hq else ""
    return f"B{B} H{Hq}{kv} q{Sq} k{Sk} d{D}"


CASES = {
    # matmul shapes are (M, N, K); the odd ones exercise the masked edges
    "matmul": ([(128, 256, 384), (97, 200, 301)], lambda s, d, g: _matmul(s, d, g),
               lambda s: "x".join(map(str, s))),
    "matmul_bias_gelu": ([(128, 256, 384), (65, 130, 257)], lambda s, d, g: _matmul(s, d, g, bias_gelu=True),
                         lambda s: "x".join(map(str, s))),
    "layer_norm": ([(64, 1024), (33, 4096), (17, 1000)], _layer_norm, lambda s: "x".join(map(str, s))),
    "rms_norm": ([(64, 1024), (33, 4096), (17, 1000)], _rms_norm, lambda s: "x".join(map(str, s))),
    "add_rms_norm": ([(64, 1024), (17, 1000)], _add_rms_norm, lambda s: "x".join(map(str, s))),
    # attention shapes are (B, Hq, Hkv, Sq, Sk, D)
    "attention": ([(2, 4, 4, 128, 128, 64), (1, 2, 2, 77, 77, 96)],
                  lambda s, d, g: _attention(s, d, g, causal=False), _fmt_attn),
    "attention_causal_gqa": ([(2, 8, 2, 128, 128, 64), (1, 4, 1, 100, 100, 128)],
                             lambda s, d, g: _attention(s, d, g, causal=True), _fmt_attn),
    "attention_decode": ([(4, 8, 2, 1, 512, 128), (2, 4, 4, 1, 333, 64)],
                         lambda s, d, g: _attention(s, d, g, causal=True), _fmt_attn),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=description(__doc__))
    ap.add_argument("--quick", action="store_true", help="one shape per kernel")
    ap.add_argument("--kernels", default="", help=f"comma-separated filter (substring match) of: {', '.join(CASES)}")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated subset of fp32,fp16,bf16")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated subset of fast,strict")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    line_buffered()   # each row reaches a log file as it is printed

    wanted = [w.strip() for w in args.kernels.split(",") if w.strip()]
    names = [n for n in CASES if not wanted or any(w == n for w in wanted)] or \
            [n for n in CASES if any(w in n for w in wanted)]
    if not names:
        raise SystemExit(f"--kernels {args.kernels!r} matches none of {', '.join(CASES)}")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]

    rows = []
    t_start = time.perf_counter()
    for name in names:
        shapes, run, fmt = CASES[name]
        if args.quick:
            shapes = shapes[:1]
        for dname in dtypes:
            for policy in policies:
                for si, shape in enumerate(shapes):
                    gen = torch.Generator().manual_seed(args.seed * 1000 + si)
                    try:
                        with numerics(policy):
                            results = run(shape, DTYPES[dname], gen)
                    except Exception as e:  # report and go on: one broken case must not hide the others
                        rows.append((name, dname, policy, fmt(shape), None, f"{type(e).__name__}: {e}"))
                        continue
                    for label, out, ref in results:
                        rows.append((name + label, dname, policy, fmt(shape), measure(out, ref), ""))
    elapsed = time.perf_counter() - t_start

    hdr = ("kernel", "dtype", "policy", "shape", "ulp", "ulp|sig", "max rel", "mean abs")
    cells = []
    for name, dname, policy, shape, m, err in rows:
        if m is None:
            cells.append((name, dname, policy, shape, "ERROR", "", "", err[:80]))
            continue
        extra = f"  nonfinite={m['nonfinite']}" if m["nonfinite"] else ""
        cells.append((name, dname, policy, shape, str(m["ulp"]), str(m["ulp_sig"]), f"{m['rel']:.2e}",
                      f"{m['mae']:.2e}{extra}"))
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(hdr)]
    right = {4, 5, 6, 7}

    def line(cols):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))

    print(f"accuracy vs fp64 reference, seed {args.seed}"
          f" ({'quick: one shape per kernel' if args.quick else 'all shapes'})")
    print(line(hdr))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print(line(c))
    print()
    print("ulp: max distance in ulps of the output dtype to the fp64 reference rounded to that dtype "
          "(0 = correctly rounded).")
    print(f"ulp|sig, max rel: over the elements with |ref| > {SIG_FRAC:g} * max|ref| only "
          "(near-zero results of cancelling sums are left out).")
    print("rel = |out - ref| / max(|ref|, tiny); mean abs = mean |out - ref| over all elements; "
          "ref = the fp64 reference, unrounded.")
    print("shapes: matmul MxNxK; norms rows x N; attention B, q heads/kv heads, seq_q, seq_k, head_dim. "
          "'(x+r)': the residual sum returned by add_rms_norm.")
    print(f"elapsed {elapsed:.1f} s (includes kernel compilation where the kernel cache was cold)")
    if any(r[4] is None for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
