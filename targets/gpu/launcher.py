"""Launchers of the gpu target.

- `InterpretLauncher`: runs the generated Triton source through Triton's interpreter on CPU
  tensors, in this process, without TRITON_INTERPRET. Triton decides at import time whether
  `@triton.jit` makes interpreted functions, so with the variable unset the standard library
  (`tl.sum`, `tl.max`, `tl.sigmoid`, ... are themselves `@triton.jit` functions) refuses to be
  called outside a compiled kernel. While an interpreted launch runs (under a lock), calls to a
  `JITFunction` are routed to the interpreter's own path for device-function calls
  (`_patch_lang` + the rewritten function, exactly what `InterpretedFunction.__call__` does
  under TRITON_INTERPRET=1); the patch is removed when the launch returns.
- `DeviceLauncher`: a CUDA/ROCm device: the binary stored in the tilejit cache entry, loaded as a
  Triton `CompiledKernel` (no `triton.compile`, no Triton JIT) and launched on torch's current
  stream. The arguments are checked against what the binary assumes (assume.py); pointers that
  are not 16-byte aligned get a variant compiled without that assumption, through the cache.
- `CompileOnlyLauncher`: an arch named for a machine without that device: raises.
"""
from __future__ import annotations

import contextlib
import threading

from compiler.errors import InterpreterError, OutOfResources, TargetError
from compiler.target import launch_grid
from compiler.target.args import check_tensors

from .assume import ALIGN

_interp_lock = threading.RLock()


@contextlib.contextmanager
def interpreting():
    """Routes `JITFunction.__call__` (device-function calls such as tl.sum) to Triton's
    interpreter for the duration of the block."""
    from triton.runtime import interpreter as I  # noqa: PLC0415, N812
    from triton.runtime.jit import JITFunction  # noqa: PLC0415

    def _call(self, *args, **kwargs):
        scope = I._patch_lang(self.fn)
        try:
            return I.InterpretedFunction(self.fn).rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    with _interp_lock:
        original = JITFunction.__dict__["__call__"]
        JITFunction.__call__ = _call
        try:
            yield
        finally:
            JITFunction.__call__ = original


class InterpretLauncher:
    def __init__(self, jit_fn, name: str, arg_indices: list[int], caps, param_names=None):
        from triton.runtime.interpreter import InterpretedFunction  # noqa: PLC0415
        self.fn = InterpretedFunction(jit_fn.fn)
        self.name = name
        self.arg_indices = list(arg_indices)
        self.caps = caps
        self.param_names = list(param_names) if param_names else [f"#{i}" for i in arg_indices]

    def __call__(self, grid, args) -> None:
        grid = launch_grid(self.name, grid, self.caps)
        if grid is None:
            return
        runtime = [args[i] for i in self.arg_indices]
        check_tensors(self.name, self.param_names, runtime, "cpu")
        with interpreting():
            try:
                self.fn[grid](*runtime)
            except Exception as e:  # noqa: BLE001 - Triton's runtime errors become tilejit's
                ours = tilejit_error(e)
                if ours is None:
                    raise
                raise ours from e


def tilejit_error(e: BaseException):
    """Triton's runtime error `e` as tilejit's class of the same name (so that code catching the
    front door's `triton.runtime.errors.*` catches it), or None for any other exception."""
    from triton.runtime import errors as R  # noqa: PLC0415
    if isinstance(e, R.OutOfResources):
        return OutOfResources(e.required, e.limit, e.name)
    if isinstance(e, R.InterpreterError):
        return InterpreterError(str(e))
    return None


_TRITON_RUNTIME = None


def _triton_runtime():
    """(triton.knobs.runtime, triton.runtime.driver), imported once, at the first device launch."""
    global _TRITON_RUNTIME
    if _TRITON_RUNTIME is None:
        from triton import knobs  # noqa: PLC0415
        from triton.runtime import driver  # noqa: PLC0415
        _TRITON_RUNTIME = (knobs.runtime, driver)
    return _TRITON_RUNTIME


