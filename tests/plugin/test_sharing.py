"""Sharing configs (fakegpu/plugin/sharing.py) and what prepare makes of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fakegpu.kubeletplugin.claims import ClaimRef
from fakegpu.plugin import sharing
from fakegpu.plugin.driver import Devices, Driver, DriverConfig

from .helpers import DRIVER, NODE, ClaimStore, claim, inventory

OWN = sharing.OWN_GROUP_VERSION


def opaque(source: str, params: dict[str, Any], requests: list[str] | None = None,
           driver: str = DRIVER) -> dict[str, Any]:
    return {"source": source, **({"requests": requests} if requests else {}),
            "opaque": {"driver": driver, "parameters": params}}


def gpu_config(**sharing_: Any) -> dict[str, Any]:
    return {"apiVersion": OWN, "kind": "GpuConfig", "sharing": sharing_}


def test_claim_config_overrides_the_class_per_request() -> None:
    configs = [
        opaque("FromClaim", gpu_config(strategy="MPS", mpsConfig={
            "defaultActiveThreadPercentage": 50}), ["b"]),
        opaque("FromClass", gpu_config(strategy="TimeSlicing",
                                       timeSlicingConfig={"interval": "Long"})),
        opaque("FromClass", {"apiVersion": "x/v1", "kind": "Other"}, driver="other.dev"),
    ]
    parsed = sharing.parse(configs, DRIVER, OWN)
    assert [c.where for c in parsed] == ["class config 1", "claim config 1"]
    a = sharing.select(parsed, "a", "gpu", "gpu-0")
    b = sharing.select(parsed, "b", "gpu", "gpu-1")
    assert a == sharing.Sharing(strategy="TimeSlicing", interval="Long")
    assert b is not None and (b.strategy, b.active_thread_percentage) == ("MPS", 50)
    # A MIG device: the GpuConfig for every request does not fit its type, nothing applies.
    assert sharing.select(parsed, "a", "mig", "gpu-0-mig-1g10gb-19-0") is None
    assert sharing.select([], "a", "gpu", "gpu-0") is None


@pytest.mark.parametrize(("params", "field"), [
    ({"apiVersion": OWN, "kind": "GpuConfig", "sharing": {"strategy": "Sometimes"}},
     "class config 1 (opaque.parameters).sharing.strategy: 'Sometimes'"),
    (gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Forever"}),
     "sharing.timeSlicingConfig.interval: 'Forever' is not one of Default, Short"),
    (gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 101}),
     "sharing.mpsConfig.defaultActiveThreadPercentage: 101 must be an integer from 0 to 100"),
    (gpu_config(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": "lots"}),
     "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: 'lots' is not a quantity"),
    ({"apiVersion": OWN, "kind": "TpuConfig"}, ".kind: 'TpuConfig' is not a kind"),
    ({"apiVersion": sharing.NVIDIA_GROUP_VERSION, "kind": "GpuConfig"},
     ".apiVersion: 'resource.nvidia.com/v1beta1', expected resource.fakegpu.dev/v1beta1"),
    ({"apiVersion": OWN, "kind": "MigDeviceConfig",
      "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}},
     "sharing.timeSlicingConfig: unknown field"),
    (gpu_config(strategy="TimeSlicing", sharpness=3), "sharing.sharpness: unknown field"),
])
def test_an_invalid_config_is_refused_naming_the_field(params: dict[str, Any],
                                                        field: str) -> None:
    with pytest.raises(sharing.ConfigError) as err:
        sharing.parse([opaque("FromClass", params)], DRIVER, OWN)
    assert field in str(err.value)


def test_a_config_of_the_wrong_type_for_its_request_is_an_error() -> None:
    parsed = sharing.parse([opaque("FromClaim", gpu_config(strategy="TimeSlicing"), ["m"])],
                           DRIVER, OWN)
    with pytest.raises(sharing.ConfigError, match="cannot apply GpuConfig to device "
                                                  "gpu-0-mig-1g10gb-19-0 of type mig"):
        sharing.select(parsed, "m", "mig", "gpu-0-mig-1g10gb-19-0")


def test_env_shows_the_config() -> None:
    mps = sharing.Sharing(strategy="MPS", active_thread_percentage=30,
                          pinned_memory_limit="4Gi",
                          per_device_pinned_memory_limit=(("GPU-b", "8Gi"),))
    assert sharing.env("P", mps, 0, "GPU-a") == [
        "P_SHARING_STRATEGY=MPS", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        "P_MPS_ACTIVE_THREAD_PERCENTAGE=30", "P_MPS_PINNED_DEVICE_MEMORY_LIMIT=4Gi"]
    assert sharing.env("P", mps, 1, "GPU-b")[-1] == "P_MPS_PINNED_DEVICE_MEMORY_LIMIT=8Gi"
    assert sharing.env("P", sharing.Sharing(), 0, "GPU-a") == [
        "P_SHARING_STRATEGY=TimeSlicing", "P_TIMESLICE_INTERVAL=Default"]


def _driver(tmp_path: Path, store: ClaimStore) -> Driver:
    (tmp_path / "cdi").mkdir()
    return Driver(DriverConfig(driver=DRIVER, node=NODE, state_dir=tmp_path / "state",
                               cdi_root=tmp_path / "cdi"), store, Devices(lambda: inventory()))


def test_prepare_puts_the_config_into_the_containers_env_or_refuses_the_claim(
        tmp_path: Path) -> None:
    store = ClaimStore()
    good = claim("good", "uid-good", ["gpu-0"])
    good["status"]["allocation"]["devices"]["config"] = [
        opaque("FromClass", gpu_config(strategy="TimeSlicing")),
        opaque("FromClaim", gpu_config(strategy="TimeSlicing",
                                       timeSlicingConfig={"interval": "Short"}), ["gpus"])]
    bad = claim("bad", "uid-bad", ["gpu-1"])
    bad["status"]["allocation"]["devices"]["config"] = [
        opaque("FromClaim", gpu_config(strategy="MPS",
                                       mpsConfig={"defaultActiveThreadPercentage": 150}))]
    store.add(good)
    store.add(bad)
    driver = _driver(tmp_path, store)
    results = driver.prepare([ClaimRef("default", "good", "uid-good"),
                              ClaimRef("default", "bad", "uid-bad")])
    assert results["uid-good"].error == ""
    assert "ResourceClaim default/bad: claim config 1 (opaque.parameters).sharing.mpsConfig." \
           "defaultActiveThreadPercentage: 150" in results["uid-bad"].error
    spec = json.loads(next((tmp_path / "cdi").glob("*uid-good*.json")).read_text())
    env = spec["devices"][0]["containerEdits"]["env"]
    assert "FAKEGPU_DEVICE_GPU_0_SHARING_STRATEGY=TimeSlicing" in env
    assert "FAKEGPU_DEVICE_GPU_0_TIMESLICE_INTERVAL=Short" in env  # the claim's wins
    assert not list((tmp_path / "cdi").glob("*uid-bad*"))


# --- shared GPUs by memory (DRAConsumableCapacity) ----------------------------------------------


def test_a_shared_gpu_allows_several_allocations_with_a_memory_policy() -> None:
    from dataclasses import replace

    from fakegpu.plugin import slices

    inv = inventory(2)
    inv = replace(inv, devices=(replace(inv.devices[0], shared=True), inv.devices[1]))
    [obj] = slices.build_slices(DRIVER, NODE, inv, "v1", 1)
    shared, plain = obj["spec"]["devices"]
    assert shared["allowMultipleAllocations"] is True
    assert shared["capacity"]["memory"] == {"value": "81559Mi", "requestPolicy": {
        "default": "81559Mi", "validRange": {"min": "1Gi"}}}
    assert "allowMultipleAllocations" not in plain
    assert "requestPolicy" not in plain["capacity"]["memory"]
    [beta] = slices.build_slices(DRIVER, NODE, inv, "v1beta1", 1)
    assert beta["spec"]["devices"][0]["basic"]["allowMultipleAllocations"] is True


def test_the_share_id_reaches_the_cdi_spec(tmp_path: Path) -> None:
    from fakegpu.plugin import cdi
    from fakegpu.plugin.prepare import plan_claim

    store = ClaimStore()
    obj = claim("s", "uid-s", ["gpu-0"])
    obj["status"]["allocation"]["devices"]["results"][0]["shareID"] = "7f4e2c1a"
    plan = plan_claim(obj, ClaimRef("default", "s", "uid-s"), DRIVER, NODE,
                      inventory().by_name())
    env = cdi.build_spec(DRIVER, plan)["devices"][0]["containerEdits"]["env"]
    assert "FAKEGPU_DEVICE_GPU_0_SHARE_ID=7f4e2c1a" in env
    store.add(obj)
    driver = _driver(tmp_path, store)
    result = driver.prepare([ClaimRef("default", "s", "uid-s")])["uid-s"]
    assert result.claim is not None and result.claim.devices[0].share_id == "7f4e2c1a"


@pytest.mark.parametrize(("text", "minors"), [("", set()), ("0", {0}), ("0, 3", {0, 3})])
def test_shared_gpus_flag(text: str, minors: set[int]) -> None:
    from fakegpu.cli.plugin import _minors

    assert _minors(text) == minors


@pytest.mark.parametrize("text", ["a", "1,,x", "-1"])
def test_shared_gpus_flag_refuses_what_is_not_minors(text: str) -> None:
    from fakegpu.cli.plugin import _minors
    from fakegpu.errors import InvalidInput

    with pytest.raises(InvalidInput, match="--shared-gpus"):
        _minors(text)


def test_an_mps_claim_gets_its_control_daemon_stand_in_and_unprepare_removes_it(
        tmp_path: Path) -> None:
    store = ClaimStore()
    obj = claim("m", "uid-m", ["gpu-0", "gpu-1"])
    obj["status"]["allocation"]["devices"]["config"] = [
        opaque("FromClaim", gpu_config(strategy="MPS", mpsConfig={
            "defaultActiveThreadPercentage": 40, "defaultPinnedDeviceMemoryLimit": "4Gi",
            "defaultPerDevicePinnedMemoryLimit": {"1": "6Gi"}}))]
    store.add(obj)
    driver = _driver(tmp_path, store)
    assert driver.prepare([ClaimRef("default", "m", "uid-m")])["uid-m"].error == ""
    spec = json.loads(next((tmp_path / "cdi").glob("*uid-m*.json")).read_text())
    mounts = {m["containerPath"]: Path(m["hostPath"]) for m in spec["containerEdits"]["mounts"]}
    assert set(mounts) == {"/tmp/nvidia-mps", "/var/log/nvidia-mps"}
    assert all(p.is_dir() for p in mounts.values())
    assert "CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps" in spec["containerEdits"]["env"]
    log = (mounts["/var/log/nvidia-mps"] / "control.log").read_text().splitlines()
    assert log[0] == "fakegpu MPS control daemon stand-in for claim default/m"
    assert log[1].startswith("device gpu-0 ") and log[1].endswith(
        "active_thread_percentage=40 pinned_device_memory_limit=4Gi")
    assert log[2].endswith("pinned_device_memory_limit=6Gi")  # device index 1's own
    assert driver.unprepare([ClaimRef("default", "m", "uid-m")]) == {"uid-m": ""}
    assert not any(p.exists() for p in mounts.values())


def test_a_stand_in_without_a_record_is_removed_at_start(tmp_path: Path) -> None:
    left = tmp_path / "state" / "mps" / "uid-killed" / "log"
    left.mkdir(parents=True)
    _driver(tmp_path, ClaimStore())
    assert not left.parent.exists()


@pytest.mark.parametrize(("mps", "field"), [
    ({"defaultActiveThreadPercentage": -1}, "defaultActiveThreadPercentage: -1 must be"),
    ({"defaultActiveThreadPercentage": float("nan")}, "defaultActiveThreadPercentage: nan"),
    ({"defaultActiveThreadPercentage": 50.0}, "defaultActiveThreadPercentage: 50.0 must be"),
    ({"defaultPinnedDeviceMemoryLimit": "-1Gi"}, "defaultPinnedDeviceMemoryLimit: '-1Gi'"),
    ({"defaultPinnedDeviceMemoryLimit": float("nan")}, "defaultPinnedDeviceMemoryLimit: nan"),
    ({"defaultPinnedDeviceMemoryLimit": "inf"}, "defaultPinnedDeviceMemoryLimit: 'inf'"),
    ({"defaultPinnedDeviceMemoryLimit": "1e9"}, "defaultPinnedDeviceMemoryLimit: '1e9'"),
    # A trailing newline passed a `$`-anchored match and reached the container's env.
    ({"defaultPinnedDeviceMemoryLimit": "1Gi\n"}, "defaultPinnedDeviceMemoryLimit: '1Gi\\n'"),
    ({"defaultPerDevicePinnedMemoryLimit": {"0": "-2Mi"}},
     "defaultPerDevicePinnedMemoryLimit.0: '-2Mi'"),
    ({"defaultPerDevicePinnedMemoryLimit": {"0": "2Mi\n"}},
     "defaultPerDevicePinnedMemoryLimit.0: '2Mi\\n'"),
])
def test_negative_nan_or_trailing_newline_figures_are_refused_naming_the_field(
        mps: dict[str, Any], field: str) -> None:
    with pytest.raises(sharing.ConfigError) as err:
        sharing.parse([opaque("FromClaim", gpu_config(strategy="MPS", mpsConfig=mps))],
                      DRIVER, OWN)
    assert f"claim config 1 (opaque.parameters).sharing.mpsConfig.{field}" in str(err.value)


@pytest.mark.parametrize("interval", [-1, float("nan"), float("inf"), "Long\n", 0])
def test_a_time_slicing_interval_that_is_no_interval_name_is_refused(interval: Any) -> None:
    with pytest.raises(sharing.ConfigError) as err:
        sharing.parse([opaque("FromClaim", gpu_config(
            strategy="TimeSlicing", timeSlicingConfig={"interval": interval}))], DRIVER, OWN)
    assert "sharing.timeSlicingConfig.interval: " in str(err.value)


@pytest.mark.parametrize(("argv", "message"), [
    (["--consumable-shares", "memory"], "--consumable-shares: NVIDIA's driver's option"),
    (["--nvidia-compat-release", "v25.3"], "--nvidia-compat-release: NVIDIA's driver's option"),
])
def test_nvidias_options_need_nvidias_driver_name(argv: list[str], message: str,
                                                  tmp_path: Path) -> None:
    # One line naming the flag, exit 2, before NVML is asked anything.
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "fakegpu", "plugin", "run", "--node", "n",
                          "--kubelet-root", str(tmp_path / "k"), "--cdi-root",
                          str(tmp_path / "c"), *argv], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
