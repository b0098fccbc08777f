"""Transient CDI specs, one per prepared claim, in the runtime's CDI directory.

Only environment edits: fake GPUs have no device nodes to inject. The runtime (containerd
2.x) merges the spec's top-level edits with those of each device a container gets, so the
claim-wide variables (NVIDIA_VISIBLE_DEVICES, DRA_ADMIN_ACCESS) sit at the top level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fakegpu.kubeletplugin import cdispec

from . import devmetadata, nvmlmounts, sharing

if TYPE_CHECKING:
    from .prepare import ClaimPlan

CLASS = "gpu"


def kind(driver: str) -> str:
    return f"{driver}/{CLASS}"


def device_id(driver: str, claim_uid: str, device_name: str) -> str:
    """The fully qualified CDI device the kubelet hands to the runtime."""
    return cdispec.device_id(kind(driver), f"{claim_uid}-{device_name}")


def metadata_device_id(driver: str, claim_uid: str, request: str) -> str:
    """The CDI device that mounts one request's device metadata file (devmetadata.py)."""
    return cdispec.device_id(kind(driver), f"{claim_uid}-metadata-{request}")


def _env_name(device_name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", device_name.upper())


def build_spec(driver: str, plan: ClaimPlan, mps_dir: Path | None = None,
               metadata: Mapping[str, Path] | None = None) -> dict[str, Any]:
    """The claim's CDI spec. ``mps_dir``: the claim's MPS stand-in directory (``pipe/``,
    ``log/``), mounted where NVIDIA's MPS daemon's pipes and fakegpu's stand-in log appear.
    ``metadata``: request -> its device metadata file, mounted read-only where
    devmetadata.container_path says, by a device of its own (``metadata_device_id``)."""
    uuids = ",".join(d.device.uuid for d in plan.devices)
    claim_env = [f"NVIDIA_VISIBLE_DEVICES={uuids}",
                 f"FAKEGPU_CLAIM={plan.ref.namespace}/{plan.ref.name}",
                 f"FAKEGPU_CLAIM_UID={plan.ref.uid}"]
    if plan.admin_access:
        claim_env.append("DRA_ADMIN_ACCESS=true")
    devices = []
    nvml = nvmlmounts.configured()  # NVML, nvidia-smi and a view of the container's devices
    for index, alloc in enumerate(plan.devices):
        dev, prefix = alloc.device, f"FAKEGPU_DEVICE_{_env_name(alloc.device.name)}"
        devices.append({
            "name": f"{plan.ref.uid}-{dev.name}",
            "containerEdits": {"env": [
                f"{prefix}_UUID={dev.uuid}",
                f"{prefix}_PRODUCT_NAME={dev.product_name}",
                f"{prefix}_PCI_BUS_ID={dev.pci_bus_id}",
                f"{prefix}_TYPE={dev.type}",
                f"{prefix}_REQUEST={alloc.request}",
                *([f"{prefix}_SHARE_ID={alloc.share_id}"] if alloc.share_id else ()),
                *(sharing.env(prefix, alloc.sharing, index, dev.uuid)
                  if alloc.sharing is not None else ()),
                *([nvmlmounts.device_env(_env_name(dev.name), dev.uuid)]
                  if nvml is not None and dev.uuid else ()),
            ]},
        })
    for request, host_file in sorted((metadata or {}).items()):
        devices.append({
            "name": f"{plan.ref.uid}-metadata-{request}",
            "containerEdits": {"mounts": [{
                "hostPath": str(host_file),
                "containerPath": devmetadata.container_path(
                    driver, plan.ref.name, plan.pod_claim, request),
                "options": ["ro", "nosuid", "nodev", "bind"]}]},
        })
    edits: dict[str, Any] = {"env": claim_env}
    if mps_dir is not None:
        claim_env.append(f"CUDA_MPS_LOG_DIRECTORY={sharing.MPS_LOG_DIRECTORY}")
        edits["mounts"] = [
            {"hostPath": str(mps_dir / sub), "containerPath": where,
             "options": ["rw", "nosuid", "nodev", "bind"]}
            for sub, where in (("pipe", sharing.MPS_PIPE_DIRECTORY),
                               ("log", sharing.MPS_LOG_DIRECTORY))]
    if nvml is not None:
        edits = nvmlmounts.merge(edits, nvmlmounts.container_edits(nvml))
    return {"cdiVersion": cdispec.CDI_VERSION, "kind": kind(driver), "containerEdits": edits,
            "devices": devices}
