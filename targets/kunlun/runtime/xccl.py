"""The "xccl" collective backend: runtime.collectives' Communicator over BKCL.

`runtime.collectives.init(..., backend="xccl")` lands in `init` here (the kunlun plugin lists this
module in `collective_backends`). Rank 0 of each group takes a BKCLUniqueId from
bkcl_get_unique_id and puts it in the TCPStore the module already uses; the others read it there;
every member then calls bkcl_init_rank. The communicator subclasses `Communicator` and replaces
only its backend primitives, so group ranks, padding of uneven sizes, "avg" (a sum, then a divide
on the host: BKCL has no AVG), arrival keys and timeouts that name the missing ranks are the
same code as for gloo/nccl.

Tensors are host tensors, as everywhere else in this target: each op copies its input into device
memory (xpu_memcpy), enqueues the BKCL call on the communicator's XPU stream, and a waiter thread
waits for the stream and copies the result back, so `wait()` can give up at the deadline. On a
timeout the BKCL context is aborted (bkcl_comm_abort), which frees the waiter; the communicator
is then unusable, as a torch process group is after a timeout. Nothing here has run on a Kunlun
device: see docs/kunlun.md, "Runtime binding".
"""
from __future__ import annotations

import threading

import torch

from runtime.collectives import BackendUnavailable, Communicator
from runtime.device import get_device

from . import bkcl
from .device import KunlunDevice


def available() -> tuple[bool, str]:
    return bkcl.available()


def init(rank: int, world: int, *, store, timeout: float, device: int | None = None) -> "XcclCommunicator":
    b = bkcl.load()
    dev = get_device("kunlun")
    if not isinstance(dev, KunlunDevice):
        raise BackendUnavailable(f"backend 'xccl' needs the kunlun target's XPU device, but its device "
                                 f"backend is {type(dev).__name__}")
    index = rank % max(dev.device_count(), 1) if device is None else device
    dev.set_device(index)
    # every init on this store gets fresh keys: each rank counts its own inits, in step with the others
    gen = store.add(f"tj/bkcl/inits/{rank}", 1)
    ctx = _init_context(b, dev, index, store, f"{gen}/world", rank, world)
    return XcclCommunicator(store, tuple(range(world)), "world", timeout, global_rank=rank, bkcl=b,
                            device=dev, index=index, ctx=ctx, gen=gen)


def _init_context(b: bkcl.Bkcl, dev, index: int, store, key: str, rank: int, nranks: int) -> int:
    key = f"tj/bkcl/uid/{key}"
    if rank == 0:
        uid = b.get_unique_id()
        store.set(key, uid)
    else:
        uid = bytes(store.get(key))         # blocks until rank 0 has set it (the store's timeout)
    dev.rt.set_device(index)
    return b.init_rank(rank, nranks, uid)


class _Work:
    """One enqueued BKCL op: a waiter thread waits for the stream, then copies results to the
    host and frees the staging memory. wait(timedelta) / is_completed() as CommHandle expects."""

    def __init__(self, comm: "XcclCommunicator", op: str, downloads, buffers):
        self.comm, self.op = comm, op
        self._downloads, self._buffers = downloads, buffers
        self._error: BaseException | None = None
        self._done = threading.Event()
        rt = comm.device.rt
        self._event = rt.event_create() if "xpu_event_wait" in rt.optional else None
        if self._event is not None:
            rt.event_record(self._event, comm.stream)
        threading.Thread(target=self._run, name=f"tilejit-xccl-{op}", daemon=True).start()

    def _run(self) -> None:
        dev, rt = self.comm.device, self.comm.device.rt
        try:
            rt.set_device(self.comm.index)
            if self._event is None or not rt.event_wait(self._event):
                rt.wait(self.comm.stream)     # waits for later ops on the stream too
            for host, buf in self._downloads:
                dev.memcpy(host, buf)
        except BaseException as e:  # noqa: BLE001 - re-raised by wait()
            self._error = e
        finally:
            # only now: BKCL may use the staging memory until the stream has passed this op
            cleanup = [lambda b=b: dev.free(b) for b in self._buffers]
            if self._event is not None:
                cleanup.append(lambda: rt.event_destroy(self._event))
            for step in cleanup:
                try:
                    step()
                except Exception as e:  # noqa: BLE001 - the first failure is the one reported
                    self._error = self._error or e
            self._done.set()

    def is_completed(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout) -> None:
        if not self._done.wait(timeout.total_seconds()):
            self.comm.abort()
            raise TimeoutError(f"BKCL {self.op} timed out (communicator timeout {self.comm.timeout} s); "
                               "the BKCL context was aborted")
        if self._error is not None:
            raise self._error


