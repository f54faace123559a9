"""Test-session setup: one compile cache shared by the whole session (fresh per session, so a
run starts cold and every test after the first use of a kernel hits it)."""
import os
import tempfile

import pytest

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


def pytest_collection_modifyitems(config, items):
    """Tests marked slow (minutes: a fresh install from the package index) run only with
    TILEJIT_RUN_SLOW=1, as .ci/run sets it."""
    if os.environ.get("TILEJIT_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set TILEJIT_RUN_SLOW=1 to run it (.ci/run does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
