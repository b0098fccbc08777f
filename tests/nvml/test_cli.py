"""The CLI contract: nvml env / libdir, fault inject / clear, smi (read through NVML)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fakegpu.nvml import state as st
from fakegpu.topology.model import PciAddress

from .conftest import FIXTURES, py_json, topology

pytestmark = pytest.mark.integration


def fakegpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fakegpu", *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def test_env_eval_then_pynvml(tmp_path: Path) -> None:
    topo = topology("gb200-mini")
    node = topo.nodes[2]
    state = tmp_path / "n2.state"
    script = (f'eval "$({sys.executable} -m fakegpu nvml env --topology {FIXTURES}/gb200-mini.yaml '
              f'--node {node.name} --state {state})"; {sys.executable} -c '
              '"import pynvml as n; n.nvmlInit(); '
              'print([n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i)) '
              'for i in range(n.nvmlDeviceGetCount())])"')
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH",
                                                                "FAKEGPU_NVML_STATE")}
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                         env=environ, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([g.uuid for g in node.gpus])
    assert state.is_file()


def test_env_default_state_dir(tmp_path: Path) -> None:
    environ = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path))
    out = fakegpu("nvml", "env", "--topology", str(FIXTURES / "dgx-a100.yaml"), env=environ)
    assert out.returncode == 0, out.stderr
    exports = dict(line.removeprefix("export ").split("=", 1) for line in out.stdout.splitlines())
    assert Path(exports["FAKEGPU_NVML_STATE"]).is_relative_to(tmp_path / "fakegpu")
    assert (Path(exports["LD_LIBRARY_PATH"].split(":")[0]) / "libnvidia-ml.so.1").is_file()


def test_libdir() -> None:
    out = fakegpu("nvml", "libdir")
    assert out.returncode == 0
    assert (Path(out.stdout.strip()) / "libnvidia-ml.so.1").is_file()


def test_bad_arguments_one_line() -> None:
    out = fakegpu("nvml", "env", "--topology", str(FIXTURES / "gb200-mini.yaml"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    out = fakegpu("nvml", "env", "--topology", str(FIXTURES / "dgx-a100.yaml"), "--node", "nope")
    assert out.returncode == 2 and "nope" in out.stderr


def test_fault_cli_and_smi(tmp_path: Path) -> None:
    topo = topology("dgx-h100")
    node = topo.nodes[0]
    state = tmp_path / "h.state"
    base = ["--topology", str(FIXTURES / "dgx-h100.yaml"), "--node", node.name,
            "--state", str(state)]
    assert fakegpu("fault", "inject", *base, "--gpu", "1", "gpu-lost").returncode == 0
    assert fakegpu("fault", "inject", "--state", str(state), "--gpu", "2", "nvlink-down",
                   "0").returncode == 0
    bad = fakegpu("fault", "inject", "--state", str(state), "--gpu", "2", "xid")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    smi = fakegpu("smi", "--state", str(state))
    assert smi.returncode == 0, smi.stderr
    for gpu in node.gpus:
        if gpu.index != 1:
            assert gpu.uuid in smi.stdout and gpu.pci.bus_id in smi.stdout
    assert node.gpus[1].uuid not in smi.stdout and "GPU is lost" in smi.stdout
    assert "GPU2: 17/18 links up" in smi.stdout
    assert fakegpu("fault", "clear", "--state", str(state), "--gpu", "1").returncode == 0
    assert node.gpus[1].uuid in fakegpu("smi", "--state", str(state)).stdout


def test_smi_shows_mig_devices(tmp_path: Path) -> None:
    topo = topology("mixed")
    node = next(n for n in topo.nodes if any(g.mig.instances for g in n.gpus))
    out = fakegpu("smi", "--topology", str(FIXTURES / "mixed.yaml"), "--node", node.name,
                  "--state", str(tmp_path / "m.state"))
    assert out.returncode == 0, out.stderr
    for gpu in node.gpus:
        for inst in gpu.mig.instances:
            assert inst.profile in out.stdout
    assert "MIG devices:" in out.stdout


def test_seventy_two_gpus_on_one_node(tmp_path: Path) -> None:
    """No 8-GPU cap: one node with 72 GPUs, all visible and addressable."""
    # The loader caps real systems at 16 GPUs per node; the library must not care.
    base = topology("dgx-h100")
    node = base.nodes[0]
    gpus = tuple(
        replace(node.gpus[i % 8], index=i, minor=i, uuid=f"GPU-{i:08x}-0000-4000-8000-{i:012x}",
                pci=PciAddress(i // 64, 0x10 + i % 64, 0, 0), nvlinks=())
        for i in range(72))
    topo = replace(base, nodes=(replace(node, name="big", gpus=gpus, pcie=None),))

    path = st.render(topo, topo.nodes[0], tmp_path / "big.state")
    got = py_json(path, """
