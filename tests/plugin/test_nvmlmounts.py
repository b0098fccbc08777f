"""What a prepared claim's CDI spec adds so NVML and nvidia-smi work inside the container."""

from __future__ import annotations

from pathlib import Path

from fakegpu.plugin import nvmlmounts


def test_only_when_the_provider_opts_in_and_the_node_has_fake_nvml(tmp_path: Path) -> None:
    state = tmp_path / "n.state"
    assert nvmlmounts.from_env({"FAKEGPU_NVML_STATE": str(state)}) is None
    assert nvmlmounts.from_env({nvmlmounts.ENABLE_ENV: "1"}) is None
    got = nvmlmounts.from_env({nvmlmounts.ENABLE_ENV: "1", "FAKEGPU_NVML_STATE": str(state)})
    assert got is not None and got.state == state
    assert got.smi.is_file() and got.library.name == "libnvidia-ml.so.1"


def test_the_claims_view_and_read_only_mounts() -> None:
    mounts = nvmlmounts.NvmlMounts(Path("/s/n.state"), Path("/b/nvidia-smi"),
                                   Path("/l/libnvidia-ml.so.1"))
    edits = nvmlmounts.container_edits(mounts, ["GPU-a", "MIG-b"])
    assert edits["env"] == [f"FAKEGPU_NVML_STATE={nvmlmounts.STATE}",
                            "FAKEGPU_NVML_VISIBLE=GPU-a,MIG-b"]
    assert [(m["hostPath"], m["containerPath"]) for m in edits["mounts"]] == [
        ("/s/n.state", nvmlmounts.STATE), ("/b/nvidia-smi", "/usr/bin/nvidia-smi"),
        ("/l/libnvidia-ml.so.1", nvmlmounts.LIBRARY)]
    assert all("ro" in m["options"] for m in edits["mounts"])
    merged = nvmlmounts.merge({"env": ["A=1"], "mounts": [{"hostPath": "/mps"}]}, edits)
    assert merged["env"][0] == "A=1" and merged["mounts"][0] == {"hostPath": "/mps"}
    assert len(merged["mounts"]) == 4
