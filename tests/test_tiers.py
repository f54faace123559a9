"""The test suite's own tiers (tests/conftest.py, docs/testing.md): a sampled grid's default cases
cover every parameter value and the rest go to the slow tier, CI runs every tier, and the
selection flags mean what the docs say."""
import pathlib
import types

import conftest
import pytest

pytestmark = pytest.mark.no_toolchain

REPO = pathlib.Path(__file__).resolve().parents[1]


class _Case:
    """What the sampler reads of a collected test (hashed by identity, as pytest's items are)."""

    def __init__(self, name, sampled=True, **params):
        self.path, self.originalname = pathlib.Path("t.py"), name
        self.callspec = types.SimpleNamespace(params=params)
        self.sampled = sampled

    def get_closest_marker(self, name):
        return object() if name == "sampled" and self.sampled else None


def test_a_sampled_grid_keeps_every_value_in_the_fewest_cases():
    grid = [_Case("t", target=t, policy=p) for t in ("xpu3", "xpu2", "gpu") for p in ("fast", "strict")]
    rest = conftest._unsampled(grid)
    kept = [c for c in grid if c not in rest]
    assert len(kept) == 3 and len(rest) == 3
    assert {c.callspec.params["target"] for c in kept} == {"xpu3", "xpu2", "gpu"}
    assert {c.callspec.params["policy"] for c in kept} == {"fast", "strict"}


def test_sampling_is_per_test_and_leaves_unmarked_grids_whole():
    a = [_Case("a", n=n) for n in (1, 2, 3)]
    b = [_Case("b", dtype=d, n=n) for d in ("fp32", "bf16") for n in (1, 2)]
    plain = [_Case("plain", sampled=False, dtype=d, n=n) for d in ("fp32", "bf16") for n in (1, 2)]
    # a keeps its 3 values; b keeps (fp32, 1) and then (bf16, 2), the case that covers both values left
    assert conftest._unsampled(a + b + plain) == [b[1], b[2]]


def test_ci_runs_the_quick_tier_without_builds_and_then_every_other_tier():
    ci = (REPO / ".ci" / "run").read_text()
    quick, rest = ci.find("scripts/test.sh --quick"), ci.find('scripts/test.sh -m "not no_toolchain"')
    assert 0 <= quick < rest, ci   # an -m expression replaces the default selection: slow runs too
    script = (REPO / "scripts" / "test.sh").read_text()
    assert "--all) shift; select=(-m all)" in script and "TILEJIT_TEST_NO_TOOLCHAIN=1" in script


@pytest.mark.parametrize("given,selected", [("", conftest.DEFAULT_SELECTION), ("all", ""),
                                            ("emulation", "emulation"), ("not no_toolchain", "not no_toolchain")])
def test_the_marker_expression_of_a_run(given, selected):
    config = types.SimpleNamespace(option=types.SimpleNamespace(markexpr=given), addinivalue_line=lambda *a: None)
    conftest.pytest_configure(config)
    assert config.option.markexpr == selected


class _Marked:
    """What tier_of reads of a collected test: its parameter's marks and the marks up its chain."""

    def __init__(self, param=(), chain=()):
        self.callspec = types.SimpleNamespace(marks=[types.SimpleNamespace(name=n) for n in param])
        self._chain = [types.SimpleNamespace(name=n) for n in chain]

    def iter_markers(self):
        return iter(self._chain)


@pytest.mark.parametrize("param, chain, tier", [
    ((), ("integration", "compile"), "integration"),     # the test's own over its module's
    (("slow",), ("integration",), "slow"),               # a parameter moved to slow by its mark
    (("emulation",), ("compile",), "emulation"),         # a parameter's target over the module's
    (("emulation",), ("slow", "compile"), "slow"),       # what it costs over what it needs
])
def test_the_tier_of_a_test(param, chain, tier):
    assert conftest.tier_of(_Marked(param, chain)) == tier
