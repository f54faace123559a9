"""Kernels for the differential tests: plain (undecorated) functions written against
``triton.language`` so that the very same function runs through Triton's interpreter and through
tilejit (whose frontend maps ``triton.language`` onto its own surface).

Each kernel comes with a list of ``Case``s: how to build its inputs, how to launch it, which
tensors are its outputs, a torch reference for those outputs, and the tolerance allowed between
tilejit and Triton's interpreter.  Tolerances: ``EXACT`` (bitwise, NaN == NaN) wherever both sides
perform the same IEEE operations in the same order; ``FP32`` (rtol=atol=1e-6) where an
implementation may legitimately contract ``a*b+c`` into one fma; ``TRANSCENDENTAL`` /
``REORDERED`` (looser, documented beside their definition) only where the library functions or
the summation order are not pinned down by the kernel text.

Inputs are chosen so that results which *could* depend on summation order are exact anyway
(integer-valued or dyadic floats whose partial sums are all representable in fp32) – that way most
reductions and dots are still checked bitwise.
"""

from __future__ import annotations

import types
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, Sequence, Tuple

import torch
import triton
import triton.language as tl

# --------------------------------------------------------------------------------------------
# tolerances: (rtol, atol); None = bitwise equality (NaNs compare equal: unwritten outputs keep
# their NaN sentinel on both sides).
# --------------------------------------------------------------------------------------------
EXACT = None
# Same operations in the same order, but a C++ compiler may contract x*y+z into an fma (one
# rounding instead of two): at most ~1 ulp apart, well inside 1e-6.
FP32 = (1e-6, 1e-6)
# exp/exp2/log/log2/rsqrt/sigmoid: Triton's interpreter uses numpy's SIMD float32 routines
# (documented as <= ~4 ulp for some functions), tilejit's targets use their own (libm / vector
# polynomials / rsqrt approximations + Newton).  Neither is required to be correctly rounded, so
# results may differ in the last few ulps; 1e-5 relative is ~80 ulp of fp32 and catches any real
# bug (wrong function, wrong argument, wrong mask) while not depending on libm details.
TRANSCENDENTAL = (1e-5, 1e-6)
# Sums of non-dyadic random fp32 values whose order is not fixed by the kernel text (numpy's
# pairwise np.sum / BLAS in the interpreter vs tilejit's tree or serial order), combined with
# transcendental functions: the error bound grows with the number of summed terms (n*eps in the
# worst case); 2e-5 covers rows of up to ~1000 elements.
REORDERED = (2e-5, 1e-6)


@dataclass
class Case:
    id: str
    make: Callable[[torch.Generator], Dict[str, torch.Tensor]]
    launch: Callable[[Callable, Dict[str, torch.Tensor]], None]
    ref: Callable[[Dict[str, torch.Tensor]], Dict[str, torch.Tensor]]
    tol: Dict[str, Tuple[float, float] | None] = field(default_factory=dict)  # output -> tol
    ref_tol: Dict[str, Tuple[float, float] | None] = field(default_factory=dict)  # vs torch
    # False where Triton's interpreter cannot run the case (then tilejit is checked against the
    # torch reference with ``ref_tol``)
    interp_ok: bool = True

    @property
    def outputs(self) -> Sequence[str]:
        return list(self.tol)


CASES: list[Case] = []

SIZES_1D = (1, 17, 1000)


def _nan_like(shape, dtype):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return torch.full(shape, float("nan"), dtype=dtype)


def _randn(g, shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(shape, generator=g) * scale).to(dtype)


def _dyadic(g, shape, dtype=torch.float32, lo=-16, hi=16, denom=8.0):
    """Random multiples of 1/denom in [lo/denom, hi/denom]: exactly representable in fp16/bf16/fp32
    and small enough that every partial sum of their products is exact in fp32."""
    return (torch.randint(lo, hi + 1, shape, generator=g).to(torch.float32) / denom).to(dtype)


# ============================================================================================
# 1. vector add with a runtime float scalar, store cast through out_ptr.dtype.element_ty
# ============================================================================================
def add_scale_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x + alpha * y).to(out_ptr.dtype.element_ty), mask=m)


