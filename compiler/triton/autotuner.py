"""`triton.autotune`, `triton.heuristics`, `triton.Config`.

`autotune(configs, key)` picks one config per value of the key arguments (plus the dtypes of the
tensor arguments, as Triton does) and remembers it: in the object (`.cache`, `.best_config`) and
in the persistent decision store (compiler/cache/decisions.py, op = the kernel's qualified name),
so another process with the same target, policy and kernel source finds the decision and does not
tune again. How a config is picked depends on the target (compiler/triton/tuning.py):

- where timings mean something (`Caps.measurable`: cpu, gpu with a device) every config is run on
  the real arguments and timed (the generic tuner, compiler/autotune/tuner.py);
- elsewhere (kunlun host emulation, gpu:interpret, a compile-only gpu arch) nothing is timed: each
  config is rendered for the target (its own checks, e.g. the Kunlun local-memory budget) in the
  given order (after the user's `perf_model`, if any) and the first that renders is chosen; the
  decision is stored labelled "unmeasured".

A config the target cannot build is pruned with a note (a warning, and the reason in the store),
not an error; only when no config builds is it an error, with every reason.
"""
from __future__ import annotations

import warnings

from .. import launch_options as LO
from ..errors import KernelArgumentError
from ..jit import KernelFunction
from .jit import KernelInterface, jit


class AutotuneNote(UserWarning):
    """A config the target could not build was pruned (the autotuner carried on without it)."""


class Config:
    """A candidate: constexpr values (`kwargs`) and launch options, and an optional `pre_hook(args)`
    run before each launch with it."""

    def __init__(self, kwargs, num_warps=4, num_stages=3, num_ctas=1, maxnreg=None, pre_hook=None,
                 ir_override=None, **options):
        self.kwargs = dict(kwargs)
        self.num_warps, self.num_stages, self.num_ctas, self.maxnreg = num_warps, num_stages, num_ctas, maxnreg
        self.pre_hook = pre_hook
        self.ir_override = ir_override
        for k in options:
            if k not in LO.LAUNCH:
                raise LO.unknown_error("Config", sorted(self.kwargs), k, where="Config option")
        self.options = {k: v for k, v in options.items() if v is not None}

    def all_kwargs(self) -> dict:
        opts = {"num_warps": self.num_warps, "num_stages": self.num_stages, "num_ctas": self.num_ctas,
                "maxnreg": self.maxnreg, **self.options}
        return {**self.kwargs, **{k: v for k, v in opts.items() if v is not None}}

    def __repr__(self) -> str:
        return ", ".join(f"{k}: {v}" for k, v in self.all_kwargs().items())

    __str__ = __repr__

    def __eq__(self, other):
        return isinstance(other, Config) and self.all_kwargs() == other.all_kwargs() \
            and self.pre_hook is other.pre_hook

    def __hash__(self):
        return hash(tuple(sorted((k, repr(v)) for k, v in self.all_kwargs().items())))


def base_kernel(fn) -> KernelFunction:
    """The KernelFunction at the bottom of a chain of autotune/heuristics wrappers."""
    while not isinstance(fn, KernelFunction):
        fn = fn.fn
    return fn


class Heuristics(KernelInterface):
    """`heuristics({name: f(args)})`: at each launch `name=f(args)` is added to the keywords, where
    `args` maps every argument name (and keyword) to its value."""

    def __init__(self, fn, arg_names, values: dict):
        self.fn, self.arg_names, self.values = fn, list(arg_names), dict(values)
        self.__name__ = getattr(fn, "__name__", "kernel")

    def run(self, *args, grid=None, warmup=False, **kwargs):
        for name, heur in self.values.items():
            kwargs[name] = heur({**dict(zip(self.arg_names, args)), **kwargs})
        return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)

    def warmup(self, *args, grid=(1,), **kwargs):
        return self.run(*args, grid=grid, warmup=True, **kwargs)


def heuristics(values: dict):
    def decorator(fn):
        fn = fn if hasattr(fn, "run") else jit(fn)
        return Heuristics(fn, base_kernel(fn).arg_names, values)
    return decorator


