"""`triton.jit`: a `@kernel` with Triton's object surface (`.fn`, `.run(*args, grid=...)`,
`.warmup`, `[grid]`, `.arg_names`, `.params`, `.src`)."""
from __future__ import annotations

import hashlib
import inspect

from ..errors import KernelArgumentError
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

    def __init__(self, fn, **options):
        super().__init__(fn, options=options)
        constexprs = constexpr_params(fn)
        self.params = [KernelParam(i, n, n in constexprs, n in self.no_specialize, n in self.no_align_specialize,
                                   p.annotation) for i, (n, p) in enumerate(self.signature.parameters.items())]
        try:
            self.src = inspect.getsource(fn)
        except (OSError, TypeError):   # no source file: compiling it will say so, with the fix
            self.src = ""

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
