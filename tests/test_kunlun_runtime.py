"""The kunlun runtime binding (libxpurt, libbkcl) on a machine without the Kunlun SDK.

What runs here, honestly:
- without the SDK, the bindings say they are unavailable and why (the library, where it was
  looked for, the environment variable to set); the plugin keeps the host-emulation device; the
  "xccl" collective backend raises BackendUnavailable naming libbkcl.so and XTDK_DIR;
- the enum shim machinery (compile a probe against headers, run it, cache the values, report
  missing names) against the system's <errno.h> and a header this test writes itself: never
  against anything presented as an SDK header;
- our argument marshalling, by binding to a recording stub: a small C library compiled here that
  exports the binding's function names, records the arguments each call receives and returns
  what the test asks for. It is NOT the SDK and checks nothing about the SDK's behaviour: it
  shows that the Python side passes arguments in the order and with the enum values we intend
  (BKCL's all_gather count-before-recv, send/recv dtype-after-peer, ...). The enum values given
  to it are arbitrary distinct numbers chosen here so that each argument is identifiable.
"""
from __future__ import annotations

import ctypes
import errno
import shutil
import subprocess

import pytest
import torch
import torch.distributed as dist

from runtime.collectives import BackendUnavailable, CollectiveTimeout, init, resolve_backend
from runtime.device import get_device
from runtime.errors import DeviceError
from targets.cpu import toolchain as cpu_toolchain
from targets.cpu.device import CPUDevice
from targets.kunlun import TARGET
from targets.kunlun.build import sdk, sdk_probe
from targets.kunlun.runtime import bkcl, xpurt
from targets.kunlun.runtime.device import KunlunDevice, generation
from targets.kunlun.runtime.xccl import XcclCommunicator

pytestmark = pytest.mark.no_toolchain

# -- without the SDK ------------------------------------------------------------------------------


@pytest.fixture
def no_sdk(tmp_path, monkeypatch):
    """XTDK_DIR points at an empty dir, no component roots, and no clang++ on PATH."""
    cpu_toolchain.find_compiler()           # cached before PATH is emptied
    empty = tmp_path / "empty"
    (empty / "bin").mkdir(parents=True)
    monkeypatch.setenv("XTDK_DIR", str(empty))
    monkeypatch.delenv("XRE_DIR", raising=False)
    monkeypatch.delenv("BKCL_DIR", raising=False)
    monkeypatch.setenv("PATH", str(empty / "bin"))
    return empty


def test_without_sdk_bindings_say_what_is_missing(no_sdk):
    ok, why = xpurt.available()
    assert not ok
    assert "libxpurt.so not found" in why and f"XTDK_DIR={no_sdk}" in why and "set XTDK_DIR" in why
    assert "XRE_DIR" in why and "include/xpu/runtime.h" in why
    ok, why = bkcl.available()
    assert not ok and "libbkcl.so not found" in why and "BKCL_DIR" in why and "libxpurt.so" in why
    with pytest.raises(xpurt.SdkUnavailable, match="libxpurt.so not found"):
        xpurt.load()
    with pytest.raises(xpurt.SdkUnavailable, match="libbkcl.so not found"):
        bkcl.load()


def test_without_sdk_the_plugin_keeps_host_emulation(no_sdk):
    assert TARGET.device_backend == "targets.cpu.device:CPUDevice"
    assert TARGET.available() == (True, "")          # the host compiler runs the emulation
    assert isinstance(get_device("kunlun"), CPUDevice)


def test_xccl_backend_unavailable_names_the_library(no_sdk):
    for name in ("xccl", "bkcl"):
        with pytest.raises(BackendUnavailable) as e:
            resolve_backend(name)
        assert "libbkcl.so not found" in str(e.value) and "XTDK_DIR" in str(e.value)
    with pytest.raises(BackendUnavailable, match="libbkcl.so"):
        init(0, 1, backend="xccl", port=1)           # refused before any store is created