def _add_scale_cases():
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for n in SIZES_1D:
            def make(g, n=n, dt=dt):
                return {"x": _randn(g, n, dt), "y": _randn(g, n, dt), "out": _nan_like(n, dt)}

            def launch(jit, t, n=n):
                jit(add_scale_kernel)[(triton.cdiv(n, 128),)](t["x"], t["y"], t["out"], n, 0.75,
                                                              BLOCK=128)

            def ref(t, dt=dt):
                return {"out": (t["x"].float() + 0.75 * t["y"].float()).to(dt)}

            # x + alpha*y may become fma(alpha, y, x): one rounding fewer in fp32.  For fp16/bf16
            # outputs the fp32 result is rounded once more at the store, so results are exact
            # unless that fp32 difference straddles a rounding boundary (never seen, allowed).
            tol = FP32 if dt == torch.float32 else (1e-2, 1e-2)
            CASES.append(Case(f"add_scale-{str(dt)[6:]}-{n}", make, launch, ref,
                              {"out": tol}, {"out": tol}))


_add_scale_cases()


# ============================================================================================
# 2. casts: fp32 -> fp16/bf16 (RNE), fp16/bf16 -> fp32, fp16 -> bf16, float -> int (truncation),
#    int -> float, bool -> int
# ============================================================================================
def cast_kernel(x_ptr, xh_ptr, xb_ptr, h_ptr, b_ptr, hb_ptr, up_ptr, i_ptr, f_ptr, pos_ptr, n,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    h = x.to(tl.float16)
    b = x.to(tl.bfloat16)
    tl.store(h_ptr + offs, h, mask=m)
    tl.store(b_ptr + offs, b, mask=m)
    tl.store(hb_ptr + offs, h.to(tl.bfloat16), mask=m)
    xh = tl.load(xh_ptr + offs, mask=m, other=0.0)
    xb = tl.load(xb_ptr + offs, mask=m, other=0.0)
    tl.store(up_ptr + offs, (h.to(tl.float32) - xh.to(tl.float32)) * 4.0 + xb.to(tl.float32), mask=m)
    tl.store(i_ptr + offs, (x * 100.0).to(tl.int32), mask=m)
    tl.store(f_ptr + offs, (offs * 7 - 3000).to(tl.float32) * 0.5, mask=m)
    tl.store(pos_ptr + offs, (x > 0).to(tl.int32), mask=m)


def _cast_cases():
    for n in SIZES_1D:
        def make(g, n=n):
            # magnitudes from 1e-6 (fp16 subnormals) to 1e3
            x = torch.randn(n, generator=g) * 10.0 ** (torch.rand(n, generator=g) * 9 - 6)
            return {"x": x, "xh": _randn(g, n, torch.float16), "xb": _randn(g, n, torch.bfloat16),
                    "h": _nan_like(n, torch.float16), "b": _nan_like(n, torch.bfloat16),
                    "hb": _nan_like(n, torch.bfloat16), "up": _nan_like(n, torch.float32),
                    "i": torch.full((n,), -7, dtype=torch.int32), "f": _nan_like(n, torch.float32),
                    "pos": torch.full((n,), -7, dtype=torch.int32)}

        def launch(jit, t, n=n):
            names = ("x", "xh", "xb", "h", "b", "hb", "up", "i", "f", "pos")
            jit(cast_kernel)[(triton.cdiv(n, 64),)](*(t[k] for k in names), n, BLOCK=64)

        def ref(t, n=n):
            x = t["x"]
            h, b = x.half(), x.bfloat16()
            offs = torch.arange(n, dtype=torch.int32)
            return {"h": h, "b": b, "hb": h.bfloat16(),
                    "up": (h.float() - t["xh"].float()) * 4.0 + t["xb"].float(),
                    "i": (x * 100.0).to(torch.int32), "f": (offs * 7 - 3000).float() * 0.5,
                    "pos": (x > 0).to(torch.int32)}

        outs = ("h", "b", "hb", "up", "i", "f", "pos")
        CASES.append(Case(f"casts-{n}", make, launch, ref, dict.fromkeys(outs, EXACT),
                          dict.fromkeys(outs, EXACT)))


_cast_cases()


# ============================================================================================
# 3. integer operators % // ^ >> << & | (C semantics: % and // truncate toward zero) in int32/int64
# ============================================================================================
def int_ops_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m, other=0)
    b = tl.load(b_ptr + offs, mask=m, other=1)
    tl.store(out_ptr + 0 * n + offs, a % b, mask=m)
    tl.store(out_ptr + 1 * n + offs, a // b, mask=m)
    tl.store(out_ptr + 2 * n + offs, a ^ b, mask=m)
    tl.store(out_ptr + 3 * n + offs, a >> (b & 7), mask=m)
    tl.store(out_ptr + 4 * n + offs, (a << 3) | (b & 0xFF), mask=m)
    tl.store(out_ptr + 5 * n + offs, (a * 3 - b) ^ (offs >> 2), mask=m)


def _int_cases():
    for dt, hi in ((torch.int32, 1000), (torch.int64, 2 ** 40)):
        for n in SIZES_1D:
            def make(g, n=n, dt=dt, hi=hi):
                a = torch.randint(-hi, hi, (n,), generator=g, dtype=torch.int64).to(dt)
                b = torch.randint(1, 38, (n,), generator=g, dtype=torch.int64)
                b = (b * torch.where(torch.rand(n, generator=g) < 0.5, -1, 1)).to(dt)
                return {"a": a, "b": b, "out": torch.full((6, n), -7, dtype=dt)}

            def launch(jit, t, n=n):
                jit(int_ops_kernel)[(triton.cdiv(n, 128),)](t["a"], t["b"], t["out"], n, BLOCK=128)

            def ref(t, n=n):
                a, b = t["a"], t["b"]
                offs = torch.arange(n, dtype=torch.int32)
                return {"out": torch.stack([
                    torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc"), a ^ b, a >> (b & 7),
                    (a << 3) | (b & 0xFF), (a * 3 - b) ^ (offs >> 2).to(a.dtype)])}

            CASES.append(Case(f"int_ops-{str(dt)[6:]}-{n}", make, launch, ref, {"out": EXACT},
                              {"out": EXACT}))


_int_cases()


# ============================================================================================
# 4. row max / row sum with scalars carried through a loop, started from Python numbers
#    (m = -float("inf"), acc = 0.0); masked load with other=-inf
# ============================================================================================
def row_max_sum_kernel(x_ptr, max_ptr, sum_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    acc = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
        acc += tl.sum(tl.where(mask, x, 0.0), axis=0)
    tl.store(max_ptr + row, m)
    tl.store(sum_ptr + row, acc)


def _row_max_sum_cases():
    for rows, cols in ((1, 1), (3, 17), (5, 1000)):
        def make(g, rows=rows, cols=cols):
            # integer-valued: every partial sum is exact, so the sum is order-independent
            x = torch.randint(-50, 50, (rows, cols + 3), generator=g).float()[:, :cols]
            return {"x": x, "max": _nan_like(rows, torch.float32), "sum": _nan_like(rows, torch.float32)}

        def launch(jit, t, rows=rows, cols=cols):
            jit(row_max_sum_kernel)[(rows,)](t["x"], t["max"], t["sum"], cols, t["x"].stride(0),
                                             BLOCK=64)

        def ref(t):
            return {"max": t["x"].amax(1), "sum": t["x"].sum(1)}

        CASES.append(Case(f"row_max_sum-{rows}x{cols}", make, launch, ref,
                          {"max": EXACT, "sum": EXACT}, {"max": EXACT, "sum": EXACT}))


_row_max_sum_cases()


# ============================================================================================
# 5. online softmax (two passes, running max + rescaled running sum)
# ============================================================================================
def online_softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * stride
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(base + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * stride + cols, tl.exp(x - m) / s, mask=mask)


def _online_softmax_cases():
    for rows, cols in ((1, 1), (4, 17), (3, 1000)):
        def make(g, rows=rows, cols=cols):
            return {"x": _randn(g, (rows, cols), scale=3.0), "out": _nan_like((rows, cols), torch.float32)}

        def launch(jit, t, rows=rows, cols=cols):
            jit(online_softmax_kernel)[(rows,)](t["x"], t["out"], cols, cols, BLOCK=128)

        def ref(t):
            return {"out": torch.softmax(t["x"], dim=1)}

        CASES.append(Case(f"online_softmax-{rows}x{cols}", make, launch, ref, {"out": REORDERED},
                          {"out": REORDERED}))


_online_softmax_cases()


# ============================================================================================
# 6. gathers: (a) embedding lookup with a *scalar* row index loaded from memory,
#             (b) element gather with a tile of loaded indices
# ============================================================================================
def embedding_kernel(idx_ptr, table_ptr, out_ptr, D, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(idx_ptr + pid)
    cols = tl.arange(0, BLOCK_D)
    m = cols < D
    v = tl.load(table_ptr + row * D + cols, mask=m)
    tl.store(out_ptr + pid * D + cols, v, mask=m)


def gather_kernel(src_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    idx = tl.load(idx_ptr + offs, mask=m, other=0)
    v = tl.load(src_ptr + idx, mask=m, other=0.0)
    tl.store(out_ptr + offs, v * 2.0 + 1.0, mask=m)


def _gather_cases():
    for idt in (torch.int32, torch.int64):
        for n_idx, D in ((1, 1), (9, 17), (40, 100)):
            def make(g, n_idx=n_idx, D=D, idt=idt):
                return {"idx": torch.randint(0, 50, (n_idx,), generator=g).to(idt),
                        "table": _randn(g, (50, D)), "out": _nan_like((n_idx, D), torch.float32)}

            def launch(jit, t, n_idx=n_idx, D=D):
                jit(embedding_kernel)[(n_idx,)](t["idx"], t["table"], t["out"], D,
                                               BLOCK_D=triton.next_power_of_2(D))

            def ref(t):
                return {"out": t["table"][t["idx"].long()]}

            CASES.append(Case(f"embedding-{str(idt)[6:]}-{n_idx}x{D}", make, launch, ref,
                              {"out": EXACT}, {"out": EXACT}))
        for n in SIZES_1D:
            def make(g, n=n, idt=idt):
                return {"src": _randn(g, 777), "idx": torch.randint(0, 777, (n,), generator=g).to(idt),
                        "out": _nan_like(n, torch.float32)}

            def launch(jit, t, n=n):
                jit(gather_kernel)[(triton.cdiv(n, 128),)](t["src"], t["idx"], t["out"], n, BLOCK=128)

            def ref(t):
                return {"out": t["src"][t["idx"].long()] * 2.0 + 1.0}

            CASES.append(Case(f"gather-{str(idt)[6:]}-{n}", make, launch, ref, {"out": FP32},
                              {"out": FP32}))


_gather_cases()


# ============================================================================================
# 7. sigmoid / silu on fp32/fp16/bf16 inputs, computed in fp32, stored in the input dtype
# ============================================================================================
def sigmoid_silu_kernel(x_ptr, sig_ptr, silu_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    s = tl.sigmoid(x)
    tl.store(sig_ptr + offs, s.to(sig_ptr.dtype.element_ty), mask=m)
    tl.store(silu_ptr + offs, (x * s).to(silu_ptr.dtype.element_ty), mask=m)


def _sigmoid_cases():
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        for n in (17, 1000):
            def make(g, n=n, dt=dt):
                return {"x": _randn(g, n, dt, scale=4.0), "sig": _nan_like(n, dt), "silu": _nan_like(n, dt)}

            def launch(jit, t, n=n):
                jit(sigmoid_silu_kernel)[(triton.cdiv(n, 256),)](t["x"], t["sig"], t["silu"], n, BLOCK=256)

            def ref(t, dt=dt):
                x = t["x"].float()
                return {"sig": torch.sigmoid(x).to(dt), "silu": (x * torch.sigmoid(x)).to(dt)}

            # fp32: TRANSCENDENTAL (exp inside sigmoid).  fp16/bf16: the fp32 values may differ in
            # the last ulps, which can flip the final rounding to fp16/bf16 by one ulp of that type.
            tol = TRANSCENDENTAL if dt == torch.float32 else (1e-2, 1e-3)
            CASES.append(Case(f"sigmoid_silu-{str(dt)[6:]}-{n}", make, launch, ref,
                              {"sig": tol, "silu": tol}, {"sig": tol, "silu": tol}))


_sigmoid_cases()


# ============================================================================================
# 8. matmul: K loop with a loop-carried fp32 accumulator, 2-D ragged masks, tl.dot on
#    fp16 / bf16 / fp32(ieee) inputs, both `acc += tl.dot(a, b)` and `acc = tl.dot(a, b, acc)`
# ============================================================================================
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, FP32_IN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + ks[None, :] * sak,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * sbk + rn[None, :] * sbn,
                    mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        if FP32_IN:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def _matmul_cases():
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        for M, N, K in ((1, 1, 1), (17, 33, 45), (64, 48, 100)):
            for values in ("dyadic", "randn"):
                if values == "randn" and (M, N, K) == (1, 1, 1):
                    continue

                def make(g, M=M, N=N, K=K, dt=dt, values=values):
                    gen = _dyadic if values == "dyadic" else _randn
                    a = gen(g, (M, K), dt)
                    b = gen(g, (N, K), dt).t()          # non-contiguous B (column-major)
                    return {"a": a, "b": b, "c": _nan_like((M, N), torch.float32),
                            "c16": _nan_like((M, N), dt)}

                def launch(jit, t, M=M, N=N, K=K, dt=dt):
                    k = jit(matmul_kernel)
                    a, b = t["a"], t["b"]
                    for c in (t["c"], t["c16"]):
                        grid = (triton.cdiv(M, 32), triton.cdiv(N, 16))
                        k[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BM=32, BN=16, BK=16,
                                FP32_IN=dt == torch.float32)

                def ref(t, dt=dt):
                    c = t["a"].double() @ t["b"].double()
                    return {"c": c.float(), "c16": c.float().to(dt)}

                if values == "dyadic":
                    # all products and partial sums exact in fp32 -> order-independent -> bitwise
                    tol = {"c": EXACT, "c16": EXACT}
                    rtol = tol
                else:
                    # random values: the interpreter's np.matmul (BLAS) and tilejit's dot sum the
                    # K products in different orders; |error| <= K*eps*sum|a||b| ~ 1e-5 here.
                    tol = {"c": (1e-5, 1e-5), "c16": (1e-2, 1e-2)}
                    rtol = tol
                # Triton's interpreter cannot run tl.dot on bf16 (it keeps bf16 as raw uint16 and
                # hands that to np.matmul): bf16 cases check tilejit against torch only.
                CASES.append(Case(f"matmul-{str(dt)[6:]}-{M}x{N}x{K}-{values}", make, launch, ref,
                                  tol, rtol, interp_ok=dt != torch.bfloat16))


_matmul_cases()


# ============================================================================================
# 9. tl.static_range unrolling, with an `if` on the (constexpr) unrolled index
# ============================================================================================
def static_range_kernel(x_ptr, out_ptr, n, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(ROWS):
        v = tl.load(x_ptr + i * n + offs, mask=m, other=0.0)
        if i % 2 == 0:
            acc += v * (i + 1)
        else:
            acc -= v
    tl.store(out_ptr + offs, acc, mask=m)


def _static_range_cases():
    for n in SIZES_1D:
        def make(g, n=n):
            return {"x": _randn(g, (5, n)), "out": _nan_like(n, torch.float32)}

        def launch(jit, t, n=n):
            jit(static_range_kernel)[(triton.cdiv(n, 128),)](t["x"], t["out"], n, ROWS=5, BLOCK=128)

        def ref(t):
            x = t["x"]
            acc = torch.zeros_like(x[0])
            for i in range(5):
                acc = acc + x[i] * (i + 1) if i % 2 == 0 else acc - x[i]
            return {"out": acc}

        CASES.append(Case(f"static_range-{n}", make, launch, ref, {"out": FP32}, {"out": FP32}))


_static_range_cases()


# ============================================================================================
# 10. helper functions called from a kernel (decorated per backend by the test: @kernel for
#     tilejit, InterpretedFunction for Triton; see ``HELPERS``)
# ============================================================================================
def masked_row(ptr, offs, n):
    return tl.load(ptr + offs, mask=offs < n, other=0.0)


def affine(x, scale, shift):
    return x * scale + shift


def helper_call_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = masked_row(x_ptr, offs, n)
    y = affine(x, scale, 1.0)
    tl.store(out_ptr + offs, affine(y, 0.5, -2.0), mask=offs < n)


# names of module-level helper functions; the test rebinds them to decorated versions
HELPERS = {"masked_row": masked_row, "affine": affine}


def _helper_cases():
    for n in SIZES_1D:
        def make(g, n=n):
            return {"x": _randn(g, n), "out": _nan_like(n, torch.float32)}

        def launch(jit, t, n=n):
            jit(helper_call_kernel)[(triton.cdiv(n, 128),)](t["x"], t["out"], n, 3.0, BLOCK=128)

        def ref(t):
            return {"out": (t["x"] * 3.0 + 1.0) * 0.5 - 2.0}

        CASES.append(Case(f"helper_call-{n}", make, launch, ref, {"out": FP32}, {"out": FP32}))


_helper_cases()


# ============================================================================================
# 11. 2-D tiles with ragged edges in both dims: strided transpose-copy (non-contiguous input)
# ============================================================================================
def transpose_kernel(x_ptr, out_ptr, M, N, sxm, sxn, som, son, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)
    tl.store(out_ptr + rn[None, :] * som + rm[:, None] * son, x * 2.0, mask=mask)


def _transpose_cases():
    for M, N in ((1, 1), (17, 5), (40, 33)):
        def make(g, M=M, N=N):
            big = _randn(g, (M, 2 * N))
            return {"x": big[:, ::2], "out": _nan_like((N, M), torch.float32)}

        def launch(jit, t, M=M, N=N):
            x, o = t["x"], t["out"]
            jit(transpose_kernel)[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
                x, o, M, N, x.stride(0), x.stride(1), o.stride(0), o.stride(1), BM=16, BN=16)

        def ref(t):
            return {"out": t["x"].t() * 2.0}

        CASES.append(Case(f"transpose-{M}x{N}", make, launch, ref, {"out": EXACT}, {"out": EXACT}))


_transpose_cases()


# ============================================================================================
# 12. tl.where / maximum / minimum, bool (int1) tensors loaded and stored
# ============================================================================================
def where_kernel(x_ptr, y_ptr, keep_ptr, out_ptr, pos_ptr, n, thresh, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.load(y_ptr + offs, mask=m, other=0.0)
    keep = tl.load(keep_ptr + offs, mask=m, other=0)
    r = tl.where(x > thresh, x, y * 0.5)
    r = tl.where((offs % 3) == 0, -r, r)
    r = tl.minimum(tl.maximum(r, -1.0), 1.0)
    r = tl.where(keep, r, 0.0)
    tl.store(out_ptr + offs, r, mask=m)
    tl.store(pos_ptr + offs, (r > 0) | (keep == 0), mask=m)


def _where_cases():
    for n in SIZES_1D:
        def make(g, n=n):
            return {"x": _randn(g, n), "y": _randn(g, n, scale=3.0),
                    "keep": torch.rand(n, generator=g) < 0.7,
                    "out": _nan_like(n, torch.float32), "pos": torch.zeros(n, dtype=torch.bool)}

        def launch(jit, t, n=n):
            jit(where_kernel)[(triton.cdiv(n, 128),)](t["x"], t["y"], t["keep"], t["out"], t["pos"], n,
                                                      0.25, BLOCK=128)

        def ref(t, n=n):
            x, y, keep = t["x"], t["y"], t["keep"]
            offs = torch.arange(n)
            r = torch.where(x > 0.25, x, y * 0.5)
            r = torch.where(offs % 3 == 0, -r, r).clamp(-1.0, 1.0)
            r = torch.where(keep, r, 0.0)
            return {"out": r, "pos": (r > 0) | ~keep}

        CASES.append(Case(f"where-{n}", make, launch, ref, {"out": EXACT, "pos": EXACT},
                          {"out": EXACT, "pos": EXACT}))


_where_cases()


# ============================================================================================
# 13. layernorm forward over rows (tl.sum, rsqrt, broadcast of per-row scalars, weight/bias)
# ============================================================================================
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / N
    rstd = tl.rsqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    y = d * rstd * w + b
    tl.store(y_ptr + row * stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


def _layernorm_cases():
    for rows, N in ((1, 1), (3, 17), (4, 300)):
        def make(g, rows=rows, N=N):
            return {"x": _randn(g, (rows, N), scale=2.0) + 0.5, "w": _randn(g, N), "b": _randn(g, N),
                    "y": _nan_like((rows, N), torch.float32), "mean": _nan_like(rows, torch.float32),
                    "rstd": _nan_like(rows, torch.float32)}

        def launch(jit, t, rows=rows, N=N):
            jit(layernorm_kernel)[(rows,)](t["x"], t["w"], t["b"], t["y"], t["mean"], t["rstd"], N, N,
                                           1e-5, BLOCK=triton.next_power_of_2(N))

        def ref(t, N=N):
            x = t["x"].double()
            mean = x.mean(1)
            var = x.var(1, unbiased=False)
            rstd = torch.rsqrt(var + 1e-5)
            y = (x - mean[:, None]) * rstd[:, None] * t["w"].double() + t["b"].double()
            return {"y": y.float(), "mean": mean.float(), "rstd": rstd.float()}

        # sums of random fp32 values (order not fixed across implementations) + rsqrt
        tol = dict.fromkeys(("y", "mean", "rstd"), REORDERED)
        CASES.append(Case(f"layernorm-{rows}x{N}", make, launch, ref, tol, tol))


_layernorm_cases()


# ============================================================================================
# 14. reductions along each axis of a masked 2-D tile: sum / max / min, float32 and int32
# ============================================================================================
def reduce2d_kernel(x_ptr, s0_ptr, s1_ptr, mx0_ptr, mx1_ptr, mn0_ptr, mn1_ptr, M, N, stride,
                    LOW: tl.constexpr, HIGH: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = x_ptr + rm[:, None] * stride + rn[None, :]
    x = tl.load(ptrs, mask=mask, other=0)
    tl.store(s0_ptr + rn, tl.sum(x, axis=0), mask=rn < N)
    tl.store(s1_ptr + rm, tl.sum(x, axis=1), mask=rm < M)
    xl = tl.load(ptrs, mask=mask, other=LOW)
    tl.store(mx0_ptr + rn, tl.max(xl, axis=0), mask=rn < N)
    tl.store(mx1_ptr + rm, tl.max(xl, axis=1), mask=rm < M)
    xh = tl.where(mask, x, HIGH)
    tl.store(mn0_ptr + rn, tl.min(xh, axis=0), mask=rn < N)
    tl.store(mn1_ptr + rm, tl.min(xh, axis=1), mask=rm < M)


def _reduce2d_cases():
    for dt in (torch.float32, torch.int32):
        for M, N in ((1, 1), (17, 5), (30, 64)):
            def make(g, M=M, N=N, dt=dt):
                # integer-valued data: sums are exact in any order
                x = torch.randint(-100, 100, (M, N), generator=g).to(dt)
                fill = (lambda k: _nan_like(k, dt)) if dt.is_floating_point else \
                    (lambda k: torch.full((k,), -7, dtype=dt))
                return {"x": x, "s0": fill(N), "s1": fill(M), "mx0": fill(N), "mx1": fill(M),
                        "mn0": fill(N), "mn1": fill(M)}

            def launch(jit, t, M=M, N=N, dt=dt):
                lo, hi = (-float("inf"), float("inf")) if dt.is_floating_point else (-2 ** 31, 2 ** 31 - 1)
                jit(reduce2d_kernel)[(1,)](t["x"], t["s0"], t["s1"], t["mx0"], t["mx1"], t["mn0"],
                                           t["mn1"], M, N, t["x"].stride(0), LOW=lo, HIGH=hi,
                                           BM=triton.next_power_of_2(M), BN=triton.next_power_of_2(N))

            def ref(t):
                x = t["x"]
                return {"s0": x.sum(0).to(x.dtype), "s1": x.sum(1).to(x.dtype), "mx0": x.amax(0),
                        "mx1": x.amax(1), "mn0": x.amin(0), "mn1": x.amin(1)}

            outs = dict.fromkeys(("s0", "s1", "mx0", "mx1", "mn0", "mn1"), EXACT)
            CASES.append(Case(f"reduce2d-{str(dt)[6:]}-{M}x{N}", make, launch, ref, outs, dict(outs)))


_reduce2d_cases()


# ============================================================================================
# 15. 2-D grid: program_id / num_programs on both axes, scalar store
# ============================================================================================
def grid_ids_kernel(out_ptr):
    p0 = tl.program_id(0)
    p1 = tl.program_id(1)
    n0 = tl.num_programs(0)
    n1 = tl.num_programs(1)
    tl.store(out_ptr + p1 * n0 + p0, p0 * 1000 + p1 * 10 + n0 * n1)


def _grid_cases():
    for g0, g1 in ((1, 1), (3, 5)):
        def make(g, g0=g0, g1=g1):
            return {"out": torch.full((g1, g0), -7, dtype=torch.int32)}

        def launch(jit, t, g0=g0, g1=g1):
            jit(grid_ids_kernel)[(g0, g1)](t["out"])

        def ref(t, g0=g0, g1=g1):
            p1, p0 = torch.meshgrid(torch.arange(g1), torch.arange(g0), indexing="ij")
            return {"out": (p0 * 1000 + p1 * 10 + g0 * g1).int()}

        CASES.append(Case(f"grid_ids-{g0}x{g1}", make, launch, ref, {"out": EXACT}, {"out": EXACT}))


_grid_cases()


# ============================================================================================
# 16. transcendental and misc math: exp exp2 log log2 sqrt rsqrt abs fma cdiv
# ============================================================================================
def math_kernel(x_ptr, y_ptr, out_ptr, nblk_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    ax = tl.abs(x) + 0.125
    tl.store(out_ptr + 0 * n + offs, tl.exp(x), mask=m)
    tl.store(out_ptr + 1 * n + offs, tl.exp2(x), mask=m)
    tl.store(out_ptr + 2 * n + offs, tl.log(ax), mask=m)
    tl.store(out_ptr + 3 * n + offs, tl.log2(ax), mask=m)
    tl.store(out_ptr + 4 * n + offs, tl.sqrt(ax), mask=m)
    tl.store(out_ptr + 5 * n + offs, tl.rsqrt(ax), mask=m)
    tl.store(out_ptr + 6 * n + offs, tl.abs(x), mask=m)
    tl.store(out_ptr + 7 * n + offs, tl.fma(x, y, ax), mask=m)
    tl.store(nblk_ptr + pid, tl.cdiv(n, BLOCK) * 100 + pid)


def _math_cases():
    for n in SIZES_1D:
        def make(g, n=n):
            return {"x": _randn(g, n, scale=3.0), "y": _randn(g, n),
                    "out": _nan_like((8, n), torch.float32),
                    "nblk": torch.full((triton.cdiv(n, 128),), -7, dtype=torch.int32)}

        def launch(jit, t, n=n):
            jit(math_kernel)[(triton.cdiv(n, 128),)](t["x"], t["y"], t["out"], t["nblk"], n, BLOCK=128)

        def ref(t, n=n):
            x, y = t["x"].double(), t["y"].double()
            ax = x.abs() + 0.125
            nb = triton.cdiv(n, 128)
            return {"out": torch.stack([x.exp(), x.exp2(), ax.log(), ax.log2(), ax.sqrt(), ax.rsqrt(),
                                        x.abs(), x * y + ax]).float(),
                    "nblk": (torch.arange(nb) + nb * 100).int()}

        CASES.append(Case(f"math-{n}", make, launch, ref, {"out": TRANSCENDENTAL, "nblk": EXACT},
                          {"out": TRANSCENDENTAL, "nblk": EXACT}))


_math_cases()


# ============================================================================================
# 17. broadcasting: outer product / row-col scaled 2-D tile from two 1-D vectors
# ============================================================================================
def outer_kernel(x_ptr, y_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rm, mask=rm < M, other=0.0)
    y = tl.load(y_ptr + rn, mask=rn < N, other=0.0)
    r = x[:, None] * y[None, :] - y[None, :]
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], r, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _outer_cases():
    for M, N in ((1, 1), (17, 3), (100, 33)):
        def make(g, M=M, N=N):
            return {"x": _randn(g, M), "y": _randn(g, N), "out": _nan_like((M, N), torch.float32)}

        def launch(jit, t, M=M, N=N):
            jit(outer_kernel)[(triton.cdiv(M, 32),)](t["x"], t["y"], t["out"], M, N, BM=32,
                                                     BN=triton.next_power_of_2(N))

        def ref(t):
            x, y = t["x"], t["y"]
            return {"out": x[:, None] * y[None, :] - y[None, :]}

        CASES.append(Case(f"outer-{M}x{N}", make, launch, ref, {"out": FP32}, {"out": FP32}))


_outer_cases()


# ============================================================================================
# shared by the test (tilejit side) and the interpreter runner (Triton side)
# ============================================================================================
CASES_BY_ID = {c.id: c for c in CASES}
assert len(CASES_BY_ID) == len(CASES), "duplicate case ids"


def rebind(fn, wrap):
    """A copy of ``fn`` whose globals see the module's helper functions wrapped by ``wrap``
    (Triton: triton.jit under TRITON_INTERPRET=1, tilejit: compiler.kernel).  The code object - so
    the source file and the line numbers - is unchanged."""
    if not any(name in fn.__code__.co_names for name in HELPERS):
        return fn
    g = dict(fn.__globals__)
    for name, helper in HELPERS.items():
        g[name] = wrap(helper)
    return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)


def make_inputs(case):
    g = torch.Generator().manual_seed(zlib.crc32(case.id.encode()))
    return case.make(g)


def run_case(case, jit):
    """Build the case's inputs (deterministically), launch through ``jit`` and return its outputs."""
    t = make_inputs(case)
    case.launch(jit, t)
    return {name: t[name] for name in case.outputs}
