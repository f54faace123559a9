"""`@kernel` and its launch path.

`fn[grid](*args, **meta)` binds the arguments, builds a specialisation key (target, numerics
policy, tensor dtypes, integer divisibility by 16 and equality to 1, constexpr values), and
looks it up in a dict. On a hit the compiled launcher runs at once; on a miss the kernel is
compiled once (frontend -> IR -> passes -> target) through the on-disk cache. The warm path runs
in C where the compiled launch path is available (compiler.fastpath); `KernelFunction.run` is the
Python path it mirrors and falls back to for anything unusual. A hit whose kernel read Python
globals that have since been rebound recompiles (compiler.captured).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import operator
import os
import threading
import time

import torch

from . import dtypes as D
from . import launch_options as LO
from . import cache_miss, source
from .cache import CacheError, CacheMissError, KernelCache, cache_key, strict_mode
from .captured import still_current
from .errors import CompilationError, KernelArgumentError, ToolchainMissingError
from .fastpath import make_dispatcher
from .faults import compiler_faults, debug_enabled
from .frontend import ArgSpec, build_function, constexpr_params
from .ir import print_function, verify
from .launch_record import active as recording_launches, current_op
from .numerics import current_policy, lower_numerics, validate_policy
from .passes import optimize
from .target import current_target, get_target
from .target.args import check_int, check_tensor_kind
from .target.grid import launch_grid
from .version import changed_sources, compiler_source_hash

# errors about the user's kernel or launch, or a kernel that is not in the cache and cannot be
# built here: shown without the compiler's frames unless TILEJIT_DEBUG is on (compiler/faults.py)
_USER_ERRORS = (CompilationError, KernelArgumentError, CacheMissError, ToolchainMissingError)
_cache_lock = threading.Lock()
_caches: dict[str, KernelCache] = {}
# (mode, records) while a render_only / compile_only block is active
_DRY: contextvars.ContextVar[tuple[str, list] | None] = contextvars.ContextVar("tilejit_dry_launch", default=None)


@contextlib.contextmanager
def _dry(mode: str):
    seen: list = []
    token = _DRY.set((mode, seen))
    try:
        yield seen
    finally:
        _DRY.reset(token)


def render_only():
    """Within the block, a launch runs the frontend, the passes and the target's renderer (with
    the target's own checks, e.g. the Kunlun LM budget), records a `Rendered` and returns None
    instead of building and running. Asks what a library call would generate, with no compiler
    or device: `with render_only() as seen: kernels.matmul(a, b)`."""
    return _dry("render")


def compile_only():
    """Within the block, a launch compiles its kernel into the cache (or finds it there), records
    the CompiledKernel and returns None without running: pre-builds a cache for a target this
    machine cannot run (`gpu:sm_90`) by calling the library ops."""
    return _dry("compile")


class Rendered:
    """What `render_only` recorded for one launch."""

    def __init__(self, name, ir, source, target, grid):
        self.name, self.ir, self.source, self.target, self.grid = name, ir, source, target, grid


def dry_launches() -> bool:
    """Whether launches in this context only render or compile (a render_only / compile_only block)."""
    return _DRY.get() is not None


def kernel_cache() -> KernelCache:
    """The process-wide cache for the current TILEJIT_CACHE_DIR."""
    root = os.environ.get("TILEJIT_CACHE_DIR", "")
    c = _caches.get(root)
    if c is None:
        with _cache_lock:
            c = _caches.setdefault(root, KernelCache(root or None))
    return c


class CompiledKernel:
    """One specialisation of a kernel for one target: its IR, source and launcher."""

    def __init__(self, name, ir_before, ir, source, launcher, runtime_indices, key, compile_time, captured=()):
        self.name = name
        self.ir_before = ir_before   # printed IR straight from the frontend
        self.ir = ir                 # printed IR after passes and numerics lowering
        self.source = source
        self.launcher = launcher
        self.runtime_indices = runtime_indices
        self.key = key
        self.compile_time = compile_time
        self.captured = captured     # (where, name, value) of the globals it read (compiler.captured)

    def __call__(self, grid, args):
        self.launcher(grid, args)


def _picker(indices):
    """A fast `args -> tuple(args[i] for i in indices)`."""
    if not indices:
        return lambda args: ()
    if len(indices) == 1:
        i = indices[0]
        return lambda args: (args[i],)
    return operator.itemgetter(*indices)


def _constexpr_key(v):
    # 1, 1.0 and True compare equal but compile differently: the type is part of the key
    return (v.__class__, v)


def _hashable(v) -> bool:
    try:
        hash(v)
        return True
    except TypeError:
        return False


def _spec_of(a):
    """Specialisation key part of one runtime argument: cheap, no allocation for tensors.
    compiler/fastpath/tjfast.c (spec_of) computes the same items for the compiled warm path."""
    if isinstance(a, torch.Tensor):
        return a.dtype
    t = type(a)
    if t is int:
        if a == 1:
            return "i1"
        if not -(2 ** 31) <= a < 2 ** 31:
            if not -(2 ** 63) <= a < 2 ** 63:
                return "i>64"   # never compiled: _argspecs refuses it, naming the argument
            return "i64/16" if a % 16 == 0 else "i64"
        return "i/16" if a % 16 == 0 else "i"
    if t is float:
        return "f"
    if t is bool:
        return "b"
    if a is None:
        return None
    if t.__name__ == "TensorWrapper":
        return _WRAPPED
    return t


_WRAPPED = "triton.reinterpret"   # _spec_of of a TensorWrapper: launched as the tensor it stands for


def _reinterpreted(kernel: str, names, args) -> tuple:
    """`args` with each TensorWrapper (`triton.reinterpret(t, dtype)`, Triton's or the front door's)
    replaced by a view of its tensor as the stated dtype: the kernel sees a tensor of that dtype."""
    out = list(args)
    for i, a in enumerate(args):
        if type(a).__name__ != "TensorWrapper":
            continue
        base = getattr(a, "base", None)
        try:
            dt = D.from_name(str(a.dtype))
        except ValueError:
            dt = None
        tdt = D.DTYPE_TO_TORCH.get(dt)
        if tdt is None or not isinstance(base, torch.Tensor) or base.element_size() != tdt.itemsize:
            raise KernelArgumentError(
                f"kernel '{kernel}': argument '{names[i]}' reinterprets a "
                f"{getattr(base, 'dtype', type(base).__name__)} tensor as {getattr(a.dtype, 'triton_name', a.dtype)}, "
                "which "
                + ("has another element size" if tdt is not None else "is not a dtype a kernel argument can have")
                + f"; supported: {', '.join(str(t).replace('torch.', '') for t in D.TORCH_TO_DTYPE)}")
        out[i] = base.view(tdt)
    return tuple(out)


class KernelFunction:
    """A tile program under `@kernel`. Launch with `fn[grid](*args, **constexprs)`."""

    is_tilejit_kernel = True   # what the frontend recognises (inlined when called from a kernel)

    def __init__(self, fn, target=None, numerics=None, options=None):
        if not inspect.isfunction(fn):
            raise TypeError(f"@kernel expects a function, got {type(fn).__name__}")
        self.fn = fn
        # the source text when it is not in fn's file (compiler/source.py); a function made by
        # exec() of a string gets it here, while the frames running that exec still hold the text
        self.kept_source = source.recover(fn, source.caller_frame(0)) if source.needs_recovery(fn) else None
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__wrapped__ = fn
        self.target = target
        self.numerics = validate_policy(numerics) if numerics else None
        self.signature = inspect.signature(fn)
        self.arg_names = list(self.signature.parameters)
        self._param_set = frozenset(self.arg_names)
        # launch defaults and do_not_specialize sets (compiler/launch_options.py)
        self.launch_defaults, self.no_specialize, self.no_align_specialize = \
            LO.decorator_options(fn.__name__, self.arg_names, options)
        self.compiled: dict[tuple, CompiledKernel] = {}
        self._binder = None
        self._constexpr_names = None
        self._lock = threading.Lock()     # guards _building
        self._building: dict[tuple, threading.Lock] = {}   # one lock per specialisation being compiled
        self._nargs = -1   # set by _prepare; -1 sends the first launch through bind()
        self._dispatch = None   # the warm path `dispatch(grid, *args, **kwargs)`, made at the first launch

    def source_replaced(self) -> None:
        """After `kept_source` changed (compiler.source.keep_source): what the signature's
        annotations decide is worked out again at the next launch. The compiled specialisations,
        this kernel's and those of the kernels that inline it, recompile there (compiler.captured
        checks the kept source they were built from)."""
        self._binder = self._constexpr_names = self._dispatch = None
        self._nargs = -1

    # -- binding --------------------------------------------------------------------------
    def _prepare(self):
        self._constexpr_names = constexpr_params(self.fn, self)
        self.constexpr_idx = [i for i, n in enumerate(self.arg_names) if n in self._constexpr_names]
        self.runtime_idx = [i for i, n in enumerate(self.arg_names) if n not in self._constexpr_names]
        self._binder = self._make_binder()
        self._runtime_args = _picker(self.runtime_idx)
        self._constexpr_args = _picker(self.constexpr_idx)
        self._nargs = len(self.arg_names)   # from now on a full positional call skips bind()

    def _make_binder(self):
        # A generated function binds positional/keyword/default arguments at C speed.
        params, defaults = [], {}
        for p in self.signature.parameters.values():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY):
                raise TypeError(f"kernel '{self.__name__}': *args/**kwargs parameters are not supported")
            if p.default is p.empty:
                params.append(p.name)
            else:
                defaults[f"_d_{p.name}"] = p.default
                params.append(f"{p.name}=_d_{p.name}")
        src = f"def binder({', '.join(params)}):\n    return ({''.join(n + ', ' for n in self.arg_names)})\n"
        ns = dict(defaults)
        exec(src, ns)  # noqa: S102 - source built from the kernel's own parameter names
        return ns["binder"]

    def bind(self, args, kwargs):
        if self._binder is None:
            self._prepare()
        if not kwargs and len(args) == len(self.arg_names):
            return args
        if len(args) + len(kwargs) > len(self.arg_names):
            given = f"{len(args)} positional" + (f" and {len(kwargs)} keyword ({', '.join(kwargs)})" if kwargs else "")
            raise KernelArgumentError(f"kernel '{self.__name__}' takes {len(self.arg_names)} arguments, got "
                                      f"{len(args) + len(kwargs)}: {given}. Signature: {self._signature_text()}")
        try:
            return self._binder(*args, **kwargs)
        except TypeError as e:
            msg = str(e).replace("binder()", f"kernel '{self.__name__}'")
            raise KernelArgumentError(f"{msg}. Signature: {self._signature_text()}") from None

    def _signature_text(self) -> str:
        """`name(x_ptr, n, BLOCK: tl.constexpr)`: the parameters as a kernel author writes them."""
        names = self._constexpr_names or set()
        params = [p.name + (": tl.constexpr" if p.name in names else "")
                  + ("" if p.default is p.empty else f"={p.default!r}") for p in self.signature.parameters.values()]
        return f"{self.__name__}({', '.join(params)})"

    # -- launch ---------------------------------------------------------------------------
    def __getitem__(self, grid):
        if recording_launches() is not None:   # compiler.launch_record: the Python path records
            return lambda *args, **kwargs: self.run(grid, args, kwargs)
        if torch.autograd._profiler_enabled():   # torch.profiler: each launch is a record of its own
            return lambda *args, **kwargs: self._profiled_run(grid, args, kwargs)
        dispatch = self._dispatch or self._make_dispatch()
        return functools.partial(dispatch, grid)

    def _make_dispatch(self):
        """The compiled warm path (compiler.fastpath: key, lookup and launch in C, falling back to
        `run` for anything else), or `run` itself where that path is unavailable."""
        if self._binder is None:
            self._prepare()
        dispatch = make_dispatcher(self, current_target, current_policy, _DRY, torch.Tensor)
        if dispatch is None:
            def dispatch(grid, *args, **kwargs):
                try:
                    return self.run(grid, args, kwargs)
                except _USER_ERRORS as exc:   # one frame of the compiler's shown, not two
                    if debug_enabled():
                        raise
                    raise exc.with_traceback(None) from None
        self._dispatch = dispatch
        return dispatch

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernel '{self.__name__}' is launched with a grid: {self.__name__}[grid](...); "
                        "helpers called from another kernel are inlined automatically")

    def _profiled_run(self, grid, args, kwargs):
        with torch.profiler.record_function(f"tilejit.kernel:{self.__name__}"):
            return self.run(grid, args, kwargs)

    def run(self, grid, args, kwargs):
        # the Python launch path, which the compiled warm path (compiler.fastpath) mirrors and
        # falls back to: bind, one tuple key, one dict lookup, one call
        key, args, target, topts = self._launch_key(args, kwargs)
        dry = _DRY.get()
        try:
            ck = self.compiled.get(key) if dry is None else None
        except TypeError:
            raise self._unhashable(args) from None
        if ck is None or (ck.captured and not still_current(ck)):
            try:
                ck = self._first_launch(grid, key, args, target, dry, topts)
            except _USER_ERRORS as exc:
                if not debug_enabled():   # the user's line is in the message: the compiler's frames are noise
                    exc.__tilejit_launch_error__ = True   # the compiled warm path drops this frame too
                    raise exc.with_traceback(None) from None
                raise
            if dry is not None:
                return None
        if callable(grid):
            grid = grid(dict(zip(self.arg_names, args)))
        ck.launcher(grid, args)
        record = recording_launches()
        if record is not None:
            record.append((ck, grid, args))
        return ck

    def _launch_key(self, args, kwargs) -> tuple:
        """(key, bound args, target, honoured launch options) of a launch with these arguments: the
        key the Python path looks up (the compiled warm path's `key()` must give the same or None)."""
        opts, extra = self.launch_defaults, None
        if kwargs or len(args) != self._nargs:
            if kwargs:
                kwargs, extra = LO.split(self.__name__, self._param_set, self.arg_names, kwargs)
                opts = {**opts, **extra} if extra else opts
            args = self.bind(args, kwargs)
        target = self.target or current_target()
        topts = LO.for_target(target, opts) if opts else ()
        key = self._key(target, self.numerics or current_policy(), args, topts, extra)
        if _WRAPPED in key:   # triton.reinterpret(...) arguments: launched as the tensors they stand for
            args = _reinterpreted(self.__name__, self.arg_names, args)
            key = self._key(target, key[1], args, topts, extra)
        return key, args, target, topts

    def _key(self, target, policy, args, topts, extra) -> tuple:
        """The key of bound `args`, as fastpath/tjfast.c's make_key computes it. Options given at the launch
        (`extra`) join it where the honoured ones differ from the decorator's, which are fixed per target
        (key[0]): the C path sees no options."""
        key = (target.launch_key, policy, *map(_spec_of, self._runtime_args(args)),
               *map(_constexpr_key, self._constexpr_args(args)))
        return key + (topts,) if extra and topts != LO.for_target(target, self.launch_defaults) else key

    def _first_launch(self, grid, key, args, target, dry=None, topts=()):
        """A miss (or a render_only / compile_only launch, recorded in `dry`): the grid is checked
        before anything compiles, then the specialisation is rendered or compiled."""
        if dry is not None and dry[0] == "render":
            dry[1].append(self._render(args, target, key[1], grid, topts))
            return dry[1][-1]
        launch_grid(self.__name__, grid(dict(zip(self.arg_names, args))) if callable(grid) else grid, target.caps)
        ck = self._compile(key, args, target, key[1], topts)   # looks the key up (and its globals) first
        if dry is not None:
            dry[1].append(ck)
        return ck

    def warmup(self, *args, grid=(1,), target=None, numerics=None, **kwargs) -> CompiledKernel:
        """Compiles (or loads from cache) the specialisation these arguments select, without running.
        Launch options (num_warps=, ...) are accepted as at a launch."""
        if self._binder is None:
            self._prepare()
        kwargs, extra = LO.split(self.__name__, self._param_set, self.arg_names, kwargs)
        args = _reinterpreted(self.__name__, self.arg_names, self.bind(args, kwargs))
        target = get_target(target) if target else (self.target or current_target())
        policy = validate_policy(numerics) if numerics else (self.numerics or current_policy())
        topts = LO.for_target(target, {**self.launch_defaults, **extra})
        key = self._key(target, policy, args, topts, extra)
        try:
            ck = self.compiled.get(key)
            if ck is None or (ck.captured and not still_current(ck)):
                ck = self._compile(key, args, target, policy, topts)
            return ck
        except _USER_ERRORS as exc:
            if not debug_enabled():
                raise exc.with_traceback(None) from None
            raise
        except TypeError as e:
            if "unhashable" in str(e):
                raise self._unhashable(args) from None
            raise

    def _unhashable(self, args) -> KernelArgumentError:
        bad = [self.arg_names[i] for i in self.constexpr_idx if not _hashable(args[i])]
        return KernelArgumentError(f"kernel '{self.__name__}': constexpr argument(s) {', '.join(bad)} must be "
                                   "hashable (use a tuple instead of a list)")

    def _argspecs(self, args, target) -> tuple[list[ArgSpec], list[int]]:
        specs, runtime = [], []
        for i, (name, a) in enumerate(zip(self.arg_names, args)):
            if name in self._constexpr_names:
                specs.append(ArgSpec(name, "constexpr", value=a))
                continue
            if isinstance(a, torch.Tensor):
                dt = D.TORCH_TO_DTYPE.get(a.dtype)
                if dt is None:
                    raise KernelArgumentError(
                        f"kernel '{self.__name__}': argument '{name}' is a {a.dtype} tensor; supported dtypes "
                        f"are {', '.join(str(t).replace('torch.', '') for t in D.TORCH_TO_DTYPE)}. "
                        "Convert it with .to(...) before the launch.")
                check_tensor_kind(self.__name__, name, a)
                target.check_tensor(self.__name__, name, a)
                specs.append(ArgSpec(name, "tensor", dtype=D.pointer_type(dt)))
                runtime.append(i)
            elif type(a) is bool:
                specs.append(ArgSpec(name, "scalar", dtype=D.int1))
                runtime.append(i)
            elif type(a) is int:
                if a == 1 and name not in self.no_specialize:
                    specs.append(ArgSpec(name, "constexpr", value=1))
                    continue
                check_int(self.__name__, name, a, 64)
                big = not -(2 ** 31) <= a < 2 ** 31
                hints = {"divisible_by": 16} if a % 16 == 0 and name not in self.no_specialize \
                    and name not in self.no_align_specialize else {}
                specs.append(ArgSpec(name, "scalar", dtype=D.int64 if big else D.int32, hints=hints))
                runtime.append(i)
            elif type(a) is float:
                specs.append(ArgSpec(name, "scalar", dtype=D.float32))
                runtime.append(i)
            elif a is None:
                specs.append(ArgSpec(name, "constexpr", value=None))
            else:
                raise KernelArgumentError(
                    f"kernel '{self.__name__}': argument '{name}' has unsupported type {type(a).__name__}; "
                    "pass a torch.Tensor, int, float or bool (or declare it `: tl.constexpr`).")
        return specs, runtime

    def lower(self, specs: list[ArgSpec], target, policy: str, options=(),
              captured: dict | None = None) -> tuple[str, object, str]:
        """Frontend, passes and rendering for one specialisation: (IR before passes, IR, source).
        `options`: the launch options the target honours (LO.for_target), in the specialisation;
        `captured` receives the globals the kernel read (compiler.captured)."""
        if self._binder is None:
            self._prepare()
        spec_desc = tuple((s.name, repr(s.value) if s.kind == "constexpr" else str(s.dtype)) for s in specs)
        specialization = {"numerics": policy, "args": spec_desc}
        if options:
            specialization["options"] = dict(options)
        with compiler_faults(self.__name__, "lowering"):   # an unexpected exception here is a tilejit bug
            fn_ir = build_function(self.fn, self.__name__, specs, specialization, captured, owner=self)
            verify(fn_ir)
            ir_before = print_function(fn_ir)
            optimize(fn_ir)
            lower_numerics(fn_ir, policy, target)
            verify(fn_ir)
            return ir_before, fn_ir, target.render(fn_ir)

    def _render(self, args, target, policy, grid, options=()) -> Rendered:
        specs, _ = self._argspecs(args, target)
        if callable(grid):
            grid = grid(dict(zip(self.arg_names, args)))
        launch_grid(self.__name__, grid, target.caps)
        _, fn_ir, source = self.lower(specs, target, policy, options)
        return Rendered(self.__name__, fn_ir, source, target, tuple(grid))

    def _compile(self, key, args, target, policy, options=()) -> CompiledKernel:
        # one lock per key: a specialisation compiles once, while other specialisations of the
        # same kernel compile concurrently (the autotuner builds its candidates on every core)
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        try:
            with building:
                ck = self.compiled.get(key)
                if ck is not None and (not ck.captured or still_current(ck)):
                    return ck
                t0 = time.perf_counter()
                specs, runtime = self._argspecs(args, target)
                captured: dict = {}
                ir_before, fn_ir, source = self.lower(specs, target, policy, options, captured)
                entry_key = cache_key(fn_ir, target, policy)
                launcher = _build_and_load(kernel_cache(), entry_key, fn_ir, source, target, runtime, policy)
                ck = CompiledKernel(self.__name__, ir_before, print_function(fn_ir), source, launcher, runtime,
                                    entry_key, time.perf_counter() - t0, tuple(captured.values()))
                self.compiled[key] = ck
                return ck
        finally:
            with self._lock:
                self._building.pop(key, None)


def _build_and_load(cache: KernelCache, key: str, fn_ir, source: str, target, runtime, policy: str):
    """The launcher of cache entry `key`, built first if needed. An entry removed between its
    verified lookup and the load (a concurrent prune) is rebuilt once instead of failing."""
    entry = _entry(cache, key, fn_ir, source, target, policy)
    try:
        return target.load(fn_ir, entry, runtime, cache)
    except OSError:
        if cache.still_valid(entry):
            raise
    cache.drop(key)
    entry = _entry(cache, key, fn_ir, source, target, policy)
    return target.load(fn_ir, entry, runtime, cache)


def _entry(cache: KernelCache, key: str, fn_ir, source: str, target, policy: str):
    """The cache entry of `key`; on a miss it is built, unless strict mode forbids it or the
    target cannot build here (both say which kernel, and how to pre-build it: cache_miss.py)."""
    entry = cache.lookup(key)
    if entry is not None:
        return entry
    op, compiler = current_op(), compiler_source_hash()[:16]
    if strict_mode():
        raise cache_miss.strict_miss(cache, key, fn_ir, target, policy, op, compiler)
    why = target.cannot_build()
    if why:
        raise cache_miss.no_toolchain(cache, key, fn_ir, target, policy, op, compiler, why)

    def build(d):
        meta = target.build(fn_ir, source, d)
        changed = changed_sources()
        if changed:   # the entry was rendered or compiled from other sources than its key says
            raise CacheError(
                f"kernel '{fn_ir.name}': tilejit's own sources in {', '.join(changed)} changed while this process "
                "was running (an edit, or an upgrade in place); a kernel built now would not match the cache key "
                "of the sources it loaded, so it is not built. Restart the process.")
        # what `cache ls`, `export --op` and a later miss's message read back
        return {**meta, "policy": policy, "specialization": cache_miss.specialisation(fn_ir),
                "compiler": compiler, **({"op": op} if op else {})}
    return cache.get_or_build(key, build)


def kernel(fn=None, *, target=None, numerics=None, **options):
    """Marks a tile program. `@kernel`, or `@kernel(target="cpu", numerics="strict")` to pin
    the target or the numerics policy for this kernel; further keywords are launch defaults and
    decorator options (`num_warps=8`, `do_not_specialize=["n"]`: compiler/launch_options.py).
    Also wraps a Triton-style function written against `triton.language`, and a real Triton
    `JITFunction` (its Python function is compiled)."""
    def wrap(f):
        f = _plain_function(f)
        return KernelFunction(f, target=get_target(target) if target else None, numerics=numerics,
                              options=options)
    if fn is None:
        return wrap
    if isinstance(fn, KernelFunction) and not options:
        return fn
    if not callable(_plain_function(fn)):
        raise CompilationError(f"@kernel expects a function, got {fn!r}")
    return wrap(fn)


def _plain_function(f):
    """The Python function behind `f`: itself, a @kernel's, or a Triton JITFunction's `.fn`
    (also under triton.autotune / triton.heuristics wrappers, whose `.fn` chain ends there)."""
    seen = 0
    while not inspect.isfunction(f) and seen < 8:
        inner = getattr(f, "fn", None)
        if inner is None or inner is f:
            break
        f, seen = inner, seen + 1
    return f