class XcclCommunicator(Communicator):
    def __init__(self, store, ranks, name, timeout, *, global_rank, bkcl, device, index, ctx, gen,
                 parent=None):
        super().__init__(store, None, ranks, name, timeout, global_rank=global_rank)
        self.bkcl, self.device, self.index, self.ctx, self._gen = bkcl, device, index, ctx, gen
        self._parent, self._children, self._splits = parent, [], 0
        self._aborted = self._closed = False
        device.rt.set_device(index)
        self.stream = device.rt.stream_create()

    # -- staging ------------------------------------------------------------------------------
    def _host(self, t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"xccl communicator '{self.name}': tensors must be contiguous host tensors, "
                             f"got {t.device} {'contiguous' if t.is_contiguous() else 'non-contiguous'}")
        bkcl.dtype_name(t.dtype)             # an unsupported dtype fails before anything is enqueued
        return t

    def _upload(self, t: torch.Tensor):
        buf = self.device.malloc(self._host(t).numel() * t.element_size(), self.index)
        self.device.memcpy(buf, t)
        return buf

    def _alloc(self, t: torch.Tensor):
        return self.device.malloc(self._host(t).numel() * t.element_size(), self.index)

    def _enqueue(self, what: str, call, downloads, buffers, /, **args) -> _Work:
        """call(ctx, stream=..., **args) on this communicator's context and stream; `downloads`
        are (host tensor, device buffer) pairs copied back once the stream has passed the op."""
        self.device.rt.set_device(self.index)
        try:
            call(self.ctx, stream=self.stream, **args)
        except BaseException:
            for buf in buffers:
                self.device.free(buf)
            raise
        return _Work(self, what, downloads, buffers)

    # -- backend primitives (see Communicator) --------------------------------------------------
    def _c_all_reduce(self, t, op):
        send, recv = self._upload(t), self._alloc(t)
        return self._enqueue("all_reduce", self.bkcl.all_reduce, [(t, recv)], [send, recv],
                             send=send.ptr, recv=recv.ptr, count=t.numel(), dtype=t.dtype, op=op)

    def _c_all_gather(self, out, t):
        send, recv = self._upload(t), self._alloc(out)
        return self._enqueue("all_gather", self.bkcl.all_gather, [(out, recv)], [send, recv],
                             send=send.ptr, sendcount=t.numel(), recv=recv.ptr, dtype=t.dtype)

    def _c_reduce_scatter(self, out, src, op):
        send, recv = self._upload(src), self._alloc(out)
        return self._enqueue("reduce_scatter", self.bkcl.reduce_scatter, [(out, recv)], [send, recv],
                             send=send.ptr, recv=recv.ptr, recvcount=out.numel(), dtype=out.dtype, op=op)

    def _c_broadcast(self, t, src):
        send, recv = self._upload(t), self._alloc(t)
        return self._enqueue("broadcast", self.bkcl.broadcast, [(t, recv)], [send, recv],
                             send=send.ptr, recv=recv.ptr, count=t.numel(), dtype=t.dtype, root=src)

    def _c_barrier(self):
        # the public BKCL callers use no barrier: a one-element all_reduce stands in for it
        one = torch.zeros(1, dtype=torch.int32)
        send, recv = self._upload(one), self._alloc(one)
        return self._enqueue("barrier", self.bkcl.all_reduce, [], [send, recv],
                             send=send.ptr, recv=recv.ptr, count=1, dtype=torch.int32, op="sum")

    def _c_p2p(self, t, peer, sending):
        # the peer is a rank of this group's BKCL context, i.e. a group rank
        if sending:
            buf = self._upload(t)
            return self._enqueue("send", self.bkcl.send, [], [buf],
                                 buf=buf.ptr, count=t.numel(), peer=peer, dtype=t.dtype)
        buf = self._alloc(t)
        return self._enqueue("recv", self.bkcl.recv, [(t, buf)], [buf],
                             buf=buf.ptr, count=t.numel(), peer=peer, dtype=t.dtype)

    # -- groups and lifetime --------------------------------------------------------------------
    def split(self, layout) -> dict[str, "XcclCommunicator"]:
        """Like Communicator.split; each group gets its own BKCL context (unique id through the
        store). Every rank must call it, with the same layout; each joins only its own groups, in
        the order tp, dp, pp, which cannot deadlock since groups of one kind are disjoint."""
        if layout.world != self.size or self._parent is not None:
            raise ValueError(f"split: the layout is for world={layout.world}, but this communicator is "
                             f"group '{self.name}' of {self.size} ranks; split the world communicator")
        self._splits += 1
        mine = {}
        for kind, groups in layout.all_groups().items():
            for idx, ranks in enumerate(groups):
                if self.global_rank not in ranks:
                    continue
                name = f"{kind}{idx}"
                ctx = _init_context(self.bkcl, self.device, self.index, self.store,
                                    f"{self._gen}/split{self._splits}/{name}", ranks.index(self.global_rank),
                                    len(ranks))
                child = XcclCommunicator(self.store, tuple(ranks), name, self.timeout,
                                         global_rank=self.global_rank, bkcl=self.bkcl, device=self.device,
                                         index=self.index, ctx=ctx, gen=self._gen, parent=self)
                self._children.append(child)
                mine[kind] = child
        return mine

    def abort(self) -> None:
        """bkcl_comm_abort: ends what is in flight on this context; the communicator is unusable after."""
        if not self._aborted and not self._closed:
            self._aborted = True
            self.bkcl.comm_abort(self.ctx)

    def close(self) -> None:
        """Destroys this context and those made by split() (call on the world communicator)."""
        for child in self._children:
            child.close()
        if self._closed:
            return
        self._closed = True
        rt = self.device.rt
        rt.set_device(self.index)
        if not self._aborted:               # an aborted context is already released
            self.bkcl.destroy_context(self.ctx)
        rt.stream_destroy(self.stream)

    def __repr__(self):
        return f"<XcclCommunicator {self.name} rank {self.rank}/{self.size} (global {self.global_rank})>"
