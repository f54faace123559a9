"""Collective communication over `torch.distributed` or BKCL, asynchronous, with named-rank timeouts.

    comm = init(rank, world, port=port, timeout=30)           # gloo on cpu, nccl on CUDA
    groups = comm.split(ParallelLayout(world, tp=2, pp=2))    # {"tp": Communicator, "dp": ..., "pp": ...}
    h = groups["tp"].all_reduce(x)                             # returns at once
    h.wait()                                                   # x now holds the sum over the tp group

Every op returns a handle whose `wait()` finishes the op (and any follow-up: the divide of "avg",
the trim of padded sizes) and returns its result. With `stream=s` the whole op (issue and wait)
runs on a `runtime.stream.Stream` instead, ordered after what `s` waits on (events), and the
returned handle is the stream's. Per group, issue collectives in the same order on every rank
(all from one thread or from one stream): that order is what pairs them across ranks.

Ranks in the API (`src`, `dst`, `sizes[i]`) are ranks *within the communicator's group*; errors
name global ranks.

Sizes not divisible by the group size: `reduce_scatter` splits dim 0 as `torch.tensor_split`
does (the first N % size ranks get one row more), padding each chunk to ceil(N/size) rows for the
collective and trimming after; `all_gather(t, sizes=[...])` takes every rank's dim-0 count
(known to all), pads to the largest and trims. Padding costs at most size-1 rows of traffic.

Agreement: before each transfer the ranks all-gather a small descriptor of their call (op,
dtype, shape, reduction) and compare it; if they differ, every rank raises a CollectiveError naming
each rank's call, and nothing is transferred (`comm.check_calls = False` skips the check). So an op
call returns once every rank of the group has issued it (or raises at the timeout).

Timeouts: before each op a rank writes `tj/arrive/<group>/<rank> = <op seq>` to the store, a
side channel that outlives the collective. A wait that does not finish by `timeout` seconds after
the op was issued (or that fails because a peer went away) raises `CollectiveTimeout` /
`CollectiveError` naming the ranks whose key is behind: the ranks that never arrived. When every
rank arrived and the op still failed (a rank died during it), the error names the rank(s) that
went away (collective_checks.gone_ranks). The store is served by rank 0's process, which raises
only once the other survivors have read it (collective_checks.hold_store), so it cannot take the
store down under them by raising first and exiting; when rank 0 itself is gone, a survivor names
it from its process, as it does any rank that ran on its host.
After such an error the process group is broken; tear it down (`close()`) and re-initialise.

Backends: "gloo" and "nccl" through torch.distributed; "xccl" (BKCL on Kunlun XPUs) through the
target plugin that lists it in `collective_backends` (the kunlun target), whose communicator
subclasses `Communicator` and replaces only the backend primitives (`_c_*`), so padding, avg,
arrival keys and timeouts are the same code for every backend.
"""
from __future__ import annotations

import datetime, pickle, queue, socket, threading, time, traceback  # noqa: E401

import torch
import torch.distributed as dist

from compiler.errors import TargetError, TilejitError
from compiler.loader import LoadError, load_ref
from compiler.target import load_plugin, target_names

from . import collective_checks as checks

__all__ = ["init", "run_ranks", "free_port", "Communicator", "CommHandle", "CollectiveError",
           "CollectiveTimeout", "BackendUnavailable", "split_counts", "resolve_backend"]

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
_REDUCTIONS = ("sum", "max", "min", "avg")   # avg = sum, then a divide in wait(): gloo/BKCL have no AVG for ints
_RS = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_AG = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class CollectiveError(TilejitError, RuntimeError):
    """A collective failed. `op`, `group`, `seq`, `missing` (global ranks that had not arrived)."""

    def __init__(self, message, *, op=None, group=None, seq=None, missing=()):
        self.op, self.group, self.seq, self.missing = op, group, seq, tuple(missing)
        super().__init__(message)


class CollectiveTimeout(CollectiveError, TimeoutError):
    """A collective did not finish within the communicator's timeout."""


