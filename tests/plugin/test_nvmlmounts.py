"""What a prepared claim's CDI spec adds so NVML and nvidia-smi work inside the container."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.plugin import nvmlmounts


def test_only_when_the_provider_opts_in_and_the_node_has_fake_nvml(tmp_path: Path) -> None:
    state = tmp_path / "n.state"
    assert nvmlmounts.from_env({"FAKEGPU_NVML_STATE": str(state)}) is None
    assert nvmlmounts.from_env({nvmlmounts.ENABLE_ENV: "1"}) is None
    got = nvmlmounts.from_env({nvmlmounts.ENABLE_ENV: "1", "FAKEGPU_NVML_STATE": str(state)})
    assert got is not None and got.state == state
    assert got.smi.is_file() and got.library.name == "libnvidia-ml.so.1"


def test_a_plugin_in_a_pod_names_the_nodes_paths() -> None:
    got = nvmlmounts.from_env({
        nvmlmounts.ENABLE_ENV: "1", "FAKEGPU_NVML_STATE": "/run/fakegpu/w1.state",
        nvmlmounts.NODE_STATE_DIR_ENV: "/var/lib/kubelet/pods/u/volumes/x/nvml-state",
        nvmlmounts.NODE_SMI_ENV: "/var/lib/fakegpu/bin/nvidia-smi",
        nvmlmounts.NODE_LIBRARY_ENV: "/var/lib/fakegpu/lib/libnvidia-ml.so.1"})
    assert got == nvmlmounts.NvmlMounts(
        Path("/var/lib/kubelet/pods/u/volumes/x/nvml-state/w1.state"),
        Path("/var/lib/fakegpu/bin/nvidia-smi"), Path("/var/lib/fakegpu/lib/libnvidia-ml.so.1"))


def test_the_claims_view_and_read_only_mounts() -> None:
    mounts = nvmlmounts.NvmlMounts(Path("/s/n.state"), Path("/b/nvidia-smi"),
                                   Path("/l/libnvidia-ml.so.1"))
    edits = nvmlmounts.container_edits(mounts)
    # Claim-wide the view is empty: each device's own edits add to it.
    assert edits["env"] == [f"FAKEGPU_NVML_STATE={nvmlmounts.STATE}",
                            "FAKEGPU_NVML_VISIBLE=none"]
    assert [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]] == [
        ("/s/n.state", nvmlmounts.STATE), ("/b/nvidia-smi", "/usr/bin/nvidia-smi"),
        ("/l/libnvidia-ml.so.1", nvmlmounts.LIBRARY)]
    assert all("ro" in m["options"] for m in edits["mounts"])
    merged = nvmlmounts.merge({"env": ["A=1"], "mounts": [{"hostPath": "/mps"}]}, edits)
    assert merged["env"][0] == "A=1" and merged["mounts"][0] == {"hostPath": "/mps"}
    assert len(merged["mounts"]) == 4


def test_a_claims_spec_carries_the_view_of_its_gpus(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    from fakegpu.kubeletplugin.claims import ClaimRef
    from fakegpu.plugin import cdi
    from fakegpu.plugin.prepare import plan_claim

    from .helpers import DRIVER, NODE, claim, inventory

    devices = inventory().by_name()
    plan = plan_claim(claim("c1", "uid-1", ["gpu-1", "gpu-3"]), ClaimRef("default", "c1", "uid-1"),
                      DRIVER, NODE, devices)
    assert "mounts" not in cdi.build_spec(DRIVER, plan)["containerEdits"]  # not opted in
    mounts = nvmlmounts.NvmlMounts(tmp_path / "n.state", tmp_path / "smi", tmp_path / "lib")
    monkeypatch.setattr(nvmlmounts, "configured", lambda: mounts)
    spec = cdi.build_spec(DRIVER, plan)
    edits = spec["containerEdits"]
    uuids = f"{devices['gpu-1'].uuid},{devices['gpu-3'].uuid}"
    assert "FAKEGPU_NVML_VISIBLE=none" in edits["env"]
    assert f"NVIDIA_VISIBLE_DEVICES={uuids}" in edits["env"]
    # Each device adds itself, so a container given one request of the claim sees only it.
    per_device = [[e for e in d["containerEdits"]["env"] if e.startswith("FAKEGPU_NVML_VIS")]
                  for d in spec["devices"]]
    assert per_device == [[f"FAKEGPU_NVML_VISIBLE_GPU_1={devices['gpu-1'].uuid}"],
                          [f"FAKEGPU_NVML_VISIBLE_GPU_3={devices['gpu-3'].uuid}"]]
    assert [m["containerPath"] for m in edits["mounts"]] == [
        nvmlmounts.STATE, nvmlmounts.SMI, nvmlmounts.LIBRARY]
