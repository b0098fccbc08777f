"""Transient CDI specs, one per prepared claim, in the runtime's CDI directory.

Only environment edits: fake GPUs have no device nodes to inject. The runtime (containerd
2.x) merges the spec's top-level edits with those of each device a container gets, so the
claim-wide variables (NVIDIA_VISIBLE_DEVICES, DRA_ADMIN_ACCESS) sit at the top level.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def write_spec(cdi_root: Path, filename: str, spec: dict[str, Any]) -> Path:
    """Atomic write: the runtime watches the directory and must never read half a spec."""
    cdi_root = Path(cdi_root)
    cdi_root.mkdir(parents=True, exist_ok=True)
    target = cdi_root / filename
    # A dot-prefixed, non-.json temp name: CDI loaders only read *.json / *.yaml.
    fd, tmp = tempfile.mkstemp(dir=cdi_root, prefix=f".{filename}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(spec, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def remove_spec(cdi_root: Path, filename: str) -> None:
    (Path(cdi_root) / filename).unlink(missing_ok=True)