class BackendUnavailable(CollectiveError):
    """The requested backend cannot run here; the message names what is missing."""


def resolve_backend(name: str | None) -> str:
    """The torch.distributed backend for `name` ("gloo", "nccl", "xccl"; None: nccl if CUDA is
    usable, else gloo), or BackendUnavailable saying what is missing."""
    if name is None:
        name = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if name == "gloo":
        if not dist.is_gloo_available():
            raise BackendUnavailable("backend 'gloo': this torch build has no gloo")
        return "gloo"
    if name == "nccl":
        missing = [w for w, ok in (("a CUDA device (torch.cuda.is_available())", torch.cuda.is_available()),
                                   ("NCCL in this torch build (torch.distributed.is_nccl_available())",
                                    dist.is_nccl_available())) if not ok]
        if missing:
            raise BackendUnavailable(f"backend 'nccl' is not available here: missing "
                                     f"{' and '.join(missing)}; use 'gloo' on cpu")
        return "nccl"
    if name in ("xccl", "bkcl"):
        # BKCL is reached through a target plugin's ctypes binding (the kunlun target's), which
        # says itself what is missing here
        mod, why = plugin_backend("xccl")
        if mod is not None:
            ok, why = mod.available()
            if ok:
                return "xccl"
        raise BackendUnavailable(
            f"backend 'xccl' (BKCL on Kunlun XPUs, through the kunlun target's BKCL binding) is not available "
            f"here: {why}. Use 'gloo' on cpu or 'nccl' on CUDA GPUs.")
    raise BackendUnavailable(f"unknown backend {name!r}; choose gloo, nccl or xccl")


def plugin_backend(name: str):
    """(module, '') of the target plugin that provides collective backend `name` (a plugin's
    `collective_backends` maps names to modules with `available()` and `init(...)`), else
    (None, why)."""
    for tname in target_names():
        try:
            ref = (load_plugin(tname).collective_backends or {}).get(name)
        except TargetError:
            continue
        if ref:
            try:
                return load_ref(ref, f"collective backend '{name}' of target '{tname}'"), ""
            except LoadError as e:
                return None, str(e)
    return None, f"no installed target plugin provides the '{name}' collective backend"


def split_counts(n: int, parts: int) -> list[int]:
    """Rows per rank when n rows are split over `parts` ranks (torch.tensor_split's rule)."""
    q, r = divmod(n, parts)
    return [q + (i < r) for i in range(parts)]


def init(rank: int, world: int, *, backend: str | None = None, host: str = "127.0.0.1", port: int = 29500,
         store=None, timeout: float = 120.0, device: int | None = None) -> "Communicator":
    """Joins the world: a TCPStore on host:port (rank 0 serves it) unless `store` is given, then
    torch.distributed.init_process_group with `timeout` (the backend's own deadline too); for
    "xccl", a BKCL context whose unique id travels through the same store, on XPU `device`
    (default: rank % device count)."""
    be = resolve_backend(backend)
    td = datetime.timedelta(seconds=timeout)
    hosts = store is None and rank == 0
    if store is None:
        store = dist.TCPStore(host, port, world, hosts, timeout=td)
    checks.register_process(store, rank, hosts)
    if be == "xccl":
        return plugin_backend(be)[0].init(rank, world, store=store, timeout=timeout, device=device)
    dist.init_process_group(be, store=dist.PrefixStore("pg", store), rank=rank, world_size=world, timeout=td)
    return Communicator(store, None, tuple(range(world)), "world", timeout)


class CommHandle:
    """One in-flight collective. `wait()` finishes it and returns its result; `done()` polls."""

    def __init__(self, comm: "Communicator", work, op: str, seq: int, peers, finish=None, result=None):
        self._comm, self._work, self.op, self.seq, self._peers = comm, work, op, seq, peers
        self._finish, self._result = finish, result
        self._deadline = time.monotonic() + comm.timeout
        self._waited = False

    def done(self) -> bool:
        return self._waited or self._work.is_completed()

    def wait(self):
        if not self._waited:
            remaining = max(self._deadline - time.monotonic(), 0.001)   # timedelta(0) would mean "forever"
            try:
                self._work.wait(datetime.timedelta(seconds=remaining))
            except Exception as e:            # noqa: BLE001 - turned into an error that names ranks
                raise self._comm._diagnose(self.op, self.seq, self._peers, e) from e
            if self._finish is not None:
                self._result = self._finish()
            self._waited = True
        return self._result


