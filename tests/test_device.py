"""runtime.device on the cpu target: properties, current device, malloc/free/memcpy in every
direction, and DeviceError carrying the target's own code and message."""
import errno

import pytest
import torch

from runtime import DeviceError, InvalidFreeError, OutOfMemoryError
from runtime.device import Device, get_device, register_device_backend
from targets.cpu.device import CPUDevice, read_meminfo

pytestmark = pytest.mark.no_toolchain


@pytest.fixture
def dev():
    return get_device("cpu")


def test_cpu_device_from_plugin(dev):
    assert isinstance(dev, CPUDevice) and get_device("cpu") is dev and dev.device_count() == 1
    p = dev.properties()
    assert p.kind == "cpu" and p.compute_units >= 1 and p.total_memory > 0 and p.name
    free, total = dev.mem_get_info()
    assert 0 < free <= total == p.total_memory
    if read_meminfo():
        assert abs(free - read_meminfo()["MemAvailable"]) < total // 10


def test_current_device(dev):
    assert dev.current_device() == 0
    dev.set_device(0)
    with dev.use(0):
        assert dev.current_device() == 0
    with pytest.raises(DeviceError) as e:
        dev.set_device(1)
    assert e.value.code == errno.ENODEV and e.value.message == "No such device" and e.value.target == "cpu"
    assert "device 1 does not exist; cpu has 1 device(s)" in str(e.value)


def test_malloc_memcpy_round_trip(dev):
    x = torch.randn(64, 33)
    a, b = dev.malloc(x.numel() * 4), dev.malloc(x.numel() * 4)
    before = dev.memory_allocated()
    dev.memcpy(a, x)                                     # host -> device
    dev.memcpy(b, a)                                     # device -> device
    y = torch.empty_like(x)
    dev.memcpy(y, b)                                     # device -> host
    assert torch.equal(x, y)
    assert torch.equal(b.tensor(torch.float32, x.shape), x)
    # partial copies with offsets, bytes-like host memory
    dev.memcpy(a, b"\x01\x02\x03\x04", dst_offset=8)
    out = bytearray(4)
    dev.memcpy(out, a, 4, src_offset=8)
    assert out == b"\x01\x02\x03\x04"
    dev.synchronize()
    dev.free(a)
    dev.free(b)
    assert dev.memory_allocated() == before - 2 * x.numel() * 4


def test_device_errors_carry_code_and_message(dev):
    a = dev.malloc(16)
    with pytest.raises(DeviceError) as e:
        dev.memcpy(a, torch.zeros(8))                   # 32 bytes into 16
    assert e.value.code == errno.EINVAL and e.value.op == "memcpy" and "overflow a destination of 16 bytes" in str(e.value)
    with pytest.raises(DeviceError, match="read-only"):
        dev.memcpy(b"abcd", a, 4)
    with pytest.raises(DeviceError, match="contiguous CPU tensor"):
        dev.memcpy(a, torch.zeros(8, 2)[:, 0])
    dev.free(a)
    with pytest.raises(InvalidFreeError, match="double free") as e:
        dev.free(a)
    assert e.value.code == errno.EINVAL
    with pytest.raises(DeviceError, match="after free") as e:
        dev.memcpy(torch.zeros(4, dtype=torch.uint8), a, 4)
    assert e.value.code == errno.EFAULT
    with pytest.raises(DeviceError) as e:
        dev.malloc(-1)
    assert e.value.code == errno.EINVAL
    with pytest.raises(OutOfMemoryError) as e:
        dev.malloc(1 << 62)                              # the allocator's own errno and text survive
    assert e.value.code == errno.ENOMEM and e.value.request == 1 << 62 and e.value.message
    assert isinstance(e.value, MemoryError)


def test_stream_hook():
    class NoStreams(CPUDevice):
        stream_class = None
    with pytest.raises(DeviceError, match="has no stream support") as e:
        NoStreams("nostreams").stream()
    assert e.value.code == errno.ENOSYS

    class Recorder:
        synced = []

        def __init__(self, device, **kw):
            self.device, self.kw = device, kw

        @classmethod
        def synchronize_device(cls, dev, index):
            cls.synced.append((dev.target, index))

    class Hooked(CPUDevice):
        stream_class = Recorder
    d = Hooked("hooked")
    s = d.stream(name="comm")
    assert isinstance(s, Recorder) and s.device == "cpu" and s.kw == {"name": "comm"}
    d.synchronize()
    assert Recorder.synced == [("hooked", 0)]

    class Missing(CPUDevice):
        stream_class = "no_such_module_xyz:Stream"
    with pytest.raises(DeviceError, match="failed to load"):
        Missing("missing").stream()
    Missing("missing").synchronize()         # streams that cannot exist need no waiting


def test_backend_registry():
    class Two(CPUDevice):
        def device_count(self):
            return 2
    register_device_backend("twohost", Two)
    register_device_backend("twohost", Two)              # twice: harmless
    d = get_device("twohost")
    assert isinstance(d, Device) and d.target == "twohost" and d.device_count() == 2
    with d.use(1):
        assert d.current_device() == 1
        assert d.malloc(8).index == 1
    assert d.current_device() == 0
    with pytest.raises(DeviceError) as e:
        get_device("no_such_target")
    assert e.value.code == errno.ENODEV and "unknown target 'no_such_target'" in str(e.value)


def test_gpu_target_has_a_device_backend_that_reports_missing_devices_clearly():
    """Without a GPU the gpu target's device backend exists, counts 0 devices, and refuses work
    with DeviceError(ENODEV) naming the target (the CUDA paths themselves need a GPU)."""
    import errno

    import torch

    from runtime import DeviceError, get_device

    dev = get_device("gpu")
    assert dev.kind == "cuda"
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: this test covers the no-device path")
    assert dev.device_count() == 0
    with pytest.raises(DeviceError) as ei:
        dev.malloc(16, device=0)
    assert ei.value.code == errno.ENODEV and "gpu" in str(ei.value)
