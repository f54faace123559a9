"""How `triton.autotune` picks a config for one key (see autotuner.py's docstring): measured
through the generic tuner where the target's timings mean something, else the first config (in
the given order) that renders, stored labelled "unmeasured"."""
from __future__ import annotations

import hashlib
import json
import re

from ..autotune.tuner import DecisionKey, tune
from ..cache.decisions import DecisionStore, config_key, fingerprint_hash, result
from ..errors import KernelArgumentError, TilejitError
from ..jit import render_only
from ..numerics import current_policy
from ..target import current_target
from ..version import compiler_source_hash


def op_name(kernel) -> str:
    """The decision store's op name for a user kernel: its qualified name, file-name safe."""
    q = f"{kernel.fn.__module__}.{kernel.fn.__qualname__}".replace("<locals>", "locals")
    return re.sub(r"[^A-Za-z0-9_.-]", "_", q)


def shape_key(tuner, key: tuple) -> str:
    """The store's shape key: the key arguments' values, the tensor dtypes, and a hash of the
    kernel's source, of the configs and of the compiler's sources (a changed kernel, config list
    or compiler is tuned again: a config the compiler refused may build with a newer one)."""
    names = [k for k in tuner.keys]
    vals = list(key)
    parts = [f"{n}={vals[i]!r}" for i, n in enumerate(names[:len(vals)])]
    dtypes = [str(v) for v in vals[len(parts):]]
    src = getattr(tuner.base, "src", "") or tuner.base.fn.__code__.co_code.hex()
    h = hashlib.sha256("\0".join([src, repr(sorted(config_key(c.all_kwargs()) for c in tuner.configs)),
                                   compiler_source_hash()]).encode()).hexdigest()
    return ",".join(parts + ([f"dtypes={'/'.join(dtypes)}"] if dtypes else []) + [f"src={h[:12]}"])


def _device_sync(args):
    for a in args:
        if getattr(a, "is_cuda", False):
            import torch  # noqa: PLC0415
            torch.cuda.synchronize(a.device)
            return


class _ArgumentProblem(Exception):
    """A launch's arguments are wrong whatever the config: raised through the tuner (which would
    record it as the config's fault) and re-raised as the original error."""

    def __init__(self, error):
        self.error = error


class _Runner:
    """Runs one config on the real arguments, with reset_to_zero / restore_value honoured."""

    def __init__(self, tuner, args, kwargs, grid):
        self.t, self.args, self.kwargs, self.grid = tuner, args, kwargs, grid
        self.named = dict(zip(tuner.arg_names, args))
        self.saved = {n: self.named[n].clone() for n in tuner.restore_value if hasattr(self.named.get(n), "clone")}

    def reset(self):
        for n, v in self.saved.items():
            self.named[n].copy_(v)
        for n in self.t.reset_to_zero:
            if hasattr(self.named.get(n), "zero_"):
                self.named[n].zero_()

    def __call__(self, config):
        self.reset()
        full = self.t.launch_kwargs(config, self.kwargs)
        if self.t.user_pre_hook is not None:
            self.t.user_pre_hook({**self.named, **full})
        if config.pre_hook is not None:
            config.pre_hook({**self.named, **full})
        try:
            self.t.fn.run(*self.args, grid=self.grid, **full)
        except KernelArgumentError as e:
            raise _ArgumentProblem(e) from None
        if self.t.post_hook is not None:
            self.t.post_hook({**self.named, **full}, exception=None)
        _device_sync(self.args)