def test_library_without_its_header_is_not_used(tmp_path, monkeypatch):
    """Only a directory layout: an empty file where the library would be and no header. Nothing
    is loaded or compiled; the finder must refuse it, since enum values come from the header."""
    cpu_toolchain.find_compiler()
    root = tmp_path / "xre"
    (root / "so").mkdir(parents=True)
    (root / "so" / "libxpurt.so").write_bytes(b"")
    monkeypatch.setenv("XRE_DIR", str(root))
    monkeypatch.delenv("XTDK_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    comp, why = sdk.find_runtime()
    assert comp is None
    assert f"{root}/so/libxpurt.so is there but {root}/include/xpu/runtime.h is not" in why
    assert xpurt.available()[0] is False


# -- the enum shim machinery ----------------------------------------------------------------------


@pytest.fixture
def probe_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "kunlun-sdk"


@pytest.mark.skipif(cpu_toolchain.find_compiler() is None, reason="no host C++ compiler")
def test_probe_reads_constants_from_installed_headers(probe_cache):
    vals = sdk_probe.probe(["cerrno", "cstdint"], [], {"EINVAL": "EINVAL", "ENOMEM": "ENOMEM",
                                                       "sizeof(int64_t)": "sizeof(int64_t)",
                                                       "ABSENT": "TJ_NOT_DEFINED_ANYWHERE"}, {"EINVAL"})
    assert vals == {"EINVAL": errno.EINVAL, "ENOMEM": errno.ENOMEM, "sizeof(int64_t)": 8, "ABSENT": None}
    with pytest.raises(sdk_probe.ProbeError, match="do not define TJ_MISSING"):
        sdk_probe.probe(["cerrno"], [], {"TJ_MISSING": "TJ_NOT_DEFINED_ANYWHERE"}, {"TJ_MISSING"})


@pytest.mark.skipif(cpu_toolchain.find_compiler() is None, reason="no host C++ compiler")
def test_probe_is_cached_and_keyed_by_the_headers(tmp_path, probe_cache, monkeypatch):
    inc = tmp_path / "inc"
    inc.mkdir()
    header = inc / "tj_probe_test.h"        # this test's own header
    header.write_text("enum { TJ_A = 7, TJ_B = -3 };\n")
    exprs = {"TJ_A": "TJ_A", "TJ_B": "TJ_B"}
    assert sdk_probe.probe(["tj_probe_test.h"], [str(inc)], exprs) == {"TJ_A": 7, "TJ_B": -3}
    assert len(list(probe_cache.glob("*.json"))) == 1
    real_run = subprocess.run

    def no_compiler(cmd, *a, **kw):
        if cmd and cmd[0] == cpu_toolchain.find_compiler():
            raise AssertionError("compiled again although the headers did not change")
        return real_run(cmd, *a, **kw)
    monkeypatch.setattr(sdk_probe.subprocess, "run", no_compiler)
    assert sdk_probe.probe(["tj_probe_test.h"], [str(inc)], exprs) == {"TJ_A": 7, "TJ_B": -3}
    monkeypatch.setattr(sdk_probe.subprocess, "run", real_run)
    header.write_text("enum { TJ_A = 8, TJ_B = -3 };  /* changed */\n")
    assert sdk_probe.probe(["tj_probe_test.h"], [str(inc)], exprs)["TJ_A"] == 8


# -- argument marshalling, against a recording stub (see the module docstring) ----------------------

STUB_C = r"""
/* Recording stub for tests of tilejit's ctypes marshalling. Not the Kunlun SDK. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct { char name[32]; int n; uint64_t a[8]; } entry;
static entry log_[256];
static int count_, next_rc_;
static volatile int block_wait_;
static unsigned char blob_[16];
static uint64_t next_ptr_ = 0x100000;
static char err_[64];

static int rec(const char *name, int n, const uint64_t *a) {
  if (count_ < 256) {
    entry *e = &log_[count_++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->n = n;
    for (int i = 0; i < n; i++) e->a[i] = a[i];
  }
  int rc = next_rc_;
  next_rc_ = 0;
  return rc;
}
#define U(x) ((uint64_t)(uintptr_t)(x))
#define I(x) ((uint64_t)(int64_t)(x))
#define REC(...) { uint64_t a_[] = {__VA_ARGS__}; return rec(__func__, (int)(sizeof a_ / sizeof a_[0]), a_); }

void stub_reset(void) { count_ = 0; next_rc_ = 0; block_wait_ = 0; }
void stub_fail_next(int rc) { next_rc_ = rc; }
void stub_block_wait(int on) { block_wait_ = on; }
int stub_count(void) { return count_; }
int stub_entry(int i, char *name, uint64_t *a) { strcpy(name, log_[i].name); memcpy(a, log_[i].a, sizeof log_[i].a); return log_[i].n; }
void stub_blob(unsigned char *out) { memcpy(out, blob_, sizeof blob_); }

const char *xpu_strerror(int code) { snprintf(err_, sizeof err_, "stub error %d", code); return err_; }
int xpu_device_count(int *n) { *n = 2; REC(U(n)) }
int xpu_set_device(int d) { REC(I(d)) }
int xpu_current_device(int *d) { *d = 1; REC(U(d)) }
int xpu_device_get_attr(uint64_t *v, int attr, int dev) { *v = 1000 + attr; REC(U(v), I(attr), I(dev)) }
int xpu_get_driver_version(uint32_t *ma, uint32_t *mi) { *ma = 5; *mi = 1; REC(U(ma), U(mi)) }
int xpu_get_runtime_version(uint32_t *ma, uint32_t *mi) { *ma = 4; *mi = 2; REC(U(ma), U(mi)) }
int xpu_malloc(void **p, uint64_t size, int kind) { *p = (void *)(uintptr_t)next_ptr_; next_ptr_ += 0x1000 + size; REC(U(p), size, I(kind)) }
int xpu_free(void *p) { REC(U(p)) }
int xpu_memcpy(void *d, const void *s, uint64_t n, int kind) { REC(U(d), U(s), n, I(kind)) }
int xpu_memcpy_async(void *d, const void *s, uint64_t n, int kind, void *st) { REC(U(d), U(s), n, I(kind), U(st)) }
int xpu_stream_create(void **s) { *s = (void *)0x5700; REC(U(s)) }
int xpu_stream_destroy(void *s) { REC(U(s)) }
int xpu_wait(void *s) { while (block_wait_) usleep(1000); REC(U(s)) }
int xpu_event_create(void **e) { *e = (void *)0xE700; REC(U(e)) }
int xpu_event_record(void *e, void *s) { REC(U(e), U(s)) }
int xpu_event_destroy(void *e) { REC(U(e)) }
int xpu_stream_wait_event(void *s, void *e) { REC(U(s), U(e)) }

int bkcl_get_unique_id(void *id) { for (int i = 0; i < 16; i++) ((unsigned char *)id)[i] = (unsigned char)(7 * i + 1); REC(U(id)) }
int bkcl_init_rank(void **ctx, int rank, int nranks, void *id) { memcpy(blob_, id, 16); *ctx = (void *)0xC0FFEE; REC(U(ctx), I(rank), I(nranks), U(id)) }
int bkcl_destroy_context(void *c) { REC(U(c)) }
int bkcl_comm_abort(void *c) { block_wait_ = 0; REC(U(c)) }
int bkcl_all_reduce(void *c, const void *s, void *r, size_t n, int dt, int op, void *st) { REC(U(c), U(s), U(r), n, I(dt), I(op), U(st)) }
int bkcl_broadcast(void *c, const void *s, void *r, size_t n, int dt, int root, void *st) { REC(U(c), U(s), U(r), n, I(dt), I(root), U(st)) }
int bkcl_reduce_scatter(void *c, const void *s, void *r, size_t n, int dt, int op, void *st) { REC(U(c), U(s), U(r), n, I(dt), I(op), U(st)) }
int bkcl_all_gather(void *c, const void *s, size_t n, void *r, int dt, void *st) { REC(U(c), U(s), n, U(r), I(dt), U(st)) }
int bkcl_send(void *c, const void *b, size_t n, int peer, int dt, void *st) { REC(U(c), U(b), n, I(peer), I(dt), U(st)) }
int bkcl_recv(void *c, void *b, size_t n, int peer, int dt, void *st) { REC(U(c), U(b), n, I(peer), I(dt), U(st)) }
int bkcl_group_start(void) { return rec(__func__, 0, 0); }
int bkcl_group_end(void) { return rec(__func__, 0, 0); }
"""

# arbitrary distinct test values (NOT the SDK's): each argument is identifiable in the log
RT_CONSTS = {"XPU_MEM_MAIN": 11, "XPU_MEM_L3": 12, "XPU_HOST_TO_DEVICE": 21, "XPU_DEVICE_TO_HOST": 22,
             "XPU_DEVICE_TO_DEVICE": 23, "XPUATTR_MODEL": 31, "XPUATTR_NUM_CLUSTER": 32,
             "XPUATTR_MEM_MAIN_CAPACITY": 33, "sizeof(XPUStream)": 8, "sizeof(XPUEvent)": 8}
BKCL_CONSTS = {"BKCL_FLOAT": 41, "BKCL_FLOAT16": 42, "BKCL_BFLOAT16": None, "BKCL_INT32": 44, "BKCL_INT64": 45,
               "BKCL_UINT8": 46, "BKCL_ADD": 51, "BKCL_PRODUCT": 52, "BKCL_MAX": 53, "BKCL_MIN": 54,
               "sizeof(BKCLUniqueId)": 16, "sizeof(BKCLContext_t)": 8}
H2D, D2H = 21, 22
STREAM, CTX = 0x5700, 0xC0FFEE


class Stub:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.stub_entry.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64)]

    def reset(self):
        self.lib.stub_reset()

    def calls(self) -> list[tuple]:
        out = []
        for i in range(self.lib.stub_count()):
            name, args = ctypes.create_string_buffer(32), (ctypes.c_uint64 * 8)()
            n = self.lib.stub_entry(i, name, args)
            # ints were widened as signed: show negatives as such
            out.append((name.value.decode(), *[a - (1 << 64) if a >= 1 << 63 else a for a in args[:n]]))
        return out

    def last(self) -> tuple:
        return self.calls()[-1]


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the recording stub")
    d = tmp_path_factory.mktemp("stub")
    (d / "stub.c").write_text(STUB_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", str(d / "stub.c"), "-o", str(d / "librecord.so")], check=True)
    return Stub(str(d / "librecord.so"))


@pytest.fixture
def rt(stub):
    stub.reset()
    return xpurt.XpuRuntime(stub.lib, RT_CONSTS, "recording stub")


@pytest.fixture
def bk(stub, rt):
    return bkcl.Bkcl(stub.lib, BKCL_CONSTS, "recording stub")


def test_runtime_marshalling(rt, stub):
    assert rt.device_count() == 2 and stub.last()[0] == "xpu_device_count"
    assert rt.current_device() == 1
    rt.set_device(1)
    assert stub.last() == ("xpu_set_device", 1)
    assert rt.device_attr("clusters", 1) == 1032               # (&v, attr, devid)
    assert stub.last()[2:] == (32, 1)
    assert rt.driver_version() == (5, 1) and rt.runtime_version() == (4, 2)
    p = rt.malloc(4096)                                         # (&ptr, size, XPU_MEM_MAIN)
    assert p == 0x100000 and stub.last()[2:] == (4096, 11)
    rt.malloc(64, "l3")
    assert stub.last()[3] == 12
    rt.memcpy(0x1000, 0x2000, 64, "h2d")                        # (dst, src, size, kind)
    assert stub.last() == ("xpu_memcpy", 0x1000, 0x2000, 64, H2D)
    rt.memcpy_async(0x3000, 0x4000, 8, "d2d", STREAM)
    assert stub.last() == ("xpu_memcpy_async", 0x3000, 0x4000, 8, 23, STREAM)
    s, e = rt.stream_create(), rt.event_create()
    rt.event_record(e, s)
    assert stub.last() == ("xpu_event_record", e, s)
    rt.stream_wait_event(s, e)
    assert stub.last() == ("xpu_stream_wait_event", s, e)
    rt.wait(None)
    assert stub.last() == ("xpu_wait", 0)                       # NULL: the default stream
    assert rt.event_wait(e) is False                            # the stub exports no xpu_event_wait


def test_runtime_errors_name_the_call_and_strerror(rt, stub):
    stub.lib.stub_fail_next(-701)
    with pytest.raises(xpurt.XpuError) as e:
        rt.malloc(16)
    err = e.value
    assert isinstance(err, DeviceError) and err.op == "xpu_malloc" and err.code == -701
    assert err.message == "stub error -701" and "xpu_malloc" in str(err) and "stub error -701" in str(err)


def test_enum_missing_from_the_header_is_an_error_not_a_guess(rt, bk):
    consts = dict(RT_CONSTS, XPU_MEM_L3=None)
    with pytest.raises(xpurt.SdkUnavailable, match="XPU_MEM_L3 is not defined"):
        xpurt.XpuRuntime(rt.lib, consts).malloc(16, "l3")
    with pytest.raises(xpurt.SdkUnavailable, match="BKCL_BFLOAT16 is not defined"):
        bk.all_reduce(CTX, send=1, recv=2, count=3, dtype=torch.bfloat16, op="sum", stream=STREAM)


def test_bkcl_argument_orders(bk, stub):
    bk.all_gather(CTX, send=0x10, sendcount=5, recv=0x20, dtype=torch.float16, stream=STREAM)
    assert stub.last() == ("bkcl_all_gather", CTX, 0x10, 5, 0x20, 42, STREAM)     # count before recv
    bk.send(CTX, buf=0x30, count=6, peer=3, dtype=torch.int32, stream=STREAM)
    assert stub.last() == ("bkcl_send", CTX, 0x30, 6, 3, 44, STREAM)              # dtype after peer
    bk.recv(CTX, buf=0x40, count=7, peer=2, dtype=torch.int64, stream=STREAM)
    assert stub.last() == ("bkcl_recv", CTX, 0x40, 7, 2, 45, STREAM)
    bk.all_reduce(CTX, send=0x50, recv=0x60, count=8, dtype=torch.float32, op="max", stream=STREAM)
    assert stub.last() == ("bkcl_all_reduce", CTX, 0x50, 0x60, 8, 41, 53, STREAM)
    bk.reduce_scatter(CTX, send=0x70, recv=0x80, recvcount=2, dtype=torch.uint8, op="min", stream=STREAM)
    assert stub.last() == ("bkcl_reduce_scatter", CTX, 0x70, 0x80, 2, 46, 54, STREAM)
    bk.broadcast(CTX, send=0x90, recv=0xA0, count=9, dtype=torch.float32, root=1, stream=STREAM)
    assert stub.last() == ("bkcl_broadcast", CTX, 0x90, 0xA0, 9, 41, 1, STREAM)
    bk.group_start()
    bk.group_end()
    assert [c[0] for c in stub.calls()[-2:]] == ["bkcl_group_start", "bkcl_group_end"]
    with pytest.raises(ValueError, match="avg is a sum followed by a divide"):
        bk.op("avg")
    with pytest.raises(TypeError, match="BKCL has no type for torch.float64"):
        bk.dtype(torch.float64)


def test_bkcl_unique_id_and_context(bk, stub):
    uid = bk.get_unique_id()
    assert uid == bytes(7 * i + 1 for i in range(16))          # sizeof(BKCLUniqueId) bytes, from the header
    assert bk.init_rank(1, 4, uid) == CTX
    assert stub.last()[2:4] == (1, 4)                           # (&ctx, rank, nranks, &id)
    blob = ctypes.create_string_buffer(16)
    stub.lib.stub_blob(blob)
    assert blob.raw == uid
    stub.lib.stub_fail_next(3)
    with pytest.raises(bkcl.BkclError, match="bkcl_destroy_context returned BKCLResult_t 3") as e:
        bk.destroy_context(CTX)
    assert e.value.call == "bkcl_destroy_context" and e.value.code == 3


# -- the device and the xccl communicator over the stub: which calls, in which order ---------------

@pytest.fixture
def dev(rt, monkeypatch):
    monkeypatch.setattr(xpurt, "load", lambda: rt)
    d = KunlunDevice("kunlun-stub")
    assert d.device_count() == 2                # asked once, then cached
    return d


def test_device_marshalling(dev, stub):
    assert dev.device_count() == 2
    p = dev.properties(1)
    assert (p.kind, p.total_memory, p.compute_units, p.extra["model"]) == ("xpu", 1033, 1032, 1031)
    assert p.name == "Kunlun unknown (model 1031)"             # outside the model ranges 2..599
    assert [generation(m) for m in (2, 299, 300, 599, 600)] == ["KL2", "KL2", "KL3", "KL3", "unknown"]
    stub.reset()
    buf = dev.malloc(256, 1)
    assert stub.calls() == [("xpu_set_device", 1), ("xpu_malloc", stub.calls()[1][1], 256, 11)]
    host = torch.arange(16, dtype=torch.float32)
    dev.memcpy(buf, host, 32, dst_offset=64)
    assert stub.last() == ("xpu_memcpy", buf.ptr + 64, host.data_ptr(), 32, H2D)
    dev.memcpy(host, buf, 16, src_offset=8)
    assert stub.last() == ("xpu_memcpy", host.data_ptr(), buf.ptr + 8, 16, D2H)
    with pytest.raises(DeviceError, match="not addressable from the host"):
        buf.tensor(torch.float32)
    dev.free(buf)
    assert stub.last() == ("xpu_free", buf.ptr)


def _comm(dev, bk, ranks, global_rank, timeout=5.0, store=None):
    comm = XcclCommunicator(store or dist.HashStore(), ranks, "g", timeout, global_rank=global_rank, bkcl=bk,
                            device=dev, index=0, ctx=CTX, gen=1)
    # the stub moves no data, so the ranks' call descriptors cannot be compared through it (the
    # agreement check is tested on real gloo ranks); these tests check the BKCL call sequences
    comm.check_calls = False
    return comm


def test_xccl_all_reduce_stages_through_device_memory(dev, bk, stub):
    comm = _comm(dev, bk, (0, 1), 0)
    t = torch.full((3, 4), 6.0)
    stub.reset()
    out = comm.all_reduce(t, "avg").wait()
    assert {c for c in stub.calls() if c[0] == "xpu_set_device"} == {("xpu_set_device", 0)}
    calls = [c for c in stub.calls() if c[0] != "xpu_set_device"]
    assert [c[0] for c in calls] == ["xpu_malloc", "xpu_memcpy", "xpu_malloc", "bkcl_all_reduce",
                                     "xpu_wait", "xpu_memcpy", "xpu_free", "xpu_free"]
    send, recv = calls[1][1], calls[3][3]
    assert calls[1] == ("xpu_memcpy", send, t.data_ptr(), 48, H2D)
    assert calls[3] == ("bkcl_all_reduce", CTX, send, recv, 12, 41, 51, STREAM)   # avg runs as BKCL_ADD
    assert calls[4] == ("xpu_wait", STREAM)
    assert calls[5] == ("xpu_memcpy", t.data_ptr(), recv, 48, D2H)
    assert {calls[6][1], calls[7][1]} == {send, recv}            # freed only after the stream passed
    # the stub moves no data, so t still holds 6: the divide by the group size ran after the sum
    assert out is t and torch.equal(t, torch.full((3, 4), 3.0))


def test_xccl_group_ranks_and_uneven_gather(dev, bk, stub):
    comm = _comm(dev, bk, (2, 3), 3)                 # global rank 3 is rank 1 of this group
    stub.reset()
    comm.send(torch.ones(5, dtype=torch.int32), 0).wait()
    send = next(c for c in stub.calls() if c[0] == "bkcl_send")
    assert send[3:6] == (5, 0, 44)                  # peer is the group rank 0 (global 2), dtype after
    stub.reset()
    rows = comm.all_gather(torch.ones(2, 3), sizes=[3, 2]).wait()
    ag = next(c for c in stub.calls() if c[0] == "bkcl_all_gather")
    assert ag[3] == 9                               # padded to 3 rows x 3 before the collective
    assert rows.shape == (5, 3)                     # trimmed after: 3 + 2 rows
    comm.close()
    assert stub.calls()[-2:] == [("bkcl_destroy_context", CTX), ("xpu_stream_destroy", STREAM)]


def test_xccl_timeout_aborts_and_names_the_missing_rank(dev, bk, stub):
    comm = _comm(dev, bk, (0, 1), 0, timeout=0.5)
    stub.reset()
    stub.lib.stub_block_wait(1)                     # xpu_wait blocks until bkcl_comm_abort
    with pytest.raises(CollectiveTimeout) as e:
        comm.all_reduce(torch.ones(4)).wait()
    assert e.value.missing == (1,) and "rank(s) [1] did not arrive" in str(e.value)
    assert ("bkcl_comm_abort", CTX) in stub.calls()
    comm.close()                                    # an aborted context is not destroyed again
    assert ("bkcl_destroy_context", CTX) not in stub.calls()


def test_targets_listing_shows_which_kunlun_paths_this_machine_takes():
    from targets.__main__ import describe  # noqa: PLC0415
    from targets.kunlun.build import sdk as kunlun_sdk  # noqa: PLC0415
    status = describe("kunlun")["status"]
    xtdk = kunlun_sdk.find_xtdk()
    assert status[0] == (f"build: XTDK at {xtdk}" if xtdk else
                         "build: host emulation (no XTDK: set XTDK_DIR or put its clang++ on PATH)")
    ok, why = kunlun_sdk.runtime_available()
    assert status[1] == "runtime (libxpurt): " + ("found" if ok else why)
    assert status[2].startswith("collectives (libbkcl): ")