class Autotuner(KernelInterface):
    """See the module docstring. Attributes as in Triton: `configs`, `keys`, `cache` (key -> Config),
    `best_config` (the config of the latest launch), `fn`, `arg_names`."""

    def __init__(self, fn, arg_names, configs, key, reset_to_zero=None, restore_value=None, pre_hook=None,
                 post_hook=None, prune_configs_by=None, warmup=None, rep=None, use_cuda_graph=False,
                 do_bench=None, cache_results=True):
        self.fn, self.arg_names = fn, list(arg_names)
        self.base = base_kernel(fn)
        self.__name__ = self.base.__name__
        self.configs = list(configs) if configs else [Config({})]
        self._config_names = frozenset().union(*(c.kwargs for c in self.configs))
        self.keys = [key] if isinstance(key, str) else list(key)
        for names, what in ((self.keys, "key"), (reset_to_zero or [], "reset_to_zero"),
                            (restore_value or [], "restore_value")):
            for n in names:
                if n not in self.arg_names:
                    raise LO.unknown_error(self.__name__, self.arg_names, n, where=f"autotune {what} name")
        self.reset_to_zero, self.restore_value = list(reset_to_zero or []), list(restore_value or [])
        self.user_pre_hook, self.post_hook = pre_hook, post_hook
        prune = prune_configs_by or {}
        self.early_config_prune = prune.get("early_config_prune")
        self.perf_model, self.top_k = prune.get("perf_model"), prune.get("top_k")
        # accepted for compatibility: the sample count is the tuner's (median of 3 samples of >= 5 ms)
        self.warmup_ms, self.rep_ms, self.use_cuda_graph, self.do_bench = warmup, rep, use_cuda_graph, do_bench
        self.cache_results = cache_results
        self.cache: dict[tuple, Config] = {}
        self.best_config: Config | None = None
        self.configs_timings = None
        self.notes: list[str] = []

    @property
    def nargs(self):
        return self._nargs

    def run(self, *args, grid=None, warmup=False, **kwargs):
        from .tuning import choose  # noqa: PLC0415
        named = dict(zip(self.arg_names, args))
        self._nargs = named
        if kwargs and not self._config_names.isdisjoint(kwargs):
            raise KernelArgumentError(
                f"kernel '{self.__name__}': {', '.join(sorted(self._config_names & kwargs.keys()))} is set both by "
                "the launch and by the autotuned configs; pass it in one place only")
        if len(self.configs) > 1:
            all_args = {**named, **kwargs}
            key = tuple(all_args[k] for k in self.keys if k in all_args) + tuple(
                str(v.dtype) for v in all_args.values() if hasattr(v, "dtype"))
            config = self.cache.get(key)
            if config is None:
                config = self.cache[key] = choose(self, key, args, kwargs, grid)
        else:
            config = self.configs[0]
        self.best_config = config
        full = self.launch_kwargs(config, kwargs)
        if config.pre_hook is not None:
            config.pre_hook({**named, **full})
        return self.fn.run(*args, grid=grid, warmup=warmup, **full)

    @staticmethod
    def launch_kwargs(config: Config, kwargs: dict) -> dict:
        return {**kwargs, **config.all_kwargs()}

    def prune_configs(self, kwargs: dict, named: dict) -> list[Config]:
        """Triton's pruning: early_config_prune(configs, named_args, **kwargs), then the top_k by
        perf_model(**named_args, **kwargs, **config.all_kwargs())."""
        configs = self.configs
        if self.early_config_prune:
            configs = list(self.early_config_prune(configs, named, **kwargs))
        if self.perf_model:
            top_k = self.top_k if self.top_k is not None else len(configs)
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(configs) * top_k)
            est = {c: self.perf_model(**named, **kwargs, **c.all_kwargs()) for c in configs}
            configs = sorted(configs, key=lambda c: est[c])[:max(1, top_k)]
        return configs

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        warnings.warn(msg, AutotuneNote, stacklevel=4)

    def warmup(self, *args, grid=(1,), **kwargs):
        return [self.fn.warmup(*args, grid=grid, **{**kwargs, **c.all_kwargs()}) for c in self.prune_configs(
            kwargs, dict(zip(self.arg_names, args)))]


def autotune(configs, key, prune_configs_by=None, reset_to_zero=None, restore_value=None, pre_hook=None,
             post_hook=None, warmup=None, rep=None, use_cuda_graph=False, do_bench=None, cache_results=True):
    """`@triton.autotune(configs=[Config(...), ...], key=["n"])` above `@triton.jit`."""
    def decorator(fn):
        fn = fn if hasattr(fn, "run") else jit(fn)
        return Autotuner(fn, base_kernel(fn).arg_names, configs, key, reset_to_zero, restore_value, pre_hook,
                         post_hook, prune_configs_by, warmup, rep, use_cuda_graph, do_bench, cache_results)
    return decorator
