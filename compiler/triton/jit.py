"""`triton.jit`: a `@kernel` with Triton's object surface (`.fn`, `.run(*args, grid=...)`,
`.warmup`, `[grid]`, `.arg_names`, `.params`, `.src`)."""
from __future__ import annotations

import hashlib
import re
import textwrap

from .. import source
from ..errors import CompilationError, KernelArgumentError
from ..frontend import constexpr_params
from ..jit import KernelFunction


class KernelParam:
    """One parameter as Triton's `JITFunction.params` describes it."""

    def __init__(self, num: int, name: str, is_constexpr: bool, do_not_specialize: bool,
                 do_not_specialize_on_alignment: bool, annotation):
        self.num, self.name, self.is_constexpr = num, name, is_constexpr
        self.do_not_specialize = do_not_specialize
        self.do_not_specialize_on_alignment = do_not_specialize_on_alignment
        self.annotation = annotation

    def __repr__(self) -> str:
        return f"KernelParam({self.num}, {self.name!r}{', constexpr' if self.is_constexpr else ''})"


class KernelInterface:
    """Triton's base of launchable objects: `obj[grid](*args, **kwargs)` is
    `obj.run(*args, grid=grid, warmup=False, **kwargs)`."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


class CompiledHandle:
    """What `warmup` returns: the compiled specialisation, with the attributes Triton host code reads
    of a compiled kernel. `n_regs` / `n_spills` are nominal (32 / 0) where the target has no
    registers to report; `metadata.shared` is the shared memory Triton reported on the gpu target,
    else 0."""

    def __init__(self, ck, num_warps: int, shared: int):
        self._ck = ck
        self.n_regs, self.n_spills = 32, 0
        self.metadata = type("Metadata", (), {"shared": shared, "num_warps": num_warps, "name": ck.name})()

    def _init_handles(self) -> None:
        pass

    def __getattr__(self, name):
        return getattr(self._ck, name)


class JITFunction(KernelFunction, KernelInterface):
    """A kernel made by `triton.jit`. Launch: `k[grid](*args, **kwargs)` or
    `k.run(*args, grid=grid, **kwargs)`; the launch options (num_warps=, ...) are accepted."""

    hash = None   # Triton's memo of cache_key; code that replaces a source resets it on callers

    def __init__(self, fn, **options):
        super().__init__(fn, options=options)
        constexprs = constexpr_params(fn, self) if self.kept_source is not None or not source.needs_recovery(fn) \
            else set()
        self.params = [KernelParam(i, n, n in constexprs, n in self.no_specialize, n in self.no_align_specialize,
                                   p.annotation) for i, (n, p) in enumerate(self.signature.parameters.items())]

    @property
    def src(self) -> str:
        """Triton's `.src`: the function's source from `def` on (no decorators), dedented; "" when
        the source is unavailable (compiling it says why)."""
        try:
            lines = source.kept_or_read(self, self.fn).lines
        except CompilationError:
            return ""
        text = textwrap.dedent("".join(lines))
        m = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
        return text[m.start():] if m else text

    def _unsafe_update_src(self, new_src: str) -> None:
        """Triton's way to replace the source a kernel compiles from: compiler.source.keep_source
        (its specialisations and the kernels that inline it recompile at their next launch)."""
        source.keep_source(self, new_src)
        self.hash = None

    @property
    def cache_key(self) -> str:
        return hashlib.sha256(self.src.encode()).hexdigest()

    # Triton's signature, and the one KernelFunction.__getitem__ calls (grid, args, kwargs)
    def run(self, *args, grid=None, warmup=False, **kwargs):
        if grid is None:
            if len(args) == 3 and isinstance(args[1], tuple) and isinstance(args[2], dict) and not kwargs:
                return KernelFunction.run(self, *args)
            raise KernelArgumentError(f"kernel '{self.__name__}': run(...) needs grid=, e.g. "
                                      f"{self.__name__}.run(*args, grid=(n,))")
        if warmup:
            return self.warmup(*args, grid=grid, **kwargs)
        return KernelFunction.run(self, grid, args, kwargs)

    __getitem__ = KernelFunction.__getitem__

    def warmup(self, *args, grid=(1,), **kwargs):
        ck = super().warmup(*args, grid=grid, **kwargs)
        opts = {**self.launch_defaults, **{k: v for k, v in kwargs.items() if k == "num_warps"}}
        return CompiledHandle(ck, opts.get("num_warps", 4), 0)

    def __repr__(self) -> str:
        return f"JITFunction({self.__module__}:{self.fn.__qualname__})"


def jit(fn=None, **options):
    """`@triton.jit` or `@triton.jit(do_not_specialize=[...], debug=..., noinline=..., num_warps=...)`:
    see compiler/launch_options.py for what each option does on each target."""
    def wrap(f):
        if isinstance(f, KernelFunction):
            f = f.fn
        return JITFunction(f, **options)
    return wrap(fn) if fn is not None else wrap


class TensorWrapper:
    """`triton.reinterpret(tensor, dtype)`: `tensor`'s memory seen as elements of `dtype` (one element
    size). A kernel launched with it sees a tensor of that dtype (Triton's TensorWrappers too)."""

    def __init__(self, base, dtype):
        self.base, self.dtype = base, dtype
        self.data, self.device, self.shape = base.data, base.device, base.shape

    def data_ptr(self) -> int:
        return self.base.data_ptr()

    def stride(self, *args):
        return self.base.stride(*args)

    def numel(self) -> int:
        return self.base.numel()

    def element_size(self) -> int:
        return self.base.element_size()

    def dim(self) -> int:
        return self.base.dim()

    def cpu(self):
        return TensorWrapper(self.base.cpu(), self.dtype)

    def copy_(self, other):
        self.base.copy_(other.base if isinstance(other, TensorWrapper) else other)
        return self

    def clone(self):
        return TensorWrapper(self.base.clone(), self.dtype)

    def to(self, device):
        return TensorWrapper(self.base.to(device), self.dtype)

    def new_empty(self, sizes):
        return TensorWrapper(self.base.new_empty(sizes), self.dtype)

    def __str__(self) -> str:
        return f"TensorWrapper[{self.dtype}]({self.base})"


def reinterpret(tensor, dtype):
    """`tensor` (a torch tensor or a TensorWrapper) seen as `dtype`, as Triton's: a TensorWrapper,
    or the tensor itself when `dtype` is its own torch dtype."""
    if isinstance(tensor, TensorWrapper):
        return tensor.base if dtype == tensor.base.dtype else TensorWrapper(tensor.base, dtype)
    if not hasattr(tensor, "data_ptr"):
        raise TypeError(f"cannot reinterpret object of type {type(tensor).__name__}")
    return TensorWrapper(tensor, dtype)
