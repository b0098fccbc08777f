"""Shared test data: devices, claims, and an in-memory claim store (a stand-in apiserver)."""

from __future__ import annotations

import copy
import threading
from typing import Any

from fakegpu import drivers
from fakegpu.plugin.discovery import Device, Inventory

DRIVER = drivers.FAKEGPU
NODE = "node-a"


def gpu(minor: int, product: str = "NVIDIA H100 80GB HBM3") -> Device:
    return Device(name=f"gpu-{minor}", type="gpu", minor=minor,
                  uuid=f"GPU-{minor:08x}-1111-2222-3333-444455556666", product_name=product,
                  brand="Nvidia", architecture="Hopper", cuda_compute_capability="9.0",
                  memory_bytes=81559 << 20, pci_bus_id=f"0000:{0x18 + minor:02x}:00.0",
                  pcie_root=f"pci0000:{0x18 + minor:02x}", clique_id="", nvlink_peers=7)


def inventory(count: int = 4) -> Inventory:
    return Inventory(driver_version="580.159.03", cuda_driver_version="13.0",
                     devices=tuple(gpu(i) for i in range(count)))


def claim(name: str, uid: str, devices: list[str], namespace: str = "default",
          driver: str = DRIVER, pool: str = NODE, admin: bool = False,
          allocated: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpus"}]}},
        "status": {},
    }
    if allocated:
        obj["status"]["allocation"] = {"devices": {"results": [
            {"request": "gpus", "driver": driver, "pool": pool, "device": d,
             **({"adminAccess": True} if admin else {})} for d in devices]}}
    return obj


class ClaimStore:
    """Holds claims by namespace/name; answers like the apiserver (KeyError-ish -> error)."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.status_writes = 0
        self._lock = threading.Lock()

    def add(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self.claims[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self._lock:
            try:
                return copy.deepcopy(self.claims[(namespace, name)])
            except KeyError:
                raise LookupError(
                    f"resourceclaims.resource.k8s.io {name!r} not found in {namespace}") from None

    def list_claims(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(c) for c in self.claims.values()]

    def replace_claim_status(self, obj: dict[str, Any]) -> None:
        with self._lock:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            self.claims[key]["status"] = copy.deepcopy(obj["status"])
            self.status_writes += 1
