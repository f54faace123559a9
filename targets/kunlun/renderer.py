"""Renders a kernel's IR as Kunlun XPU C++ (`.xpu`): the shared C-family lowering with the
memory model of the chip. Compute touches only LM: every tile that is read is copied from GM
into an `__local__` buffer with GM2LM, every result goes back with LM2GM; the grid is walked
by a stride loop over `cluster_id() * core_num() + core_id()`; indices are 32-bit."""
from __future__ import annotations

import os

import jinja2

from compiler import dtypes as D
from compiler.errors import CompilationError
from compiler.ir import Function, Op
from targets.cfamily.dialect import CDialect
from targets.cfamily.lowering import CLowering

from .arch import Arch

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
                          keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


class KunlunDialect(CDialect):
    reg_types = {k: v for k, v in CDialect.reg_types.items() if k is not D.int64}
    mem_types = {k: v for k, v in CDialect.mem_types.items() if k is not D.int64}
    dot_microkernel = None   # plain fma loops, ascending k (the SIMD dot is not in this slice)

    def reg_type(self, dt: D.dtype) -> str:
        if dt.is_ptr():
            return f"__global_ptr__ {self.mem_type(dt.element_ty)}*"
        if dt is D.int64:
            raise CompilationError("the kunlun target uses 32-bit index arithmetic (device `long` and `void*` are "
                                   "4 bytes): a 64-bit integer reached the kernel; pass sizes/offsets < 2**31 "
                                   "or split the tensor")
        if dt is D.float64:
            raise CompilationError("the kunlun target has no fp64 (software-only on xpu2, absent on xpu3)")
        return super().reg_type(dt)

    def mem_type(self, dt: D.dtype) -> str:
        try:
            return self.mem_types[dt]
        except KeyError:
            raise CompilationError(f"dtype {dt} is not supported in Kunlun global memory") from None

    def reg_size(self, dt: D.dtype) -> int:
        return 4 if dt.is_ptr() else super().reg_size(dt)   # device pointers are 4 bytes

    def local_buffer_decl(self, ctype: str, name: str, numel: int) -> str:
        # `;`-joined: the lowering appends the final `;`
        return f"__simd__ __local__ {ctype} {name}[{numel}]; TJ_LM_USE({name})"

    def copy_buffer(self, dst: str, src: str, numel: int, ctype: str) -> str:
        return f"for (int j = 0; j < {numel}; ++j) {dst}[j] = {src}[j]"

    def load_elem(self, dt, ptr):   # compute never dereferences GM: loads go through GM2LM
        raise CompilationError("internal: kunlun lowering tried to dereference a global pointer")

    def store_elem(self, dt, ptr, val):
        raise CompilationError("internal: kunlun lowering tried to store through a global pointer")

    # GM <-> LM element conversions (memory representation <-> register representation)
    @staticmethod
    def from_mem(dt: D.dtype, x: str) -> str:
        return {D.float16: f"tj_h2f({x})", D.bfloat16: f"tj_bf2f({x})", D.int1: f"({x} != 0)"}.get(dt, x)

    @staticmethod
    def to_mem(dt: D.dtype, x: str) -> str:
        return {D.float16: f"tj_f2h({x})", D.bfloat16: f"tj_f2bf({x})", D.int1: f"(uint8_t)({x})"}.get(dt, x)

    def same_repr(self, dt: D.dtype) -> bool:
        return self.reg_types[dt] == self.mem_types[dt]


