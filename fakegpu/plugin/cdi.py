"""Transient CDI specs, one per prepared claim, in the runtime's CDI directory.

Only environment edits: fake GPUs have no device nodes to inject. The runtime (containerd
2.x) merges the spec's top-level edits with those of each device a container gets, so the
claim-wide variables (NVIDIA_VISIBLE_DEVICES, DRA_ADMIN_ACCESS) sit at the top level.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fakegpu import fsutil

if TYPE_CHECKING:
    from .prepare import ClaimPlan

CDI_VERSION = "0.6.0"
CLASS = "gpu"


def kind(driver: str) -> str:
    return f"{driver}/{CLASS}"


def device_id(driver: str, claim_uid: str, device_name: str) -> str:
    """The fully qualified CDI device the kubelet hands to the runtime."""
    return f"{kind(driver)}={claim_uid}-{device_name}"


def spec_filename(driver: str, claim_uid: str) -> str:
    return f"{driver.replace('.', '_')}-claim_{claim_uid}.json"


def _env_name(device_name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", device_name.upper())


def build_spec(driver: str, plan: ClaimPlan) -> dict[str, Any]:
    uuids = ",".join(d.device.uuid for d in plan.devices)
    claim_env = [f"NVIDIA_VISIBLE_DEVICES={uuids}",
                 f"FAKEGPU_CLAIM={plan.ref.namespace}/{plan.ref.name}",
                 f"FAKEGPU_CLAIM_UID={plan.ref.uid}"]
    if plan.admin_access:
        claim_env.append("DRA_ADMIN_ACCESS=true")
    devices = []
    for alloc in plan.devices:
        dev, prefix = alloc.device, f"FAKEGPU_DEVICE_{_env_name(alloc.device.name)}"
        devices.append({
            "name": f"{plan.ref.uid}-{dev.name}",
            "containerEdits": {"env": [
                f"{prefix}_UUID={dev.uuid}",
                f"{prefix}_PRODUCT_NAME={dev.product_name}",
                f"{prefix}_PCI_BUS_ID={dev.pci_bus_id}",
                f"{prefix}_TYPE={dev.type}",
                f"{prefix}_REQUEST={alloc.request}",
            ]},
        })
    return {"cdiVersion": CDI_VERSION, "kind": kind(driver),
            "containerEdits": {"env": claim_env}, "devices": devices}


def stage_spec(cdi_root: Path, filename: str, spec: dict[str, Any]) -> Path:
    """The spec in a synced temp file; the caller renames it to ``cdi_root/filename``.

    The temp name (``.<filename>.<random>.tmp``, fsutil's) is dot-prefixed and not ``.json``:
    CDI loaders read only ``*.json`` / ``*.yaml``, so the runtime never sees half a spec.
    """
    return fsutil.write_temp(Path(cdi_root) / filename, json.dumps(spec, indent=1), mode=0o644)


def write_spec(cdi_root: Path, filename: str, spec: dict[str, Any]) -> Path:
    """Atomic write: the runtime watches the directory and must never read half a spec."""
    return fsutil.atomic_write(Path(cdi_root) / filename, json.dumps(spec, indent=1), mode=0o644)


def remove_spec(cdi_root: Path, filename: str) -> None:
    (Path(cdi_root) / filename).unlink(missing_ok=True)


def remove_stale_temps(cdi_root: Path, driver: str) -> list[Path]:
    """Temp files a killed writer of this driver left (other drivers' files stay)."""
    if not Path(cdi_root).is_dir():
        return []
    return fsutil.remove_stale_temps(cdi_root, spec_filename(driver, "*"))
