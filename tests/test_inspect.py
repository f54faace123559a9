"""`python -m compiler.inspect` prints the IR before/after passes and the target source."""
import subprocess
import sys

import pytest

from compiler.inspect import main

pytestmark = pytest.mark.no_toolchain


def test_inspect_prints_ir_and_source(capsys):
    rc = main(["examples.example_kernels:add_kernel", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=64"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "// ===== IR (frontend) =====" in out and "// ===== IR (after passes) =====" in out
    assert "kernel add_kernel(%x_ptr: *fp32" in out
    assert 'extern "C" int tj_launch(tj_status* tj_st' in out and "tj_run_programs(" in out


def test_inspect_single_stage_and_errors(capsys):
    assert main(["examples.example_kernels:add_kernel", "-s", "*fp16,*fp16,*fp16,i32", "-c", "BLOCK=32",
                 "--stage", "ir"]) == 0
    out = capsys.readouterr().out
    assert "*fp16" in out and "tj_launch" not in out


@pytest.mark.integration
def test_inspect_wrong_signature_length_is_a_clear_error():
    res = subprocess.run([sys.executable, "-m", "compiler.inspect", "examples.example_kernels:add_kernel", "-s", "*fp32",
                          "-c", "BLOCK=32"], capture_output=True, text=True)
    assert res.returncode != 0
    assert "4 run-time parameters" in res.stderr + res.stdout


@pytest.mark.integration
def test_inspect_unknown_target_lists_available():
    res = subprocess.run([sys.executable, "-m", "compiler.inspect", "examples.example_kernels:add_kernel",
                          "-s", "*fp32,*fp32,*fp32,i32", "-c", "BLOCK=32", "--target", "nosuch"],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "cpu" in res.stderr and "nosuch" in res.stderr


def test_inspect_takes_the_path_of_a_file_in_a_package(capsys):
    # kernels/norm.py imports its neighbours relatively: it is imported as kernels.norm
    assert main(["kernels/norm.py:layer_norm_kernel", "-s", "*fp32,*fp32,*fp32,*fp32,i32,i32,i32,fp32",
                 "-c", "stride_xn=1", "-c", "HAS_W=True", "-c", "HAS_B=False", "-c", "ONE_CHUNK=True",
                 "-c", "BLOCK=64", "--stage", "ir"]) == 0
    assert "kernel layer_norm_kernel(" in capsys.readouterr().out


def test_inspect_specialises_run_time_parameters_left_off_to_their_defaults(capsys):
    """layer_norm_kernel's last run-time parameter, n_rows, has a default: a signature may leave it
    off (it is then the constant 1, as a launch that leaves it off specialises it), or give it."""
    base = ["kernels/norm.py:layer_norm_kernel", "-c", "stride_xn=1", "-c", "HAS_W=True", "-c", "HAS_B=False",
            "-c", "ONE_CHUNK=True", "-c", "BLOCK=64", "-c", "ROWS=4", "--stage", "ir"]
    assert main(base + ["-s", "*fp32,*fp32,*fp32,*fp32,i32,i32,i32,fp32"]) == 0
    assert "n_rows" not in capsys.readouterr().out.split("{")[0]   # not a parameter of the function
    assert main(base + ["-s", "*fp32,*fp32,*fp32,*fp32,i32,i32,i32,fp32,i32"]) == 0
    assert "n_rows" in capsys.readouterr().out.split("{")[0]
    assert main(base + ["-s", "*fp32,*fp32,*fp32,*fp32,i32,i32,i32"]) == 1   # eps has no default
    assert "only those with a default may be left off" in capsys.readouterr().err
