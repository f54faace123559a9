"""The rendered sources of the example kernels and of each library op's default config equal the
golden ones under tests/golden/ (tests/golden_sources.py says what they are and how to rewrite
them after a deliberate change). Rendering only: no toolchain."""
from __future__ import annotations

import difflib

import pytest

import golden_sources as G

pytestmark = pytest.mark.no_toolchain

UPDATE = "python tests/golden_sources.py"


def _diff(want: dict, got: dict) -> str:
    if set(want) != set(got):
        return f"kernels launched: {sorted(got)}\ngolden files:     {sorted(want)}"
    name = next(n for n in got if got[n] != want[n])
    lines = list(difflib.unified_diff(want[name].splitlines(), got[name].splitlines(), f"golden/{name}",
                                      f"rendered/{name}", lineterm="", n=2))
    return "\n".join(lines[:80] + (["..."] if len(lines) > 80 else []))


@pytest.mark.parametrize("target", list(G.TARGETS))
@pytest.mark.parametrize("case", G.cases())
def test_rendered_source_is_the_golden_one(case, target):
    want, got = G.stored(case, target), G.render(case, target)
    assert want, f"no golden source for {case} on {target}: `{UPDATE}` writes it"
    assert got == want, (f"{case} on {target} renders other sources than tests/golden holds. If the change "
                         f"is deliberate, run `{UPDATE}` and review `git diff tests/golden`.\n{_diff(want, got)}")


def test_every_golden_file_belongs_to_a_case():
    names = {p.name.split(".")[0] + "." + p.name.split(".")[1] for p in G.GOLDEN.rglob("*") if p.is_file()}
    assert names <= set(G.cases()), f"stale golden files of {sorted(names - set(G.cases()))}: `{UPDATE}` removes them"
    assert {p.name for p in G.GOLDEN.iterdir()} == {d for d, _ in G.TARGETS.values()}


def test_rendering_twice_gives_the_same_text():
    """What the golden files rely on: a second render in this process (after every other case)
    is byte-equal to the first (no counters or set orders leak into names)."""
    assert G.render("ops.rms_norm", "kunlun:xpu3") == G.render("ops.rms_norm", "kunlun:xpu3")
