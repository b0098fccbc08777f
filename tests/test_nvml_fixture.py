"""The ``fakegpu_nvml`` fixture, run for real with pytester: the example project, bad input as
one line, a node of a multi-node topology, and an nvmlInit a test left open."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "nvml-unit-tests"


def test_the_example_project_passes(pytester: pytest.Pytester) -> None:
    for path in EXAMPLE.iterdir():
        if path.is_file():
            shutil.copy(path, pytester.path / path.name)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_an_unknown_topology_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
def test_it(fakegpu_nvml):
    fakegpu_nvml("nope")
''')
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*fakegpu_nvml: topology 'nope': no such file, and no packaged topology of that name "
         "(fakegpu topology list: *dgx-h100*"])
    assert "Traceback" not in result.stdout.str()


def test_a_node_of_several_is_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pynvml
import pytest

def test_unnamed(fakegpu_nvml):
    fakegpu_nvml("mixed")

def test_named(fakegpu_nvml):
    from fakegpu.topology.load import load_topology
    gpus = fakegpu_nvml("mixed", node="a100-0")
    pynvml.nvmlInit()
    try:
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        assert pynvml.nvmlDeviceGetCount() == gpus.gpu_count
    finally:
        pynvml.nvmlShutdown()
    assert "A100" in name
    assert gpus.state_path.parent == gpus.state_dir and gpus.state_path.is_file()
''')
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*fakegpu_nvml: *mixed.yaml: give node=, one of a100-0, *"])
    assert "During handling" not in result.stdout.str()


def test_an_init_left_open_does_not_leak_into_the_next_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pynvml

def _first_name():
    return pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))

def test_a_leaves_nvml_open(fakegpu_nvml):
    fakegpu_nvml("dgx-h100")
    pynvml.nvmlInit()
    pynvml.nvmlInit()
    assert "H100" in _first_name()

def test_b_sees_its_own_node(fakegpu_nvml):
    fakegpu_nvml("dgx-a100")
    pynvml.nvmlInit()
    try:
        assert "A100" in _first_name()
    finally:
        pynvml.nvmlShutdown()
''')
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=2)
