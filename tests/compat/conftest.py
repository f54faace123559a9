"""Fixtures of the compatibility suite: the downloaded libraries (once per session), and the
`triton` alias around every test (third-party code imports `triton` lazily too)."""
import sys

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


@pytest.fixture(scope="session")
def vllm_kunlun(compat_root):
    root = sources.fetch_wheel(sources.VLLM_KUNLUN, compat_root)
    sys.path.append(str(sources.fetch_wheel(sources.EINOPS, compat_root)))   # layernorm_guard imports it
    mods = sources.import_vllm_kunlun(root, ["fla.cumsum", "fla.chunk_scaled_dot_kkt", "fla.solve_tril",
                                             "fla.wy_fast", "fla.chunk_delta_h", "fla.chunk_o", "fla.l2norm",
                                             "fla.layernorm_guard", "mamba.causal_conv1d"])
    tmp = compat_root / "vllm_kunlun_functions"
    tmp.mkdir(exist_ok=True)
    mods["mla"] = sources.functions_of(root / "vllm_kunlun/v1/attention/backends/mla/flashmla_sparse.py",
                                       ["_convert_req_index_to_global_index_kernel",
                                        "triton_convert_req_index_to_global_index"], tmp)
    mods["qwen3_next"] = sources.functions_of(root / "vllm_kunlun/models/qwen3_next.py",
                                              ["fused_gdn_gating_kernel", "fused_gdn_gating"], tmp)
    return mods


@pytest.fixture(autouse=True)
def triton_alias():
    with alias():
        yield
