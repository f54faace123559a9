"""Fixtures of the compatibility suite: the downloaded libraries (once per session), and the
`triton` alias around every test (third-party code imports `triton` lazily too)."""
import pytest

from compiler.triton import alias

from . import sources


@pytest.fixture(scope="session")
def compat_root(tmp_path_factory):
    return tmp_path_factory.mktemp("compat")


@pytest.fixture(scope="session")
def liger(compat_root):
    root = sources.fetch_wheel(sources.LIGER, compat_root)
    return sources.import_liger(root, ["rms_norm", "layer_norm", "rope", "swiglu", "geglu", "cross_entropy",
                                       "softmax", "kl_div", "jsd", "fused_add_rms_norm"])


@pytest.fixture(scope="session")
def tritonbench(compat_root):
    root = sources.fetch_wheel(sources.GEAK, compat_root)
    stems = ["vector_addition", "softmax_triton1", "matmul_leakyrelu", "layer_norm_triton", "attn_fwd_triton"]
    return {s: sources.import_tritonbench(root, s) for s in stems}


@pytest.fixture(scope="session")
def flaggems_softmax(compat_root):
    return sources.import_flaggems(sources.fetch_wheel(sources.FLAGGEMS, compat_root), "ops.softmax")


@pytest.fixture(autouse=True)
def triton_alias():
    with alias():
        yield
