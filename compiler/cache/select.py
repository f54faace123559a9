"""Which entries and decision files an export takes: `python -m compiler.cache export --target
--kernel --op --since --keys`. Every criterion given must hold; none given takes everything.

- `--target cpu` / `kunlun` (every arch) / `kunlun:xpu3`: entries built for it, decision files of it;
- `--kernel NAME` (a glob: `rms_norm*`): entries of kernels so named (no decision file: those
  belong to library ops, chosen with `--op`);
- `--op OP`: the library op's decision files and the entries built while it launched (entries
  record their op since this version; older ones are not chosen by op);
- `--since 12h` (s, m, h, d, w) or an ISO date: entries built and decision files written since;
- `--keys FILE`: exactly what a process recorded using (TILEJIT_CACHE_RECORD: cache/usage.py).

The compiled launch path's module (a CPython extension, the same for every target) goes with
every export (a deployment without a C compiler loads it from there: compiler/fastpath), except
one by `--keys` that does not list it.
"""
from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import re
import time

from .safety import CacheError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """Epoch seconds of `--since`: a duration back from now (`90m`, `12h`, `7d`) or an ISO date/time."""
    now = time.time() if now is None else now
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return datetime.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise CacheError(f"--since {text!r}: give a duration back from now (90m, 12h, 7d, 2w) or an ISO date "
                         "(2025-01-31, 2025-01-31T12:00)") from None


def _target_matches(wanted: tuple[str, ...], target) -> bool:
    t = str(target or "")
    return any(t == w or t.split(":")[0] == w for w in wanted)


@dataclasses.dataclass(frozen=True)
class Selection:
    targets: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()
    since: float | None = None
    keys: frozenset | None = None        # from a --keys manifest
    decisions: frozenset | None = None   # decision file names from the same manifest

    @property
    def everything(self) -> bool:
        return not (self.targets or self.kernels or self.ops or self.since is not None or self.keys is not None)

    def entry(self, key: str, meta: dict, created: float, launch_path: bool) -> bool:
        if self.keys is not None and key not in self.keys:
            return False
        if launch_path:
            return True
        if self.targets and not _target_matches(self.targets, meta.get("target")):
            return False
        if self.kernels and not any(fnmatch.fnmatchcase(str(meta.get("kernel")), k) for k in self.kernels):
            return False
        if self.ops and meta.get("op") not in self.ops:
            return False
        return self.since is None or created >= self.since

    def decision(self, name: str, doc: dict, mtime: float) -> bool:
        if self.decisions is not None or self.keys is not None:
            return name in (self.decisions or ())
        if self.kernels and not self.ops:
            return False
        if self.targets and not _target_matches(self.targets, doc.get("target")):
            return False
        if self.ops and doc.get("op") not in self.ops:
            return False
        return self.since is None or mtime >= self.since

    def describe(self) -> str:
        parts = [f"--target {','.join(self.targets)}"] if self.targets else []
        parts += [f"--kernel {','.join(self.kernels)}"] if self.kernels else []
        parts += [f"--op {','.join(self.ops)}"] if self.ops else []
        if self.since is not None:
            parts.append("--since " + time.strftime("%Y-%m-%d %H:%M", time.localtime(self.since)))
        if self.keys is not None:
            parts.append(f"--keys ({len(self.keys)} entries, {len(self.decisions or ())} decision files listed)")
        return " ".join(parts) or "everything"
