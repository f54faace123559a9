"""ctypes binding over BKCL, Kunlun's collective library (libbkcl, `xpu/bkcl.h`).

Bound by the real names. BKCL's argument orders differ from NCCL's in two places, so every
wrapper here takes keyword arguments and passes them on in the header's order:
`bkcl_all_gather(ctx, send, sendcount, recv, dtype, stream)` (count before the receive buffer)
and `bkcl_send/recv(ctx, buf, count, peer, dtype, stream)` (dtype after peer). Dtype and
reduction enumerators (BKCL_FLOAT, BKCL_ADD, ...) come from the installed header through
sdk_probe; BKCL has no AVG (the communicator divides after a sum). A nonzero BKCLResult_t becomes
a `BkclError` (a runtime CollectiveError) naming the call and the code: the public BKCL callers
(docs/kunlun.md, Sources) use no BKCL error-string function.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from ctypes import POINTER, c_int, c_size_t, c_void_p

import torch

from runtime.collectives import CollectiveError

from ..build import sdk, sdk_probe
from . import xpurt

SIGNATURES = {
    "bkcl_get_unique_id": [c_void_p],                                   # (BKCLUniqueId*)
    "bkcl_init_rank": [POINTER(c_void_p), c_int, c_int, c_void_p],      # (&ctx, rank, nranks, &id)
    "bkcl_destroy_context": [c_void_p],
    "bkcl_comm_abort": [c_void_p],
    # (ctx, send, recv, count, dtype, op, stream)
    "bkcl_all_reduce": [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
    # (ctx, send, recv, count, dtype, root, stream)
    "bkcl_broadcast": [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
    # (ctx, send, recv, recvcount, dtype, op, stream)
    "bkcl_reduce_scatter": [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
    # (ctx, send, sendcount, recv, dtype, stream): NOT NCCL's order
    "bkcl_all_gather": [c_void_p, c_void_p, c_size_t, c_void_p, c_int, c_void_p],
    # (ctx, buf, count, peer, dtype, stream): dtype after peer
    "bkcl_send": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
    "bkcl_recv": [c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
    "bkcl_group_start": [],
    "bkcl_group_end": [],
}

# keyed by name so that nothing depends on enum values; values come from the header
DTYPES = {torch.float32: "BKCL_FLOAT", torch.float16: "BKCL_FLOAT16", torch.bfloat16: "BKCL_BFLOAT16",
          torch.int32: "BKCL_INT32", torch.int64: "BKCL_INT64", torch.uint8: "BKCL_UINT8"}
OPS = {"sum": "BKCL_ADD", "prod": "BKCL_PRODUCT", "max": "BKCL_MAX", "min": "BKCL_MIN"}
CONSTANTS = {n: n for n in [*DTYPES.values(), *OPS.values()]} | \
    {"sizeof(BKCLUniqueId)": "sizeof(BKCLUniqueId)", "sizeof(BKCLContext_t)": "sizeof(BKCLContext_t)"}
REQUIRED_CONSTANTS = {"BKCL_FLOAT", "BKCL_ADD", "sizeof(BKCLUniqueId)", "sizeof(BKCLContext_t)"}


class BkclError(CollectiveError):
    """A BKCL call returned nonzero: `call` and `code` (its BKCLResult_t)."""

    def __init__(self, call: str, code: int):
        self.call, self.code = call, code
        super().__init__(f"{call} returned BKCLResult_t {code}", op=call)


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise TypeError(f"BKCL has no type for {dtype}; supported: "
                        f"{', '.join(str(d).removeprefix('torch.') for d in DTYPES)}") from None


def op_name(op: str) -> str:
    try:
        return OPS[op]
    except KeyError:
        raise ValueError(f"BKCL has no reduction {op!r}; supported: {', '.join(OPS)} "
                         "(avg is a sum followed by a divide)") from None


class Bkcl:
    """BKCL calls with keyword arguments; pointers, contexts and streams are ints."""

    def __init__(self, lib, consts: dict[str, int | None], path: str = ""):
        self.lib, self.consts, self.path = lib, consts, path
        xpurt.bind(lib, SIGNATURES)
        size = consts.get("sizeof(BKCLContext_t)")
        if size is not None and size != ctypes.sizeof(c_void_p):
            raise xpurt.SdkUnavailable(f"BKCLContext_t is {size} bytes in the installed header, "
                                       "not a pointer")
        self.unique_id_size = consts["sizeof(BKCLUniqueId)"]

    def _const(self, name: str) -> int:
        value = self.consts.get(name)
        if value is None:
            raise xpurt.SdkUnavailable(f"{name} is not defined by the installed xpu/bkcl.h")
        return value

    def dtype(self, dtype: torch.dtype) -> int:
        return self._const(dtype_name(dtype))

    def op(self, op: str) -> int:
        return self._const(op_name(op))

    def _call(self, name: str, *args) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            raise BkclError(name, rc)

    # -- contexts -----------------------------------------------------------------------------
    def get_unique_id(self) -> bytes:
        buf = ctypes.create_string_buffer(self.unique_id_size)
        self._call("bkcl_get_unique_id", ctypes.cast(buf, c_void_p))
        return buf.raw

    def init_rank(self, rank: int, nranks: int, unique_id: bytes) -> int:
        if len(unique_id) != self.unique_id_size:
            raise ValueError(f"a BKCLUniqueId is {self.unique_id_size} bytes, got {len(unique_id)}")
        uid = ctypes.create_string_buffer(unique_id, self.unique_id_size)
        ctx = c_void_p(None)
        self._call("bkcl_init_rank", ctypes.byref(ctx), rank, nranks, ctypes.cast(uid, c_void_p))
        return ctx.value or 0

    def destroy_context(self, ctx: int) -> None:
        self._call("bkcl_destroy_context", ctx)

    def comm_abort(self, ctx: int) -> None:
        self._call("bkcl_comm_abort", ctx)

    # -- collectives (counts are elements) ----------------------------------------------------
    def all_reduce(self, ctx, *, send, recv, count, dtype, op, stream) -> None:
        self._call("bkcl_all_reduce", ctx, send, recv, count, self.dtype(dtype), self.op(op), stream)

    def broadcast(self, ctx, *, send, recv, count, dtype, root, stream) -> None:
        self._call("bkcl_broadcast", ctx, send, recv, count, self.dtype(dtype), root, stream)

    def reduce_scatter(self, ctx, *, send, recv, recvcount, dtype, op, stream) -> None:
        self._call("bkcl_reduce_scatter", ctx, send, recv, recvcount, self.dtype(dtype), self.op(op), stream)

    def all_gather(self, ctx, *, send, sendcount, recv, dtype, stream) -> None:
        self._call("bkcl_all_gather", ctx, send, sendcount, recv, self.dtype(dtype), stream)

    def send(self, ctx, *, buf, count, peer, dtype, stream) -> None:
        self._call("bkcl_send", ctx, buf, count, peer, self.dtype(dtype), stream)

    def recv(self, ctx, *, buf, count, peer, dtype, stream) -> None:
        self._call("bkcl_recv", ctx, buf, count, peer, self.dtype(dtype), stream)

    def group_start(self) -> None:
        self._call("bkcl_group_start")

    def group_end(self) -> None:
        self._call("bkcl_group_end")


def available() -> tuple[bool, str]:
    """(True, '') when libbkcl, xpu/bkcl.h and the runtime binding are all present; otherwise
    (False, what is missing and which environment variable to set)."""
    return sdk.bkcl_available()


_load_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _load() -> Bkcl:
    comp, why = sdk.find_bkcl()
    if comp is None:
        raise xpurt.SdkUnavailable(f"BKCL binding: {why}")
    xpurt.load()                      # libxpurt first, loaded globally: libbkcl depends on it
    include_dirs = list(dict.fromkeys([comp.include_dir, *_runtime_include()]))
    consts = sdk_probe.probe(["xpu/bkcl.h"], include_dirs, CONSTANTS, REQUIRED_CONSTANTS)
    return Bkcl(ctypes.CDLL(comp.library, mode=ctypes.RTLD_GLOBAL), consts, comp.library)


def _runtime_include() -> list[str]:
    comp, _ = sdk.find_runtime()
    return [comp.include_dir] if comp else []


def load() -> Bkcl:
    """The process-wide BKCL binding (raises SdkUnavailable saying what is missing)."""
    ok, why = available()
    if not ok:
        raise xpurt.SdkUnavailable(why)
    with _load_lock:
        return _load()
