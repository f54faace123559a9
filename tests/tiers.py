"""Tier helpers for parametrised tests (the tiers: tests/conftest.py, docs/testing.md)."""
import pytest

# what running a kernel on a target needs: Kunlun's host emulation, or a build (C++ for cpu, the
# generated Triton module for the gpu targets)
_TIER_OF_TARGET = {"kunlun": pytest.mark.emulation}


def on_targets(*names: str) -> list:
    """`names` as pytest params, each in the tier its target needs, e.g.
    `@pytest.mark.parametrize("target", on_targets("cpu", "kunlun:xpu3"))`."""
    return [pytest.param(name, marks=_TIER_OF_TARGET.get(name.split(":")[0], pytest.mark.compile), id=name)
            for name in names]
