"""What runtime.collectives checks around a transfer: that every rank called the same op with
the same dtype, shape and reduction (before anything moves), and which rank went away when an
op fails after everyone arrived.

Agreement: each rank packs its call into a small int64 descriptor (`describe`); the ranks
all-gather the descriptors over the group's own backend (a few dozen bytes) and compare them
(`disagreement`). A mismatch is reported on every rank, naming each rank's call, and nothing is
transferred - where a mismatched transfer would abort the process (gloo) or return garbage.

Liveness: at init every rank records `tj/proc/<rank> = host:pid` in the store (and rank 0, when
its process serves the store, `tj/store_host`); each communicator reads its peers' entries at its
first op (`peer_table`), so that a survivor can still check its peers' processes when the store is
gone with the rank that served it. When an op fails after every rank arrived, each survivor
records that it saw the failure and waits briefly for the others to say the same; a rank whose
process is gone (checked directly when it ran on this host) or that never reports is the one that
went away. Then each survivor records that it has read what it needed, and the rank serving the
store waits for the other survivors to say so (`hold_store`) before it raises: raising first and
exiting, it would take the store down while they still read it. Only that rank waits: the others
raise at once, and their exits are what tell a survivor still blocked in the transfer on them.
"""
from __future__ import annotations

import os
import socket
import time

import torch

_MAGIC = 0x746A6331   # "tjc1"
_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
_REDUCTIONS = (None, "sum", "max", "min", "avg")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32,
           torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)
_FIELDS = 12   # magic, seq, op, reduction, dtype, ndim, d0..d3, hash of further dims, extra


def describe(op: str, seq: int, t: torch.Tensor, reduction: str | None = None, *, any_rows: bool = False,
             extra: int = 0) -> torch.Tensor:
    """The descriptor of one rank's call. `any_rows`: dim 0 may differ between ranks (an uneven
    all_gather, whose `sizes` list goes into `extra` instead)."""
    shape = tuple(t.shape)
    dims = [(-1 if any_rows and i == 0 else d) for i, d in enumerate(shape[:4])] + [-2] * (4 - min(len(shape), 4))
    dt = _DTYPES.index(t.dtype) if t.dtype in _DTYPES else 100 + (hash(str(t.dtype)) % 1000)
    fields = [_MAGIC, seq, _OPS.index(op), _REDUCTIONS.index(reduction), dt, len(shape), *dims,
              hash(shape[4:]) if len(shape) > 4 else 0, extra]
    return torch.tensor(fields, dtype=torch.int64, device=t.device)


def _text(row: list[int]) -> str:
    op, red, dt, ndim = _OPS[row[2]], _REDUCTIONS[row[3]], row[4], row[5]
    dtype = str(_DTYPES[dt]).replace("torch.", "") if dt < len(_DTYPES) else f"dtype #{dt}"
    dims = ["*" if d == -1 else str(d) for d in row[6:6 + min(ndim, 4)]] + (["..."] if ndim > 4 else [])
    return f"{op} {dtype}[{', '.join(dims)}]" + (f" {red}" if red else "")


def disagreement(rows: torch.Tensor, ranks) -> str | None:
    """None when every rank's descriptor matches, else a description of each rank's call."""
    table = rows.view(len(ranks), _FIELDS).tolist()
    if all(r == table[0] for r in table):
        return None
    if any(r[0] != _MAGIC for r in table):
        return "a rank called a different collective at this point (the descriptors did not line up)"
    calls = "; ".join(f"rank {g}: {_text(r)}" + (" (with another src or sizes)" if r[11] != table[0][11] else "")
                      for g, r in zip(ranks, table))
    return f"the ranks' calls differ ({calls})"


def register_process(store, rank: int, hosts_store: bool) -> None:
    """Records this rank's process (and, for the rank whose process serves the store, that it does)."""
    store.set(f"tj/proc/{rank}", f"{socket.gethostname()}:{os.getpid()}")
    if hosts_store:
        store.set("tj/store_host", str(rank))


def peer_table(store, ranks) -> tuple[dict[int, str], int | None]:
    """(`host:pid` of each of `ranks` that registered at init, the rank whose process serves the
    store or None: not a rank of this world), read while the store is up."""
    keys = [f"tj/proc/{r}" for r in ranks]
    if store.check(keys):
        procs = {r: v.decode() for r, v in zip(ranks, store.multi_get(keys))}
    else:
        procs = {r: store.get(k).decode() for r, k in zip(ranks, keys) if store.check([k])}
    host = int(store.get("tj/store_host")) if store.check(["tj/store_host"]) else None
    return procs, host


def _process_gone(pid: int) -> bool:
    """Whether process `pid` of this host has exited (a zombie counts: it is dead, only not reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def exited(procs: dict[int, str], ranks) -> tuple[list[int], list[str]]:
    """(ranks of `ranks` whose process ran on this host and has exited, how each was seen)."""
    host, dead, how = socket.gethostname(), [], []
    for r in ranks:
        h, _, pid = procs.get(r, "").rpartition(":")
        if h == host and pid.isdigit() and _process_gone(int(pid)):
            dead.append(r)
            how.append(f"rank {r}'s process {pid} on this host has exited")
    return dead, how


def gone_ranks(store, procs: dict[int, str], channel: str, seq: int, me: int, peers,
               wait_s: float) -> tuple[list[int], list[str]]:
    """After op `seq` failed with every rank arrived: (ranks that went away, how each was told).
    Records this rank's failure; a peer on this host whose process has exited is named as soon as
    that is seen (checked again while waiting: a killed process may still be closing), otherwise
    the peers that do not record theirs within `wait_s` are named."""
    key = f"tj/failed/{channel}/{seq}"
    store.set(f"{key}/{me}", "1")
    silent = [r for r in peers if r != me]
    end = time.monotonic() + wait_s
    while True:
        dead, how = exited(procs, silent)
        if dead:
            return dead, how   # seen directly: no need to wait for the others' word
        silent = [r for r in silent if not store.check([f"{key}/{r}"])]
        if not silent or time.monotonic() >= end:
            break
        time.sleep(0.02)
    return silent, [f"rank {r} did not report the failure within {wait_s:.1f} s (gone or hung)" for r in silent]


def hold_store(store, channel: str, seq: int, me: int, host: bool, survivors, wait_s: float) -> None:
    """Records that this rank has read what it needed about failed op `seq`; the rank whose
    process serves the store (`host`) then waits, at most `wait_s`, until every other survivor has
    recorded the same, so that it raises (and may exit, closing the store) only after they read it."""
    key = f"tj/diagnosed/{channel}/{seq}"
    store.set(f"{key}/{me}", "1")
    waiting = [r for r in survivors if r != me] if host else []
    end = time.monotonic() + wait_s
    while waiting and time.monotonic() < end:
        waiting = [r for r in waiting if not store.check([f"{key}/{r}"])]
        if waiting:
            time.sleep(0.01)