class KunlunLowering(CLowering):
    """The C-family lowering with DMA: no load is fused into a consumer (that would read GM
    from compute code); each one fills an LM buffer through GM2LM, each store drains through LM2GM."""

    index_type = "int"

    def _load_fuses(self, v) -> bool:
        return False

    def _gm2lm(self, dt, ptr: str, dst_lvalue: str) -> str:
        d = self.d
        if d.same_repr(dt):
            return f"GM2LM({ptr}, &{dst_lvalue}, sizeof({d.mem_type(dt)}));"
        return (f"{{ {d.mem_type(dt)} s_; GM2LM({ptr}, &s_, sizeof({d.mem_type(dt)})); "
                f"{dst_lvalue} = {d.from_mem(dt, 's_')}; }}")

    def _lm2gm(self, dt, ptr: str, val: str) -> str:
        d = self.d
        return f"{{ {d.mem_type(dt)} s_ = {d.to_mem(dt, val)}; LM2GM(&s_, {ptr}, sizeof({d.mem_type(dt)})); }}"

    def emit_load(self, op: Op) -> None:
        v = op.results[0]
        ptr, mask, other = (op.operands + [None, None])[:3]
        if v.type.is_scalar:
            name = self.name(v)
            self.emit(f"{self.d.reg_type(v.dtype)} {name};")
            copy = self._gm2lm(v.dtype, self.ev(ptr, (), None), name)
            if mask is None:
                self.emit(copy)
            else:
                self.emit(f"if ({self.ev(mask, (), None)}) {copy} else {name} = {self.ev(other, (), None)};")
            return
        name = self.declare_buffer(v)

        def fill(masked: bool):
            # general fallback: one element per GM2LM (gathers, strided tiles)
            nest = self.open_nest(v.shape, simd=False)
            dst = f"{name}[{self.linear(nest.idx, v.shape)}]"
            copy = self._gm2lm(v.dtype, self.ev(ptr, nest.idx, nest), dst)
            if masked:
                m = self.ev(mask, nest.idx, nest)
                o = self.ev(other, nest.idx, nest) if other is not None else self.d.literal(0, v.dtype)
                copy = f"if ({m}) {copy} else {dst} = {o};"
            self.close_nest(nest, [copy])

        self._masked_or_fast(mask, fill)

    def emit_store(self, op: Op) -> None:
        ptr, val = op.operands[:2]
        mask = op.operands[2] if len(op.operands) > 2 else None
        if ptr.type.is_scalar:
            s = self._lm2gm(val.dtype, self.ev(ptr, (), None), self.ev(val, (), None))
            self.emit(s if mask is None else f"if ({self.ev(mask, (), None)}) {s}")
            return

        def fill(masked: bool):
            nest = self.open_nest(ptr.shape, simd=False)
            s = self._lm2gm(val.dtype, self.ev(ptr, nest.idx, nest), self.ev(val, nest.idx, nest))
            if masked:
                s = f"if ({self.ev(mask, nest.idx, nest)}) {s}"
            self.close_nest(nest, [s])

        self._masked_or_fast(mask, fill)


class LMBudgetError(CompilationError):
    pass


class KunlunRenderer:
    dialect = KunlunDialect()

    def __init__(self, arch: Arch):
        self.arch = arch

    def lm_buffers(self, source: str) -> list[tuple[str, int]]:
        """(name, bytes) of every `__local__` buffer declared in a rendered program."""
        import re  # noqa: PLC0415
        sizes = {"float": 4, "int32_t": 4, "int16_t": 2, "int8_t": 1, "bool": 1, "uint16_t": 2, "uint8_t": 1}
        return [(m.group(2), sizes[m.group(1)] * int(m.group(3)))
                for m in re.finditer(r"__local__ (\w+) (\w+)\[(\d+)\]", source)]

    def check_lm(self, fn: Function, body: str) -> int:
        """Footprint = every `__local__` buffer of the program (an upper bound on the live set) + the
        arch's stack reserve; a config over the per-core LM is refused with the buffer listing."""
        bufs = self.lm_buffers(body)
        total = sum(b for _, b in bufs)
        a = self.arch
        if total + a.lm_stack_reserve > a.lm_bytes_per_core:
            listing = "\n".join(f"  __local__ {n}: {b} bytes" for n, b in bufs)
            raise LMBudgetError(
                f"kernel '{fn.name}': this config needs {total} bytes of LM tile buffers + {a.lm_stack_reserve} "
                f"bytes stack reserve = {total + a.lm_stack_reserve} bytes per core, over {a.name}'s "
                f"{a.lm_bytes_per_core} bytes of local memory per core. Buffers:\n{listing}\n"
                "Use smaller BLOCK sizes.")
        return total

    def render(self, fn: Function, policy: str) -> tuple[str, int]:
        for op in fn.walk():
            for v in list(op.results) + list(op.operands):
                if v.dtype is D.float64:
                    raise CompilationError(f"kernel '{fn.name}': the kunlun target has no fp64")
        low = KunlunLowering(fn, self.dialect)
        body = low.lower()
        lm = self.check_lm(fn, body)
        params = [{"name": self.dialect.safe_name(p.name), "ctype": self.dialect.reg_type(p.type.dtype)}
                  for p in fn.params]
        src = _ENV.get_template("kernel.xpu.j2").render(
            name=fn.name, params=params, body=body, policy=policy, arch=self.arch, lm_bytes=lm)
        return src, lm