class DeviceBinary:
    """One cache entry's kernel: its Assumptions and the CompiledKernel read from its files
    (no device needed). A loaded module belongs to one device's context, so each further
    device gets its own CompiledKernel read from the same files."""

    def __init__(self, assume, compiled):
        self.assume = assume
        self.compiled = compiled
        self._devices: dict[int, object] = {}
        self._lock = threading.Lock()

    def on(self, device: int):
        ck = self._devices.get(device)
        if ck is None:
            with self._lock:
                ck = self._devices.get(device)
                if ck is None:
                    c = self.compiled
                    ck = c if not self._devices else type(c)(c.src, c.metadata_group, c.hash)
                    self._devices[device] = ck
        return ck


class DeviceLauncher:
    """`binary`: the DeviceBinary of the cache entry; `variant(names)`: the DeviceBinary of the
    variant whose named pointers are not assumed aligned (built through the cache on first need)."""

    def __init__(self, name: str, arg_indices: list[int], binary: DeviceBinary, variant, caps, param_names=None):
        self.name = name
        self.caps = caps
        self.arg_indices = list(arg_indices)
        self.param_names = list(param_names) if param_names else [f"#{i}" for i in arg_indices]
        self.binary = binary
        self._variant = variant
        self._variants: dict[tuple, DeviceBinary] = {(): binary}
        self._lock = threading.Lock()

    def select(self, runtime_args) -> DeviceBinary:
        """The binary whose assumptions hold for these arguments. Touches no device."""
        self.binary.assume.check_ints(runtime_args)
        bad = self.binary.assume.misaligned(runtime_args)
        if not bad:
            return self.binary
        with self._lock:
            found = self._variants.get(bad)
            if found is None:
                found = self._variants[bad] = self._build_variant(bad)
        return found

    def _build_variant(self, bad) -> DeviceBinary:
        from compiler.cache import CacheError  # noqa: PLC0415
        try:
            return self._variant(bad)
        except CacheError as e:
            names = ", ".join(f"'{n}'" for n in bad)
            raise TargetError(
                f"kernel '{self.name}': argument(s) {names} point to memory that is not {ALIGN}-byte aligned "
                f"(a view such as x[1:]), and the cached binary assumes {ALIGN}-byte aligned pointers. The "
                "variant without that assumption is not in the cache, and strict-cache mode forbids compiling "
                f"it. Pass tensors that start {ALIGN}-byte aligned (e.g. .clone() the view), or pre-build the "
                f"variant by running once without TILEJIT_CACHE_STRICT.\n({e})") from None

    def __call__(self, grid, args) -> None:
        g = launch_grid(self.name, grid, self.caps)
        if g is None:
            return
        runtime = [args[i] for i in self.arg_indices]
        check_tensors(self.name, self.param_names, runtime, "cuda")
        binary = self.select(runtime)
        hooks, driver = _triton_runtime()
        drv = driver.active
        device = drv.get_current_device()            # torch.cuda.current_device()
        stream = drv.get_current_stream(device)      # torch's current stream on that device
        ck = binary.on(device)
        try:
            run = ck.run                             # loads the module onto the device on first use
        except Exception as e:  # noqa: BLE001 - Triton's OutOfResources (shared memory) becomes tilejit's
            ours = tilejit_error(e)
            if ours is None:
                raise
            raise ours from e
        # what CompiledKernel[grid](...) does, without building a closure per launch; the launch
        # metadata is None unless a launch hook (a profiler) is installed
        run(g[0], g[1], g[2], stream, ck.function, ck.packed_metadata, ck.launch_metadata(g, stream, *runtime),
            hooks.launch_enter_hook, hooks.launch_exit_hook, *runtime)


class CompileOnlyLauncher:
    def __init__(self, target_name: str, name: str, entry_dir: str, artifacts):
        self.msg = (f"kernel '{name}' was compiled for target '{target_name}', which is compile-only: there is no "
                    f"such device on this machine. Its artifacts ({', '.join(artifacts)}) are in {entry_dir}. "
                    "Run on a machine with the GPU using target 'gpu', or use 'gpu:interpret' to run the same "
                    "Triton source through Triton's interpreter on CPU tensors.")

    def __call__(self, grid, args) -> None:
        raise TargetError(self.msg)