import json, pynvml as n
n.nvmlInit()
print(json.dumps([n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByIndex(i))
                  for i in range(n.nvmlDeviceGetCount())]))
""")
    assert got == [g.uuid for g in topo.nodes[0].gpus] and len(got) == 72


def _dynamic(path: Path) -> list[tuple[int, int, int, int]]:
    """(lost, last_xid, ecc_dbe_volatile, link_down_mask) of every GPU, read from the file."""
    data = path.read_bytes()
    header = st.Header.from_buffer_copy(data)
    out = []
    for i in range(header.gpu_count):
        at = header.header_size + i * header.gpu_size + st.GpuRecord.d.offset
        d = st.GpuDynamic.from_buffer_copy(data, at)
        out.append((d.lost, d.last_xid, d.ecc_dbe_volatile, d.link_down_mask))
    return out


@pytest.mark.parametrize("argv", [
    ["--gpu", "4294967296", "gpu-lost"],  # was GPU 0, exit 0
    ["--gpu", str(2**64), "gpu-lost"],
    ["--gpu", "8", "gpu-lost"],  # an 8-GPU node: was exit 1
    ["--gpu", "-1", "gpu-lost"],
    ["--gpu", "0", "xid", "0"],  # was exit 1
    ["--gpu", "0", "xid", "-5"],  # was exit 1
    ["--gpu", "0", "xid", str(2**64 + 13)],  # was XID 13
    ["--gpu", "0", "ecc-dbe", "5"],  # the 5 was ignored
    ["--gpu", "0", "gpu-lost", "1"],
    ["--gpu", "0", "nvlink-down", "18"],  # links 0-17
    ["--gpu", "0", "nvlink-down", str(2**64)],
])
def test_fault_inject_refuses_out_of_range_before_writing(tmp_path: Path,
                                                          argv: list[str]) -> None:
    topo = topology("dgx-h100")
    state = st.render(topo, topo.nodes[0], tmp_path / "h.state")
    before = _dynamic(state)
    out = fakegpu("fault", "inject", "--state", str(state), *argv)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert _dynamic(state) == before


@pytest.mark.parametrize("argv", [
    ["--gpu", "4294967296"],  # clear everything on GPU 0 by wrapping
    ["--gpu", "8", "xid"],
    ["--gpu", "0", "ecc-dbe", "5"],
    ["--gpu", "0", "xid", "13"],  # clearing XIDs clears the last one: no value
    ["--gpu", "0", "nvlink-down", "64"],
])
def test_fault_clear_refuses_out_of_range_before_writing(tmp_path: Path,
                                                         argv: list[str]) -> None:
    topo = topology("dgx-h100")
    state = st.render(topo, topo.nodes[0], tmp_path / "h.state")
    assert fakegpu("fault", "inject", "--state", str(state), "--gpu", "0",
                   "gpu-lost").returncode == 0
    before = _dynamic(state)
    assert before[0][0] == 1
    out = fakegpu("fault", "clear", "--state", str(state), *argv)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert _dynamic(state) == before


def test_fault_inject_in_range_still_lands(tmp_path: Path) -> None:
    topo = topology("dgx-h100")
    state = st.render(topo, topo.nodes[0], tmp_path / "h.state")
    for argv in (["--gpu", "7", "xid", "999"], ["--gpu", "6", "nvlink-down", "17"],
                 ["--gpu", "5", "ecc-dbe"]):
        out = fakegpu("fault", "inject", "--state", str(state), *argv)
        assert out.returncode == 0, out.stderr
    after = _dynamic(state)
    assert after[7][1] == 999 and after[6][3] == 1 << 17 and after[5][2] == 1
    assert fakegpu("fault", "clear", "--state", str(state), "--gpu", "6", "nvlink-down",
                   "17").returncode == 0
    assert _dynamic(state)[6][3] == 0


LONG_NAME = "/tmp/" + "a" * 300


@pytest.mark.parametrize("bad", ["/proc/nope/x", "/sys/x", LONG_NAME])
@pytest.mark.parametrize("command", [["nvml", "env"], ["fault", "inject", "--gpu", "0",
                                                       "gpu-lost"]])
def test_bad_state_path_is_one_line_exit_2(bad: str, command: list[str]) -> None:
    out = fakegpu(*command[:2], "--topology", str(FIXTURES / "dgx-h100.yaml"), "--state", bad,
                  *command[2:])
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("fakegpu: cannot write the NVML state file ")


@pytest.mark.parametrize("argv", [["nvml", "env", "--state", LONG_NAME],
                                  ["smi", "--state", LONG_NAME],
                                  ["fault", "inject", "--state", LONG_NAME, "--gpu", "0",
                                   "gpu-lost"]])
def test_over_long_existing_state_path_is_one_line_exit_2(argv: list[str]) -> None:
    out = fakegpu(*argv)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "File name too long" in out.stderr


def test_smi_json_is_the_view_nvml_gives(tmp_path: Path) -> None:
    from fakegpu.testkit.gpus import read_node_gpus

    state = tmp_path / "h.state"
    base = ["--topology", str(FIXTURES / "hgx-h200.yaml"), "--state", str(state)]
    assert fakegpu("nvml", "render", *base).returncode == 0
    gpus = read_node_gpus(state)
    lose = fakegpu("fault", "inject", "--state", str(state), "--gpu", "2", "gpu-lost")
    assert lose.returncode == 0, lose.stderr
    out = fakegpu("smi", "--state", str(state), "-o", "json")
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert [(g["index"], g["uuid"], g["bus_id"]) for g in view["gpus"]] == [
        (g.index, g.uuid, g.pci_bus_id) for g in gpus if g.index != 2]
    assert view["lost"] == [{"index": 2, "error": "GPU is lost"}] and view["count"] == 8
    assert fakegpu("smi", "--state", str(state), "--format", "json").stdout == out.stdout


@pytest.mark.parametrize("width", [60, 80, 120])
def test_smi_table_fits_the_terminal(tmp_path: Path, width: int) -> None:
    # Narrow: the columns that do not fit go to further tables of the same GPUs; every value
    # is still there, none cut or folded.
    import io

    from fakegpu.nvml import smi, smitable

    state = st.render(topology("mixed"), topology("mixed").nodes[0], tmp_path / "m.state")
    view = smi.read(state)
    out = io.StringIO()
    smitable.render(view, out, width=width)
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    for gpu in view["gpus"]:
        assert gpu["uuid"] in text and gpu["bus_id"] in text and gpu["name"] in text
    for header, _, _ in smitable._GPU_COLUMNS:
        assert header in text
    assert "GPUs (continued)" in text  # the whole table is some 250 columns


def test_smi_into_a_pipe_is_one_line_per_gpu(tmp_path: Path) -> None:
    state = tmp_path / "h.state"
    assert fakegpu("nvml", "render", "--topology", str(FIXTURES / "dgx-h100.yaml"), "--state",
                   str(state)).returncode == 0
    out = fakegpu("smi", "--state", str(state))
    assert out.returncode == 0, out.stderr
    for gpu in topology("dgx-h100").nodes[0].gpus:
        (line,) = [line for line in out.stdout.splitlines() if gpu.uuid in line]
        assert gpu.pci.bus_id in line and "MiB /" in line
