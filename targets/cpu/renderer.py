"""Renders a kernel's IR as host C++: the shared C-family lowering for the body, and the
jinja2 skeleton in templates/ for the per-program function and the launch entries (the grain rule
that runs programs serially or across threads is tj_run_programs in tilejit_cpu.h)."""
from __future__ import annotations

import os

import jinja2

from compiler.errors import CompilationError
from compiler.ir import Function
from compiler.ir.ops import DOT
from targets.cfamily.dialect import Bf16Dot, CDialect
from targets.cfamily.lowering import CLowering

from .bounds import BoundsCheckedLowering

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
                          keep_trailing_newline=True, undefined=jinja2.StrictUndefined)

# Tiles live on the program's stack; OpenMP worker threads get the default thread stack (8 MiB
# on Linux), so one program's buffers must stay well inside it.
MAX_STACK_BYTES = 4 << 20


# Loops vectorise with the host's widest vectors unless a loop's bits would follow the width: a
# fast-policy float sum the lowering leaves to an `omp simd reduction` (its partial sums are the
# vector's lanes; a sum in 64 partials is the same at any width) keeps 256-bit vectors, so an AVX2
# and an AVX-512 host give the same bits. Kernels with a dot keep them too: their micro-kernels'
# surroundings are tuned at 256 bits. Wider math runs faster (silu_and_mul [32, 2x11264] fp32 on
# one AVX-512 core: 288 -> 214 us).


class CPUDialect(CDialect):
    """The host C++ dialect: the base table, plus the dot micro-kernel of tilejit_cpu.h
    (6 rows x two vector widths of C in registers: 12 accumulators fit AVX-512's and AVX2's files)."""

    widen_addresses = True
    recompute_widening = False   # a widened tile is kept: its shifts queue on AVX2 (docs/architecture.md)
    sum_vector = ("tj_f32x64", 64)   # 4 AVX-512 / 8 AVX2 vectors of partial sums: their adds overlap

    dot_microkernel = "tj_dot_block"
    transposed_fill = "tj_fill_transposed"
    rows_strided = "tj_rows_strided"
    stride_ahead = "tj_ahead"
    bf16_store = "tj_store_bf16"
    bf16_dot = Bf16Dot(dot="tj_dot_bf16", pack_rows="tj_pack_bf16_rows", pack_pairs="tj_pack_bf16_pairs",
                       fill_pairs="tj_fill_bf16_pairs", transposed_words=3)
    # a loop's trip count is 64-bit; a run-time step of 0 is reported to the launcher, which raises
    trip_count_type = "uint64_t"
    zero_step_check = "if ({step} == 0) tj_fail(tj_st, TJ_E_STEP0, {site}, -1, 0, 0, 0, 0);"


class CPURenderer:
    dialect = CPUDialect()

    def __init__(self, bounds_check: bool = False):
        self.bounds_check = bounds_check

    def render(self, fn: Function, policy: str) -> str:
        has_dot = any(op.name == DOT for op in fn.walk())
        wide = not has_dot
        low, body = self._lower(fn, policy, wide)
        if low.sums_follow_width and wide:
            wide = False
            low, body = self._lower(fn, policy, wide)
        if low.stack_bytes > MAX_STACK_BYTES:
            largest = max(low.local_buffers, key=lambda b: b.nbytes)
            raise CompilationError.at(
                largest.value.loc if largest.value is not None else None,
                f"this specialisation keeps {low.stack_bytes / 1024:.0f} KiB of tiles live per program (the "
                f"largest, {largest.nbytes >> 10} KiB, holds the value made here), over the cpu target's "
                f"{MAX_STACK_BYTES >> 10} KiB; use smaller BLOCK sizes", kernel=fn.name)
        params = [{"name": self.dialect.safe_name(p.name), "ctype": self.param_ctype(p.type.dtype),
                   "unpack": self.unpack(i, p.type.dtype)} for i, p in enumerate(fn.params)]
        uses_vectors = has_dot or f"{self.dialect.transposed_fill}<" in body \
            or f"{self.dialect.bf16_store}(" in body
        return _ENV.get_template("kernel.cpp.j2").render(
            name=fn.name, params=params, body=body, policy=policy, uses_vectors=uses_vectors, bounds=self.bounds_check,
            wide_vectors=wide,
            ptr_params=[i for i, p in enumerate(fn.params) if p.type.dtype.is_ptr()] or [0])

    def _lower(self, fn: Function, policy: str, wide: bool):
        low = (BoundsCheckedLowering if self.bounds_check else CLowering)(fn, self.dialect, policy)
        if wide:   # two 512-bit vectors of fp32 per chunk of a bf16 store (16 kept them 256 bits wide)
            low.bf16_store_chunk = 32
        return low, low.lower()

    def param_ctype(self, dt) -> str:
        return self.dialect.reg_type(dt)

    def unpack(self, i: int, dt) -> str:
        """Parameter i read from the packed entry's tj_arg array."""
        field = "p" if dt.is_ptr() else "f" if dt.is_floating() else "i"
        return f"({self.param_ctype(dt)})a[{i}].{field}"
