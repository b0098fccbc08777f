"""The nvbandwidth program on the real fake NVML library: four ranks on this host, one per
node of gb200-mini (each with its node's state file), rendezvous over TCP on localhost. Its
matrix must equal the rules applied to the topology (fakegpu/bandwidth/model.py), its GPUs
what pynvml reads from the same state files."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fakegpu.bandwidth import model, program, results
from fakegpu.nvml import faults
from fakegpu.nvml.env import ensure_state
from fakegpu.testkit.gpus import nvml_env
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import Topology
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration

_PYNVML = r"""
import json, pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(h, pynvml.byref(info))
    uuid = bytes(info.clusterUuid).hex()
    uuid = "-".join([uuid[:8], uuid[8:12], uuid[12:16], uuid[16:20], uuid[20:]])
    up = 0
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            up += pynvml.nvmlDeviceGetNvLinkState(h, link) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError:
            pass
    out.append({"uuid": pynvml.nvmlDeviceGetUUID(h), "clique": f"{uuid}.{info.cliqueId}",
                "links_up": up})
print(json.dumps(out))
"""


def _mini() -> Topology:
    return load_topology(FIXTURES / "gb200-mini.yaml")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _states(topology: Topology, tmp_path: Path) -> list[Path]:
    return [ensure_state(topology, n.name, tmp_path / f"{n.name}.state") for n in topology.nodes]


def _job(topology: Topology, states: Sequence[Path], extra_env: dict[str, str] | None = None,
         args: Sequence[str] = (), rank_env: Sequence[dict[str, str]] | None = None,
         nics: bool = True) -> tuple[dict[str, Any], list[str]]:
    """Run one rank per node at once; the merged document and each rank's stderr.
    ``rank_env``: more environment per rank (its node's pod); ``nics``: pass each GPU's NIC
    speed from the topology, as the launcher does."""
    rank_env = rank_env or [{} for _ in states]
    rates = model.nic_rates(topology) if nics else {}
    if rates:
        args = [*args, "--nic-gbps", ",".join(f"{u}={g:g}" for u, g in rates.items())]
    port = _free_port()
    peers = ",".join([f"127.0.0.1:{port}"] * len(states))
    procs = [subprocess.Popen(
        [str(program.path()), "--rank", str(r), "--peers", peers, "--port", str(port),
         "--node", node.name, "--timeout", "20", *args],
        env={**nvml_env(state), **(extra_env or {}), **rank_env[r]},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r, (node, state) in enumerate(zip(topology.nodes, states, strict=True))]
    outs, errs = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outs.append(json.loads(out))
        errs.append(err)
    return results.merge(outs), errs


def _expected(views: list[model.GpuView], network_gbps: float) -> tuple[list[Any], list[Any]]:
    values, paths = model.matrix(views, network_gbps)
    return values, [[p.value for p in row] for row in paths]


def test_without_a_domain_the_matrix_follows_the_topology(tmp_path: Path) -> None:
    topology = _mini()
    doc, errs = _job(topology, _states(topology, tmp_path))
    values, paths = _expected(model.topology_views(topology), topology.network.gbps_per_gpu)
    assert doc["bandwidth"] == values and doc["paths"] == paths
    assert {p for row in paths for p in row} == {"self", "nvlink-local", "network"}
    # It says that it is a simulation, in its output and on stderr.
    assert doc["simulation"] is True and "simulated" in doc["note"]
    assert all("SIMULATION" in e for e in errs)


def test_gpus_are_what_pynvml_reads(tmp_path: Path) -> None:
    topology = _mini()
    states = _states(topology, tmp_path)
    doc, _ = _job(topology, states)
    seen = []
    for state in states:
        out = subprocess.run([sys.executable, "-c", _PYNVML], env=nvml_env(state),
                             capture_output=True, text=True, timeout=60, check=True)
        seen += json.loads(out.stdout)
    assert [{k: g[k] for k in ("uuid", "clique", "links_up")} for g in doc["gpus"]] == seen
    assert [g["node"] for g in doc["gpus"]] == [n.name for n in topology.nodes for _ in n.gpus]


def test_one_domain_with_channels_gives_nvlink_everywhere(tmp_path: Path) -> None:
    topology = _mini()
    channels = tmp_path / "channels"
    channels.mkdir()
    (channels / "channel0").touch()
    env = {"FAKEGPU_COMPUTE_DOMAIN": "5a0c1a7e-0000-4000-8000-000000000001",
           "FAKEGPU_IMEX_CHANNEL": "0", "FAKEGPU_IMEX_CHANNEL_DIR": str(channels)}
    doc, _ = _job(topology, _states(topology, tmp_path), env)
    values, paths = _expected(model.topology_views(topology, compute_domain="d"),
                              topology.network.gbps_per_gpu)
    assert doc["bandwidth"] == values and doc["paths"] == paths
    assert {p for row in paths for p in row} == {"self", "nvlink-local", "nvlink-fabric"}
    # The same variables without the channel's device node: no multi-node NVLink.
    (channels / "channel0").unlink()
    doc, _ = _job(topology, _states(topology, tmp_path), env)
    assert doc["bandwidth"] == _expected(model.topology_views(topology),
                                         topology.network.gbps_per_gpu)[0]


def test_faults_show_in_the_matrix(tmp_path: Path) -> None:
    topology = _mini()
    states = _states(topology, tmp_path)
    faults.inject(states[1], 2, "fabric-degraded")
    faults.inject(states[3], 0, "nvlink-down", 5)
    # Without NIC speeds every GPU goes at --network-gbps.
    doc, _ = _job(topology, states, args=["--network-gbps", "800"], nics=False)
    views = [dataclasses.replace(v, nic_gbps=None)
             for v in model.topology_views(topology, degraded=[("gb200-1", 2)])]
    views[12] = model.view_of(topology.nodes[3].gpus[0], "gb200-3", links_down=[5])
    values, paths = _expected(views, 800)
    assert doc["bandwidth"] == values and doc["paths"] == paths
    assert doc["bandwidth"][6][7] < doc["bandwidth"][4][5]  # the degraded GPU's pairs
    assert doc["bandwidth"][0][4] == 100.0  # 800 Gb/s


def test_each_gpu_reaches_other_nodes_through_its_own_nic(tmp_path: Path) -> None:
    """``mixed``: an A100 node's GPUs send through 200 Gb/s ConnectX-6 NICs, an H100 node's
    through 400 Gb/s ConnectX-7: between them the slower NIC sets the figure."""
    topology = load_topology(FIXTURES / "mixed.yaml")
    doc, _ = _job(topology, _states(topology, tmp_path))
    values, paths = _expected(model.topology_views(topology), topology.network.gbps_per_gpu)
    assert doc["bandwidth"] == values and doc["paths"] == paths
    labels = [(g["node"], g["index"]) for g in doc["gpus"]]
    a100, h100, h100_other = (labels.index(("a100-1", 0)), labels.index(("h100-0", 0)),
                              labels.index(("h100-3", 0)))
    assert doc["bandwidth"][a100][h100] == doc["bandwidth"][h100][a100] == 200 / 8
    assert (paths[h100][h100_other], doc["bandwidth"][h100][h100_other]) == ("network", 400 / 8)
    assert {g["nic_gbps"] for g in doc["gpus"]} == {200, 400}


@pytest.mark.parametrize("args", [["--rank", "x"], ["--link-gbps", "five"], ["--bogus", "1"],
                                  ["--rank", "3"], ["--network-gbps", "0"],
                                  ["--nic-gbps", "GPU-1"], ["--nic-gbps", "GPU-1=0"],
                                  ["--nic-gbps", "=400"], ["--nic-gbps", "GPU-1=4x"]])
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str]) -> None:
    topology = _mini()
    state = _states(topology, tmp_path)[0]
    out = subprocess.run([str(program.path()), *args], env=nvml_env(state),
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("nvbandwidth: ")


def test_it_is_static(tmp_path: Path) -> None:
    # The busybox workload image has no C library: the program must need none.
    out = subprocess.run(["file", str(program.path())], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        pytest.skip("the `file` command is not installed")
    assert "statically linked" in out.stdout
    assert os.access(program.path(), os.X_OK)


def test_a_whole_nvl72_rack_in_one_domain(tmp_path: Path) -> None:
    # 18 ranks, 72 GPUs: every pair at NVLink speed, as the rules give for gb200-nvl72.
    topology = load_topology(FIXTURES / "gb200-nvl72.yaml")
    channels = tmp_path / "channels"
    channels.mkdir()
    (channels / "channel0").touch()
    env = {"FAKEGPU_COMPUTE_DOMAIN": "rack", "FAKEGPU_IMEX_CHANNEL": "0",
           "FAKEGPU_IMEX_CHANNEL_DIR": str(channels)}
    doc, _ = _job(topology, _states(topology, tmp_path), env)
    values, paths = _expected(model.topology_views(topology, compute_domain="rack"),
                              topology.network.gbps_per_gpu)
    assert len(doc["gpus"]) == 72
    assert doc["bandwidth"] == values and doc["paths"] == paths


def test_a_degraded_gpu_in_a_domain_keeps_half_its_nvlink(tmp_path: Path) -> None:
    topology = _mini()
    states = _states(topology, tmp_path)
    channels = tmp_path / "channels"
    channels.mkdir()
    (channels / "channel3").touch()
    env = {"FAKEGPU_COMPUTE_DOMAIN": "d", "FAKEGPU_IMEX_CHANNEL": "3",
           "FAKEGPU_IMEX_CHANNEL_DIR": str(channels)}
    faults.inject(states[2], 1, "fabric-degraded")
    doc, _ = _job(topology, states, env)
    values, paths = _expected(model.topology_views(topology, compute_domain="d",
                                                   degraded=[("gb200-2", 1)]),
                              topology.network.gbps_per_gpu)
    assert doc["bandwidth"] == values and doc["paths"] == paths
    sick = 4 * 2 + 1
    assert doc["bandwidth"][0][sick] == doc["bandwidth"][0][1] * model.DEGRADED_SHARE
    assert doc["paths"][0][sick] == "nvlink-fabric"


def _domain_env(tmp_path: Path) -> dict[str, str]:
    channels = tmp_path / "channels"
    channels.mkdir()
    (channels / "channel0").touch()
    return {"FAKEGPU_COMPUTE_DOMAIN": "d", "FAKEGPU_IMEX_CHANNEL": "0",
            "FAKEGPU_IMEX_CHANNEL_DIR": str(channels)}


def test_a_node_whose_imex_daemon_does_not_answer_falls_back_to_the_network(
    tmp_path: Path,
) -> None:
    topology = _mini()
    env = _domain_env(tmp_path)
    with socket.socket() as daemon, socket.socket() as dead:
        daemon.bind(("127.0.0.1", 0))
        daemon.listen(16)  # the kernel completes the probes' connections: an answering daemon
        dead.bind(("127.0.0.1", 0))  # bound, never listening: refused, as a killed daemon
        up = f"127.0.0.1:{daemon.getsockname()[1]}"
        down = f"127.0.0.1:{dead.getsockname()[1]}"
        rank_env = [{"FAKEGPU_IMEX_DAEMON": down if n.name == "gb200-2" else up}
                    for n in topology.nodes]
        doc, _ = _job(topology, _states(topology, tmp_path), env, rank_env=rank_env)
    values, paths = _expected(model.topology_views(topology, compute_domain="d",
                                                   imex_down=["gb200-2"]),
                              topology.network.gbps_per_gpu)
    assert doc["bandwidth"] == values and doc["paths"] == paths
    assert [g["imex_daemon"] for g in doc["gpus"]] == [
        n.name != "gb200-2" for n in topology.nodes for _ in n.gpus]
    assert doc["paths"][8][0] == "network" and doc["paths"][8][9] == "nvlink-local"
    assert doc["paths"][0][4] == "nvlink-fabric"


def test_the_imex_daemon_endpoint_may_be_ipv6(tmp_path: Path) -> None:
    try:
        daemon = socket.socket(socket.AF_INET6)
        daemon.bind(("::1", 0))
    except OSError as err:
        pytest.skip(f"this host has no IPv6 loopback (::1): {err}")
    topology = _mini()
    with daemon:
        daemon.listen(16)
        env = {**_domain_env(tmp_path), "FAKEGPU_IMEX_DAEMON": f"[::1]:{daemon.getsockname()[1]}"}
        doc, _ = _job(topology, _states(topology, tmp_path), env)
    assert {g["imex_daemon"] for g in doc["gpus"]} == {True}
    assert doc["bandwidth"] == _expected(model.topology_views(topology, compute_domain="d"),
                                         topology.network.gbps_per_gpu)[0]


def test_without_the_daemon_variable_imex_daemon_is_null(tmp_path: Path) -> None:
    topology = _mini()
    doc, _ = _job(topology, _states(topology, tmp_path))
    assert {g["imex_daemon"] for g in doc["gpus"]} == {None}


@pytest.mark.parametrize("value", ["nowhere", "::1:50000", "host:0", "host:x", "[::1]50000",
                                   ":50000"])
def test_a_malformed_imex_daemon_variable_exits_2_with_one_line(tmp_path: Path,
                                                                value: str) -> None:
    state = _states(_mini(), tmp_path)[0]
    out = subprocess.run([str(program.path())],
                         env={**nvml_env(state), "FAKEGPU_IMEX_DAEMON": value},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("nvbandwidth: FAKEGPU_IMEX_DAEMON: "), out.stderr
    assert value in out.stderr