class Communicator:
    """Collectives over one group of ranks (the world, or a group from `split`)."""

    def __init__(self, store, group, ranks: tuple[int, ...], name: str, timeout: float,
                 global_rank: int | None = None):
        self.store, self.group, self.ranks, self.name, self.timeout = store, group, ranks, name, timeout
        self.global_rank = dist.get_rank() if global_rank is None else global_rank
        self.rank = ranks.index(self.global_rank)       # rank within this group
        self.size = len(ranks)
        self._seq = 0
        self._procs: dict[int, str] | None = None   # peers' host:pid, read at the first op
        self._store_host: int | None = None         # the rank whose process serves the store
        self._p2p_seq: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()
        # check that every rank makes the same call before each transfer (a tiny all_gather)
        self.check_calls = True

    # -- bookkeeping ------------------------------------------------------------------------
    def _arrive(self, channel: str, seq: int) -> None:
        if self._procs is None:   # every rank registered at init; read now, while the store is up
            self._procs, self._store_host = checks.peer_table(self.store, self.ranks)
        self.store.set(f"tj/arrive/{channel}/{self.global_rank}", str(seq))

    def _next(self) -> int:
        with self._lock:
            self._seq += 1
            seq = self._seq
        self._arrive(self.name, seq)
        return seq

    def _agree(self, op: str, seq: int, t, reduction=None, *, any_rows: bool = False, extra: int = 0) -> None:
        """Before the transfer: every rank's call must match (collective_checks). Raises on every
        rank, naming each rank's call, when they differ; the timeout error when a rank never comes."""
        if not self.check_calls:
            return
        desc = checks.describe(op, seq, t, reduction, any_rows=any_rows, extra=extra)
        rows = desc.new_empty(self.size * desc.numel())
        CommHandle(self, self._c_all_gather(rows, desc), op, seq, self._peers()).wait()
        why = checks.disagreement(rows.cpu(), self.ranks)
        if why:
            raise CollectiveError(f"{op} #{seq} on group '{self.name}', seen from rank {self.global_rank}: {why}. "
                                  "Every rank must make the same call (op, dtype, shape, reduction); nothing "
                                  "was transferred.", op=op, group=self.name, seq=seq)

    def _diagnose(self, op: str, seq: int, peers, cause: BaseException) -> CollectiveError:
        """Which ranks of `peers` ((channel, global rank) pairs) had not reached op `seq`, or, when
        all had, which went away during it. The rank serving the store returns only once the
        other survivors have read it (collective_checks.hold_store); when it cannot be read (the
        rank serving it is gone), the ranks whose processes on this host have exited are named
        from the table read at the first op."""
        ranks = [r for _, r in peers]
        what = (f"{op} #{seq} on group '{self.name}' (ranks {list(self.ranks)}), "
                f"seen from rank {self.global_rank}")
        first = str(cause).splitlines()[0] if str(cause) else repr(cause)
        timed_out = "timed out" in str(cause).lower() or "timeout" in str(cause).lower()
        procs = self._procs or {}
        try:
            missing, how = [], []
            for channel, r in peers:
                key = f"tj/arrive/{channel}/{r}"
                if not self.store.check([key]) or int(self.store.get(key)) < seq:
                    missing.append(r)
            if not missing:
                if len(peers) > 1:
                    missing, how = checks.gone_ranks(self.store, procs, peers[0][0], seq, self.global_rank, ranks,
                                                     min(2.0, max(0.5, self.timeout / 4)))
                else:
                    missing, how = checks.exited(procs, ranks)
            gone = set(missing) | set(checks.exited(procs, ranks)[0])
            serving = self._store_host == self.global_rank
            checks.hold_store(self.store, peers[0][0], seq, self.global_rank, serving,
                              [r for r in ranks if r not in gone], self.timeout)
        except Exception as unread:           # noqa: BLE001 - the store's host may be the dead rank
            dead, how = checks.exited(procs, ranks)
            if dead:
                return CollectiveError(f"{what} failed: rank(s) {dead} went away during it ({'; '.join(how)}; the "
                                       f"store could not be read: {str(unread).splitlines()[0]}). Cause: {first}",
                                       op=op, group=self.name, seq=seq, missing=dead)
            cls = CollectiveTimeout if timed_out else CollectiveError
            return cls(f"{what} failed and the arrivals could not be read from the store (hosted by rank 0, which "
                       f"may be the rank that went away): {str(unread).splitlines()[0]}. Cause: {first}",
                       op=op, group=self.name, seq=seq)
        if how:
            return CollectiveError(f"{what}, failed after every rank arrived: rank(s) {missing} went away "
                                   f"during it ({'; '.join(how)}). Cause: {first}",
                                   op=op, group=self.name, seq=seq, missing=missing)
        if missing:
            msg = (f"{what} {'timed out after ' + str(self.timeout) + ' s' if timed_out else 'failed'}: "
                   f"rank(s) {missing} did not arrive. Cause: {first}")
            return CollectiveTimeout(msg, op=op, group=self.name, seq=seq, missing=missing)
        cls = CollectiveTimeout if timed_out else CollectiveError
        return cls(f"{what} failed after every rank arrived: {cause}", op=op, group=self.name, seq=seq)

    def _peers(self):
        return [(self.name, r) for r in self.ranks]

    def _run(self, stream, fn, *args):
        """Without a stream: fn's CommHandle. With one: issue + wait on the stream (a stream Handle)."""
        if stream is None:
            return fn(*args)
        return stream.submit(lambda: fn(*args).wait())

    def _global(self, local: int) -> int:
        if not 0 <= local < self.size:
            raise ValueError(f"rank {local} is outside group '{self.name}' of size {self.size}")
        return self.ranks[local]

    # -- backend primitives: one async call each, returning a work object with wait(timedelta)
    # and is_completed(); ranks are group ranks, op is "sum", "max" or "min". The xccl
    # communicator overrides these and inherits everything else.
    def _c_all_reduce(self, t, op):
        return dist.all_reduce(t, op=_OPS[op], group=self.group, async_op=True)

    def _c_all_gather(self, out, t):
        return _AG(out, t, group=self.group, async_op=True)

    def _c_reduce_scatter(self, out, src, op):
        return _RS(out, src, op=_OPS[op], group=self.group, async_op=True)

    def _c_broadcast(self, t, src):
        return dist.broadcast(t, src=self.ranks[src], group=self.group, async_op=True)

    def _c_barrier(self):
        return dist.barrier(group=self.group, async_op=True)

    def _c_p2p(self, t, peer, sending):
        return (dist.isend if sending else dist.irecv)(t, self.ranks[peer], group=self.group)

    # -- collectives -------------------------------------------------------------------------
    def all_reduce(self, t: torch.Tensor, op: str = "sum", *, stream=None):
        """In place: t becomes the reduction ("sum", "max", "min", "avg") over the group. Integer
        "avg" truncates toward zero. Returns a handle; wait() returns t."""
        return self._run(stream, self._all_reduce, t, op)

    def _all_reduce(self, t, op):
        rop = _base_op(op)
        seq = self._next()
        self._agree("all_reduce", seq, t, op)
        work = self._c_all_reduce(t, rop)
        return CommHandle(self, work, "all_reduce", seq, self._peers(),
                          finish=(lambda: _divide(t, self.size)) if op == "avg" else None, result=t)

    def all_gather(self, t: torch.Tensor, sizes: list[int] | None = None, *, stream=None):
        """Concatenation along dim 0 of every rank's t, in group-rank order. Ranks may hold
        different row counts if `sizes` (every rank's t.shape[0], the same list on all ranks) is given."""
        return self._run(stream, self._all_gather, t, sizes)

    def _all_gather(self, t, sizes):
        t = t.contiguous()
        if sizes is None:
            out = torch.empty((self.size * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
            seq = self._next()
            self._agree("all_gather", seq, t)
            return CommHandle(self, self._c_all_gather(out, t), "all_gather", seq,
                              self._peers(), result=out)
        if len(sizes) != self.size or sizes[self.rank] != t.shape[0]:
            raise ValueError(f"all_gather: sizes={sizes} must list {self.size} row counts with "
                             f"sizes[{self.rank}] == {t.shape[0]} (this rank's rows)")
        m = max(sizes)
        padded = t if t.shape[0] == m else torch.cat([t, t.new_zeros((m - t.shape[0], *t.shape[1:]))])
        buf = torch.empty((self.size * m, *t.shape[1:]), dtype=t.dtype, device=t.device)
        seq = self._next()
        self._agree("all_gather", seq, t, any_rows=True, extra=hash(tuple(sizes)))
        work = self._c_all_gather(buf, padded)
        return CommHandle(self, work, "all_gather", seq, self._peers(),
                          finish=lambda: torch.cat([buf[i * m:i * m + n] for i, n in enumerate(sizes)]))

    def reduce_scatter(self, t: torch.Tensor, op: str = "sum", *, stream=None):
        """This rank's chunk of the reduction of t over the group: rows split along dim 0 by
        split_counts(t.shape[0], size) (the first N % size ranks get one more)."""
        return self._run(stream, self._reduce_scatter, t, op)

    def _reduce_scatter(self, t, op):
        rop = _base_op(op)
        n, p = t.shape[0], self.size
        counts = split_counts(n, p)
        c = counts[0]                          # the largest chunk
        if n == c * p:
            src = t.contiguous()
        else:                                  # pad every chunk to c rows
            src = t.new_zeros((c * p, *t.shape[1:]))
            start = 0
            for i, k in enumerate(counts):
                src[i * c:i * c + k] = t[start:start + k]
                start += k
        out = torch.empty((c, *t.shape[1:]), dtype=t.dtype, device=t.device)
        seq = self._next()
        self._agree("reduce_scatter", seq, t, op)
        work = self._c_reduce_scatter(out, src, rop)
        mine = counts[self.rank]

        def finish():
            r = out[:mine]
            return _divide(r, p) if op == "avg" else r
        return CommHandle(self, work, "reduce_scatter", seq, self._peers(), finish=finish)

    def broadcast(self, t: torch.Tensor, src: int = 0, *, stream=None):
        """In place: every rank's t becomes group-rank src's t."""
        return self._run(stream, self._broadcast, t, src)

    def _broadcast(self, t, src):
        self._global(src)                      # checks the range
        seq = self._next()
        self._agree("broadcast", seq, t, extra=src)
        work = self._c_broadcast(t, src)
        return CommHandle(self, work, "broadcast", seq, self._peers(), result=t)

    def barrier(self, *, stream=None):
        return self._run(stream, self._barrier)

    def _barrier(self):
        seq = self._next()
        return CommHandle(self, self._c_barrier(), "barrier", seq, self._peers())

    def send(self, t: torch.Tensor, dst: int, *, stream=None):
        return self._run(stream, self._p2p, t, dst, True)

    def recv(self, t: torch.Tensor, src: int, *, stream=None):
        """Receives into t from group-rank src; wait() returns t."""
        return self._run(stream, self._p2p, t, src, False)

    def _p2p(self, t, peer, sending):
        g = self._global(peer)
        pair = (self.global_rank, g) if sending else (g, self.global_rank)
        with self._lock:                       # one counter per (src, dst) pair, shared by both ends
            seq = self._p2p_seq[pair] = self._p2p_seq.get(pair, 0) + 1
        channel = f"p2p/{pair[0]}-{pair[1]}"
        self._arrive(channel, seq)
        work = self._c_p2p(t, peer, sending)
        return CommHandle(self, work, "send" if sending else "recv", seq, [(channel, g)], result=t)

    # -- groups and lifetime -----------------------------------------------------------------
    def split(self, layout) -> dict[str, "Communicator"]:
        """Communicators for this rank's tp, dp and pp groups of `layout` (a ParallelLayout).
        Collective over the world: every rank must call it, with the same layout."""
        if layout.world != self.size or self.group is not None:
            raise ValueError(f"split: the layout is for world={layout.world}, but this communicator is "
                             f"group '{self.name}' of {self.size} ranks; split the world communicator")
        td = datetime.timedelta(seconds=self.timeout)
        mine = {}
        for kind, groups in layout.all_groups().items():
            for ranks in groups:               # every rank creates every group, in the same order
                pg = dist.new_group(list(ranks), timeout=td)
                if self.global_rank in ranks:
                    idx = groups.index(ranks)
                    mine[kind] = Communicator(self.store, pg, ranks, f"{kind}{idx}", self.timeout)
        return mine

    def close(self) -> None:
        """Tears the process group down (call on the world communicator, on every rank)."""
        if dist.is_initialized():
            dist.destroy_process_group()

    def __repr__(self):
        return f"<Communicator {self.name} rank {self.rank}/{self.size} (global {self.global_rank})>"


def _base_op(op: str) -> str:
    """The reduction a backend runs for `op` ("avg" runs as "sum")."""
    if op not in _REDUCTIONS:
        raise ValueError(f"unknown reduction {op!r}; choose one of {', '.join(_REDUCTIONS)}")
    return "sum" if op == "avg" else op


def _divide(t: torch.Tensor, n: int) -> torch.Tensor:
    if t.dtype.is_floating_point:
        return t.div_(n)
    return t.copy_(torch.div(t, n, rounding_mode="trunc"))


# -- launching ranks on localhost (tests, examples, benchmarks) ---------------------------------
def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the store binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn, rank, world, port, backend, timeout, args, q):
    comm = None
    try:
        comm = init(rank, world, backend=backend, port=port, timeout=timeout)
        # pickled here into plain bytes: a tensor put on the queue as it is would be shared through
        # this process's file-descriptor server, which is gone once the rank exits
        q.put((rank, True, pickle.dumps(fn(comm, *args))))
    except BaseException:                     # noqa: BLE001 - reported to the parent as text
        q.put((rank, False, traceback.format_exc()))
    finally:
        if comm is not None:
            comm.close()


def run_ranks(fn, world: int, *args, backend: str | None = "gloo", timeout: float = 60.0,
              deadline: float = 120.0) -> list:
    """Runs fn(comm, *args) on `world` spawned processes on 127.0.0.1; returns each rank's return
    value (None for a rank that exited without one while others reported). fn must be importable
    (module level). A rank that raised makes this raise with its traceback, and so does a run in
    which no rank reported at all; ranks still alive after `deadline` seconds are killed."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(fn, r, world, port, backend, timeout, args, q), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results, errors, reported = [None] * world, {}, set()
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:                                  # drain while waiting: a full pipe would block a child
            rank, ok, value = q.get(timeout=0.1)
            (results.__setitem__ if ok else errors.__setitem__)(rank, pickle.loads(value) if ok else value)
            reported.add(rank)
            continue
        except queue.Empty:
            pass
        if not any(p.is_alive() for p in procs) and q.empty():
            break
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join()
    name = f"run_ranks({getattr(fn, '__name__', fn)}, world={world})"
    if errors or hung:
        text = "".join(f"--- rank {r} ---\n{tb}" for r, tb in sorted(errors.items()))
        late = f"ranks {hung} still running after {deadline} s; " if hung else ""
        raise RuntimeError(f"{name}: {late}{len(errors)} rank(s) failed\n{text}")
    if not reported:   # e.g. a script without a main guard: each spawned rank re-ran it and died
        codes = [p.exitcode for p in procs]
        raise RuntimeError(f"{name}: every rank exited without reporting a result or an error (exit codes "
                           f"{codes}); their stderr above says why. A script that calls run_ranks must "
                           "call it under `if __name__ == '__main__':` (each rank is a spawned process that "
                           "imports the script)")
    return results