def choose(tuner, key: tuple, args, kwargs, grid):
    """The config for `key` (see the module docstring); records the decision."""
    target = tuner.base.target or current_target()
    policy = tuner.base.numerics or current_policy()
    configs = tuner.prune_configs(kwargs, dict(zip(tuner.arg_names, args)))
    by_key = {config_key(c.all_kwargs()): c for c in configs}
    skey = shape_key(tuner, key)
    dkey = DecisionKey(op_name(tuner.base), target.name, fingerprint_hash(target), policy, skey,
                       {n: repr(v) for n, v in zip(tuner.keys, key)})
    store = DecisionStore() if tuner.cache_results and _storable(by_key) else _MemoryStore()
    runner = _Runner(tuner, args, kwargs, grid)
    try:
        if target.caps.measurable:
            return _measured(tuner, dkey, store, by_key, runner)
        return _unmeasured(tuner, dkey, store, by_key, runner, target)
    except _ArgumentProblem as p:
        raise p.error from None
    finally:
        runner.reset()   # the real launch sees the arguments as the caller passed them


def _storable(by_key) -> bool:
    """Whether the configs can be written to the store (JSON); others are decided in-process."""
    try:
        json.dumps([c.all_kwargs() for c in by_key.values()], allow_nan=False)
        return True
    except (TypeError, ValueError):
        return False


def _measured(tuner, dkey, store, by_key, runner):
    tuned = tune([c.all_kwargs() for c in by_key.values()], lambda cfg: runner(by_key[config_key(cfg)]),
                 lambda out: None, dkey, store=store)
    for ck, why in tuned.rejected_now:
        tuner.note(f"autotune '{tuner.__name__}': config {ck} pruned on {dkey.target}: {why}")
    entry = tuned.entry
    tuner.configs_timings = {by_key[k]: r.get("time_s") for k, r in entry["results"].items()
                             if k in by_key and r.get("status") == "ok"}
    winner = entry.get("winner")
    if winner is None:
        raise _none_built(tuner, dkey, entry["results"])
    return by_key[winner]


def _unmeasured(tuner, dkey, store, by_key, runner, target):
    known = store.results(dkey.op, dkey.target, dkey.fingerprint, dkey.policy, dkey.shape_key)
    chosen = [k for k, r in known.items() if k in by_key and r.get("status") == "ok" and r.get("unmeasured")]
    if chosen:
        return by_key[min(chosen, key=lambda k: known[k].get("rank", 0))]
    new = {}
    for rank, (ck, config) in enumerate(by_key.items()):
        if ck in known and known[ck].get("status") == "rejected":
            continue
        try:
            with render_only():
                tuner.fn.run(*runner.args, grid=runner.grid, **tuner.launch_kwargs(config, runner.kwargs))
        except KernelArgumentError:
            raise
        except TilejitError as exc:
            why = str(exc).strip().splitlines()[0]
            new[ck] = result(config.all_kwargs(), "rejected", reason=why)
            tuner.note(f"autotune '{tuner.__name__}': config {ck} pruned on {target.name}: {why}")
            continue
        new[ck] = result(config.all_kwargs(), "ok", unmeasured=True, rank=rank,
                         reason=f"not measured: {target.name}'s timings here are not its speed; the first config "
                                "in the given order that renders for it")
        break
    store.record(dkey.op, dkey.target, dkey.fingerprint, dkey.policy, dkey.shape_key, dkey.dims, new,
                 set(by_key))
    ok = [k for k, r in new.items() if r["status"] == "ok"]
    if not ok:
        raise _none_built(tuner, dkey, {**known, **new})
    return by_key[ok[0]]


def _none_built(tuner, dkey, results) -> TilejitError:
    from ..errors import CompilationError  # noqa: PLC0415
    reasons = "\n".join(f"  {k}: {r.get('reason')}" for k, r in results.items() if r.get("status") != "ok")
    return CompilationError(f"autotune '{tuner.__name__}': no config builds on target {dkey.target} for "
                            f"{dkey.shape_key}:\n{reasons}")


class _MemoryStore:
    """`cache_results=False`: the decision lives in this process only (the object's `.cache`)."""

    def __init__(self):
        self.entries: dict = {}

    def results(self, *key):
        return {}

    def record(self, op, target, fp, policy, skey, dims, results, space_keys=None, baseline=None):
        from ..cache.decisions import _pick_winner  # noqa: PLC0415
        entry = {"shape": dims, "results": dict(results), "baseline": baseline}
        _pick_winner(entry, space_keys)
        return entry
