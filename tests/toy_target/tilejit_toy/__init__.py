"""A toy target: the cpu target's renderer, toolchain and launcher under the name `toy`, with its
own device backend. It touches nothing in compiler/, kernels/ or runtime/: everything comes in
through the plugin object named by its entry point.

`toy_future` is the same target declaring a C++ compiler newer than any that exists, so loading
it must be refused with a clear message before anything is compiled."""
from __future__ import annotations

from compiler.target import Requirement, TargetPlugin, command_version
from runtime.device import DeviceProperties
from targets.cpu import CPUTarget, toolchain
from targets.cpu.device import CPUDevice

built: list[str] = []     # kernels this target built in this process (the tests read it)


class ToyTarget(CPUTarget):
    name = "toy"

    def fingerprint(self) -> dict:
        # its own cache entries: a toy binary must never be served to the cpu target or back
        return {**super().fingerprint(), "target": "toy"}

    def build(self, fn, source, out_dir):
        built.append(fn.name)
        return {**super().build(fn, source, out_dir), "target": "toy"}


class ToyDevice(CPUDevice):
    """The host again, under another name."""

    def _properties(self, index: int) -> DeviceProperties:
        p = super()._properties(index)
        return DeviceProperties(self.target, index, f"toy on {p.name}", p.kind, p.total_memory, p.compute_units)


def _cxx():
    return command_version(toolchain.find_compiler())


class ToyPlugin(TargetPlugin):
    name = "toy"
    version = "0.0.1"
    device_kinds = ("cpu",)
    capabilities = ("run", "fast", "strict")
    requirements = (Requirement("C++ compiler", "9.0", _cxx, hint="install g++ >= 9"),)
    device_backend = ToyDevice

    def available(self) -> tuple[bool, str]:
        return (True, "") if toolchain.find_compiler() else (False, "no C++ compiler")

    def create(self, variant):
        return ToyTarget()


class FuturePlugin(ToyPlugin):
    name = "toy_future"
    requirements = (Requirement("C++ compiler", "999.1", _cxx,
                                hint="toy_future needs a compiler from the future; use the 'toy' target"),)


TARGET = ToyPlugin()
FUTURE_TARGET = FuturePlugin()
