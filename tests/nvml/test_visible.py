"""FAKEGPU_NVML_VISIBLE: the NVML view of a container's GPUs (csrc/visible.c, issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.nvml.env import ensure_state, env
from fakegpu.testkit.gpus import read_node_gpus
from fakegpu.topology.load import load_topology
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration

_READ = r"""
import json, sys, pynvml as n
n.nvmlInit()
out = {"count": n.nvmlDeviceGetCount(), "gpus": [], "hidden": {}}
for i in range(out["count"]):
    h = n.nvmlDeviceGetHandleByIndex(i)
    out["gpus"].append([n.nvmlDeviceGetUUID(h), n.nvmlDeviceGetIndex(h),
                        n.nvmlDeviceGetMinorNumber(h)])
for uuid in sys.argv[1:]:
    try:
        n.nvmlDeviceGetHandleByUUID(uuid)
        out["hidden"][uuid] = "found"
    except n.NVMLError as e:
        out["hidden"][uuid] = str(e)
print(json.dumps(out))
"""


def _read(state: Path, visible: str | None, *probe: str) -> dict[str, object]:
    extra = {} if visible is None else {"FAKEGPU_NVML_VISIBLE": visible}
    out = subprocess.run([sys.executable, "-c", _READ, *probe],
                         env={**os.environ, **env(state), **extra}, capture_output=True,
                         text=True, timeout=60, check=True)
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    topology = load_topology(FIXTURES / "dgx-h100.yaml")
    return ensure_state(topology, "dgx-h100-0", tmp_path_factory.mktemp("v") / "n.state")


def test_a_view_shows_exactly_the_listed_gpus_renumbered(dgx: Path) -> None:
    gpus = read_node_gpus(dgx)
    chosen = [gpus[5], gpus[2]]  # listed out of order: the node's order is kept
    seen = _read(dgx, ",".join(g.uuid for g in chosen), gpus[0].uuid)
    assert seen["count"] == 2
    assert seen["gpus"] == [[gpus[2].uuid, 0, gpus[2].minor], [gpus[5].uuid, 1, gpus[5].minor]]
    assert seen["hidden"] == {gpus[0].uuid: "Not Found"}


@pytest.mark.parametrize("visible", [None, "", "all"])
def test_without_a_view_every_gpu_is_there(dgx: Path, visible: str | None) -> None:
    gpus = read_node_gpus(dgx)
    seen = _read(dgx, visible)
    assert seen["gpus"] == [[g.uuid, g.index, g.minor] for g in gpus]


def test_a_mig_device_shows_its_gpu(tmp_path: Path) -> None:
    topology = load_topology(FIXTURES / "partitioning.yaml")
    node = next(n for n in topology.nodes if any(g.mig.enabled for g in n.gpus))
    state = ensure_state(topology, node.name, tmp_path / "mig.state")
    from fakegpu.nvidiasmi import path as smi

    listed = subprocess.run([str(smi()), "-L"], env={**os.environ, **env(state)},
                            capture_output=True, text=True, timeout=60, check=True).stdout
    parent = listed.splitlines()[0]
    mig = next(line for line in listed.splitlines() if "MIG-" in line).split("UUID: ")[1][:-1]
    seen = _read(state, mig)
    assert seen["count"] == 1
    assert parent.endswith(f"(UUID: {seen['gpus'][0][0]})")  # type: ignore[index]


_READ_MIG = r"""
import json, sys, pynvml as n
n.nvmlInit()
out = {"gpus": [], "hidden": {}}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    migs = []
    for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            migs.append(n.nvmlDeviceGetUUID(n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)))
        except n.NVMLError:
            pass
    out["gpus"].append([n.nvmlDeviceGetUUID(h), migs])
for uuid in sys.argv[1:]:
    try:
        n.nvmlDeviceGetHandleByUUID(uuid)
        out["hidden"][uuid] = "found"
    except n.NVMLError as e:
        out["hidden"][uuid] = str(e)
print(json.dumps(out))
"""


def _mig_devices(state: Path) -> dict[str, list[str]]:
    """Each MIG-mode GPU's UUID -> its MIG devices' UUIDs, as pynvml reads them unviewed."""
    out = subprocess.run([sys.executable, "-c", _READ_MIG], env={**os.environ, **env(state)},
                         capture_output=True, text=True, timeout=60, check=True)
    return {gpu: migs for gpu, migs in json.loads(out.stdout)["gpus"] if migs}


def test_a_mig_device_shows_only_itself_of_its_gpus_mig_devices(tmp_path: Path) -> None:
    # A container given MIG devices sees their GPUs and, of each GPU's MIG devices, only its
    # own, numbered from 0 (NVIDIA's runtime gives it only those devices' capabilities); a
    # GPU listed by its own UUID shows all of its MIG devices.
    topology = load_topology(FIXTURES / "partitioning.yaml")
    state = ensure_state(topology, "a100-mig", tmp_path / "mig.state")
    (gpu0, migs0), (gpu1, migs1) = list(_mig_devices(state).items())[:2]
    assert len(migs0) > 2 and len(migs1) > 1, "the fixture's GPUs have several MIG devices"
    given = [migs0[1], migs1[-1]]
    others = [m for m in migs0 + migs1 if m not in given]
    out = subprocess.run([sys.executable, "-c", _READ_MIG, *others],
                         env={**os.environ, **env(state),
                              "FAKEGPU_NVML_VISIBLE": ",".join(given)},
                         capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(out.stdout)
    assert seen["gpus"] == [[gpu0, [migs0[1]]], [gpu1, [migs1[-1]]]]
    assert seen["hidden"] == {m: "Not Found" for m in others}
    whole = subprocess.run([sys.executable, "-c", _READ_MIG],
                           env={**os.environ, **env(state), "FAKEGPU_NVML_VISIBLE": gpu1},
                           capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(whole.stdout)["gpus"] == [[gpu1, migs1]]


def test_per_device_variables_add_up_and_none_lists_nothing(dgx: Path) -> None:
    # A CDI spec names each device in FAKEGPU_NVML_VISIBLE_<device> (the claim-wide variable
    # says "none"): a container given two requests, or two claims, sees both devices; one
    # given none of them sees no GPU, not every GPU.
    gpus = read_node_gpus(dgx)
    both = {"FAKEGPU_NVML_VISIBLE": "none", "FAKEGPU_NVML_VISIBLE_A": gpus[6].uuid,
            "FAKEGPU_NVML_VISIBLE_B": gpus[1].uuid}
    out = subprocess.run([sys.executable, "-c", _READ], env={**os.environ, **env(dgx), **both},
                         capture_output=True, text=True, timeout=60, check=True)
    assert [g[0] for g in json.loads(out.stdout)["gpus"]] == [gpus[1].uuid, gpus[6].uuid]
    assert _read(dgx, "none")["count"] == 0
