"""Renders a kernel's IR as Kunlun XPU C++ (`.xpu`): the Kunlun lowering (lowering.py) for the
program body, the jinja2 skeleton in templates/ for the kernel (a stride loop over
`cluster_id() * core_num() + core_id()`) and its host wrapper, and the LM budget check."""
from __future__ import annotations

import os
import warnings

import jinja2

from compiler.errors import CompilationError
from compiler.fp64 import narrow_fp64, uses_fp64
from compiler.ir import Function
from compiler.ir.ops import CAST

from ..arch import Arch
from ..plan import MemoryPlan, plan_memory
from ..plan.staging import votes_bytes
from .dialect import KunlunDialect
from .lowering import KunlunLowering

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(os.path.dirname(__file__), "templates")),
                          keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


class Fp64AsFp32Warning(UserWarning):
    """A kernel's float64 values are computed in fp32 on the kunlun target (docs/kunlun.md)."""


class KunlunRenderer:
    dialect = KunlunDialect()

    def __init__(self, arch: Arch):
        self.arch = arch

    def render(self, fn: Function, policy: str) -> tuple[str, MemoryPlan]:
        """(the .xpu source, the memory plan it emits)."""
        if uses_fp64(fn):
            narrow_fp64(fn)
            warnings.warn(f"kunlun: kernel '{fn.name}' computes its float64 values in fp32, as Kunlun's torch stacks "
                          "do (the chip has no fp64): float64 tensors are read rounded to fp32 and written back "
                          "exactly; results carry fp32 precision (docs/kunlun.md, \"float64\")",
                          Fp64AsFp32Warning, stacklevel=2)
        for op in fn.walk():
            if op.name == CAST and op.operands[0].dtype.is_ptr() != op.results[0].dtype.is_ptr():
                raise CompilationError.at(op.loc, "a pointer made from an integer (or read as one) is not supported on "
                                          "the kunlun target: its memory plan must know which argument each "
                                          "pointer addresses (pass the tensor itself)", kernel=fn.name)
        plan = plan_memory(fn, self.arch, policy, self.dialect)
        lm = plan.lm_bytes
        low = KunlunLowering(plan.ir, self.dialect, policy, placement={b.index: b.offset for b in plan.lm},
                             vector_f16=self.arch.fp16_vectors, prefetch=plan.prefetch, skip=plan.skip)
        body = low.lower()
        if len(low.requests) != len(plan.lm) or len(low.dma_sites) != len(plan.dma):
            raise CompilationError(f"internal: kunlun emission differs from its memory plan in kernel '{fn.name}'")
        params = [{"name": self.dialect.safe_name(p.name), "ctype": self.dialect.reg_type(p.type.dtype)}
                  for p in plan.ir.params]
        scratch = [{**params[i], "offset": s.offset} for s in plan.scratch
                   for i, p in enumerate(plan.ir.params) if p.name == s.name]
        plan.element_ops = low.work + low.vector_nest_work
        plan.vector_ops = low.vector_nest_work + low.vector_dot_work
        listing = plan.listing().splitlines() + [f"  fences: {len(low.fences.placed)}"] + \
            [f"    {f}" for f in low.fences.placed]
        # SM per team for its staged tiles (0: nothing staged); the arena holds teams of two or more
        slot = max(low.sm_bytes, 64) if low.staged else 0
        votes = votes_bytes(self.arch.cores_per_cluster)
        src = _ENV.get_template("kernel.xpu.j2").render(
            name=fn.name, params=params, user_params=[p for p in params if p["name"] not in {s["name"] for s in scratch}],
            scratch=scratch,
            scratch_slot=plan.scratch_slot, body=body, policy=policy, arch=self.arch, lm_bytes=lm,
            arena_bytes=max(lm, 64), plan="\n".join("// " + line for line in listing), sm_slot=slot, votes=votes,
            sm_arena=min(self.arch.sm_bytes_per_cluster, votes + slot * max(1, self.arch.cores_per_cluster // 2)))
        return src, plan
