"""Test-session setup: the tiers, one compile cache shared by the whole session (fresh per session,
so a run starts cold and every test after the first use of a kernel hits it), and the per-test
time guard of the default tiers. docs/testing.md explains the tiers and the commands."""
import os
import pathlib
import subprocess
import tempfile

import pytest

# Every test belongs to exactly one tier, by what it needs: a module declares its tier with
# `pytestmark = pytest.mark.<tier>`, and a test may name another one for itself (the closest wins).
TIERS = {
    "no_toolchain": "needs no C++ compiler: frontend, IR, passes, plans, rendering (render_only), golden sources",
    "compile": "builds and runs kernels: C++ for the cpu target, Triton for gpu (compile-only or its interpreter)",
    "emulation": "builds and runs Kunlun kernels against the host emulation",
    "integration": "transformers models, collectives, subprocesses, caches shared between processes",
    "slow": "minutes each: fresh installs from the package index, exhaustive matrices, long fuzzing",
    "device": "needs a real GPU (skipped without one)",
}
DEFAULT_SELECTION = "not slow and not device"
# a default-tier test that costs more CPU seconds than this fails (setup and call together, with the
# processes it runs): past it, make the test cheaper or move it to the slow tier, so the suite's
# budget is not lost one test at a time. CPU time, not wall time: a busy machine does not trip it
TIME_LIMIT_S = float(os.environ.get("TILEJIT_TEST_TIME_LIMIT", "60"))

if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("TILEJIT_TEST_SESSION_CACHE"):
    # a worker of `pytest -n N`: the session's cache is the one the controller made (inherited)
    os.environ["TILEJIT_CACHE_DIR"] = os.environ["TILEJIT_TEST_SESSION_CACHE"]
elif not os.environ.get("TILEJIT_TEST_KEEP_CACHE"):
    _session_cache = tempfile.mkdtemp(prefix="tilejit-test-cache-")
    os.environ["TILEJIT_CACHE_DIR"] = os.environ["TILEJIT_TEST_SESSION_CACHE"] = _session_cache
    # the compiled launch path is built once per session, also for the subprocesses of tests that
    # start from an empty cache of their own
    os.environ.setdefault("TILEJIT_FASTPATH_DIR", _session_cache)
os.environ.setdefault("TILEJIT_TARGET", "cpu")


def pytest_configure(config):
    for name, what in TIERS.items():
        config.addinivalue_line("markers", f"{name}: tier: {what}")
    config.addinivalue_line("markers", "sampled: the default tiers run a sample of this test's parameter grid in "
                                       "which every value appears; the other cases run in the slow tier")
    if config.option.markexpr == "all":
        config.option.markexpr = ""   # every tier: nothing is deselected
    elif not config.option.markexpr:
        config.option.markexpr = DEFAULT_SELECTION
    if os.environ.get("TILEJIT_TEST_NO_TOOLCHAIN") == "1":
        # in the processes that run tests (not in a controller that starts its workers)
        if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
            _forbid_builds()


NO_TOOLCHAIN = "this test builds a kernel, but it is in the no_toolchain tier: mark it compile or emulation"


def _forbid_builds():
    """`scripts/test.sh --quick`: the no_toolchain tier runs with every kernel build refused, so a
    test that needs a compiler cannot pass there, whatever ran before it; and with no Python or
    shell subprocess (whose builds this process cannot refuse: such a test is an integration test)."""
    from compiler.cache.store import KernelCache  # noqa: PLC0415 - only in this mode
    tests = os.path.dirname(os.path.abspath(__file__))
    build_entry = KernelCache._build

    def refuse(self, key, build):
        # the builds tilejit asks for (kernels, the compiled launch path); a test's own builder of
        # plain files, as the cache's tests use, needs no compiler
        if not getattr(build, "__code__", None) or not build.__code__.co_filename.startswith(tests):
            raise RuntimeError(NO_TOOLCHAIN)
        return build_entry(self, key, build)
    KernelCache._build = refuse
    start = subprocess.Popen.__init__

    def in_this_process_only(self, args, *rest, **kw):
        program = os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args).split()[0])
        if program.startswith("python") or program in ("bash", "sh"):
            raise RuntimeError(f"this test starts `{program}`, but it is in the no_toolchain tier, whose tests run in "
                               "this process: mark it integration")
        start(self, args, *rest, **kw)
    subprocess.Popen.__init__ = in_this_process_only


def tier_of(item) -> str | None:
    """slow where the test, a parameter of it, its class or its module says slow (what it costs
    overrides what it needs); else the closest tier marker: its parameter's (`pytest.param(...,
    marks=...)`, which pytest lists after the test's own), its own, its class's, its module's."""
    spec = getattr(item, "callspec", None)
    marks = [*getattr(spec, "marks", ()), *item.iter_markers()]
    names = [m.name for m in marks if m.name in TIERS]
    return "slow" if "slow" in names else next(iter(names), None)


def pytest_report_header(config):
    return [f"tilejit tiers: {config.option.markexpr or 'all'}"
            + (" (no kernel builds)" if os.environ.get("TILEJIT_TEST_NO_TOOLCHAIN") == "1" else "")]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    untiered = [item.nodeid for item in items if tier_of(item) is None]
    if untiered:
        raise pytest.UsageError(
            f"{len(untiered)} tests declare no tier (e.g. {untiered[0]}): add `pytestmark = pytest.mark.<tier>` to "
            f"the module, one of {', '.join(TIERS)} (tests/conftest.py, docs/testing.md)")
    tiers = {item: tier_of(item) for item in items}
    for item in _unsampled([item for item in items if tiers[item] != "slow"]):
        tiers[item] = "slow"
    for item in items:   # one tier marker each, so that `-m <tier>` selects exactly the tests of a tier
        for node in item.listchain():
            node.own_markers[:] = [m for m in node.own_markers if m.name not in TIERS]
        item.add_marker(tiers[item])
        item.user_properties.append(("tier", tiers[item]))
    device = [item for item in items if tier_of(item) == "device"]
    if device and not _has_gpu():
        for item in device:
            item.add_marker(pytest.mark.skip(reason="device tier: no GPU on this machine"))


def _unsampled(items) -> list:
    """The cases of each `@pytest.mark.sampled` test outside its sample: the fewest cases, chosen
    greedily in collection order, in which every value of every parameter appears at least once
    (among `items`: the cases not in the slow tier already). The default tiers run the sample; the
    rest of the grid runs in the slow tier."""
    grids: dict = {}
    for item in items:
        if item.get_closest_marker("sampled") is not None and hasattr(item, "callspec"):
            grids.setdefault((item.path, item.originalname), []).append(item)
    rest = []
    for cases in grids.values():
        values = {item: {(k, repr(v)) for k, v in item.callspec.params.items()} for item in cases}
        uncovered = set().union(*values.values())
        while uncovered:
            best = max(cases, key=lambda item: len(values[item] & uncovered))
            uncovered -= values.pop(best)
            cases.remove(best)
        rest += cases
    return rest


def _has_gpu() -> bool:
    import torch  # noqa: PLC0415 - only when the device tier is selected
    return torch.cuda.is_available()


def _cpu_seconds() -> float:
    """CPU time of this process and of the processes it has waited for (a compiler, a child):
    what a test costs the machine, whatever else runs on it."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


_CPU_AT_SETUP = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_AT_SETUP] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.passed or tier_of(item) == "slow" or _CPU_AT_SETUP not in item.stash:
        return
    took = _cpu_seconds() - item.stash[_CPU_AT_SETUP]
    if took > TIME_LIMIT_S:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {took:.0f} s of CPU (setup and call, with the processes it ran), over "
                           f"the {TIME_LIMIT_S:.0f} s a test of the default tiers may take: make it cheaper or mark it "
                           "slow (docs/testing.md; TILEJIT_TEST_TIME_LIMIT sets the limit)")


def pytest_terminal_summary(terminalreporter):
    """One line per tier: how many tests ran and the time they took (summed over workers)."""
    count: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for r in reports:
            tier = dict(getattr(r, "user_properties", ())).get("tier")
            if tier is None or getattr(r, "when", None) not in ("setup", "call", "teardown"):
                continue
            seconds[tier] = seconds.get(tier, 0.0) + r.duration
            if r.when == "call" or (r.when == "setup" and r.skipped):
                count[tier] = count.get(tier, 0) + 1
    if count:
        parts = [f"{t} {count.get(t, 0)} ({seconds.get(t, 0.0):.0f} s)" for t in TIERS if t in count]
        terminalreporter.write_line("tests per tier (test time summed over workers): " + ", ".join(parts))
    built = _kernels_built(os.environ.get("TILEJIT_TEST_SESSION_CACHE"))
    if built:
        terminalreporter.write_line("kernels compiled into the session's cache, once each: " + ", ".join(
            f"{target} {n}" for target, n in built.items()))


# the source file a target's cache entry keeps, by target
_SOURCES = {"cpu": "kernel.cpp", "kunlun": "kernel.xpu", "gpu": "kernel.py"}


def _kernels_built(root) -> dict[str, int]:
    """Entries in the session's compile cache, by target: every kernel the run compiled."""
    if not root or not os.path.isdir(root):
        return {}
    entries = [d for d in pathlib.Path(root).glob("[0-9a-f][0-9a-f]/*") if d.is_dir()]
    counts = {target: sum((d / source).is_file() for d in entries) for target, source in _SOURCES.items()}
    return {target: n for target, n in counts.items() if n}


@pytest.fixture(scope="session")
def cache_dir():
    return os.environ["TILEJIT_CACHE_DIR"]


@pytest.fixture
def tcache(tmp_path, monkeypatch):
    """An empty kernel cache and decision store of the test's own (the autotuner's tests start
    from no stored decision), with the process's decision memo cleared around the test."""
    from compiler.cache.decisions import clear_memo  # noqa: PLC0415 - imports torch: only when used
    d = tmp_path / "cache"
    monkeypatch.setenv("TILEJIT_CACHE_DIR", str(d))
    monkeypatch.delenv("TILEJIT_CACHE_STRICT", raising=False)
    clear_memo()
    yield d
    clear_memo()
