"""Prepare latency of the DRA plugin over its real gRPC socket, for 1, 10 and 100 concurrent
claims (one NodePrepareResources call per claim, all in flight at once, as a kubelet starting
many pods does). Each round unprepares everything, so every prepare does the full work:
file lock, checkpoint reload + fsync'd rewrite, CDI spec write.

Claims come from memory, not an apiserver: this measures the plugin, not the network.
Usage: python benchmarks/plugin_prepare.py [--rounds N]
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from fakegpu.plugin.discovery import Device, Inventory
from fakegpu.plugin.driver import Devices, Driver, DriverConfig
from fakegpu.plugin.proto import dra_v1_pb2, dra_v1_pb2_grpc
from fakegpu.plugin.server import PluginServers, socket_paths

DRIVER, NODE, GPUS = "gpu.fakegpu.dev", "bench-node", 8


def _inventory() -> Inventory:
    return Inventory("580.159.03", "13.0", tuple(Device(
        name=f"gpu-{i}", type="gpu", minor=i, uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000",
        product_name="NVIDIA H100 80GB HBM3", brand="Nvidia", architecture="Hopper",
        cuda_compute_capability="9.0", memory_bytes=80 << 30, pci_bus_id=f"0000:{i:02x}:00.0",
        pcie_root="pci0000:00") for i in range(GPUS)))


class MemoryClaims:
    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.claims[(namespace, name)])

    def replace_claim_status(self, claim: dict[str, Any]) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fgb-", dir="/tmp"))
    store = MemoryClaims()
    for i in range(100):
        store.claims[("bench", f"c{i}")] = {
            "metadata": {"namespace": "bench", "name": f"c{i}", "uid": f"uid-{i}"},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": f"gpu-{i % GPUS}"}]}}}}
    cfg = DriverConfig(driver=DRIVER, node=NODE, state_dir=root / "state", cdi_root=root / "cdi")
    servers = PluginServers(Driver(cfg, store, Devices(_inventory)),
                            socket_paths(root / "kubelet", DRIVER), workers=16)
    try:
        stub = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{servers.paths.dra}"))

        def prepare(i: int) -> float:
            start = time.perf_counter()
            r = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[
                dra_v1_pb2.Claim(namespace="bench", name=f"c{i}", uid=f"uid-{i}")]), timeout=60)
            assert r.claims[f"uid-{i}"].error == "", r.claims[f"uid-{i}"].error
            return time.perf_counter() - start

        everything = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[
            dra_v1_pb2.Claim(namespace="bench", name=f"c{i}", uid=f"uid-{i}") for i in range(100)])
        print(f"{'concurrent claims':>18} {'p50 ms':>8} {'p99 ms':>8} {'samples':>8}")
        for n in (1, 10, 100):
            samples: list[float] = []
            with ThreadPoolExecutor(max_workers=n) as pool:
                for _ in range(args.rounds):
                    samples += pool.map(prepare, range(n))
                    stub.NodeUnprepareResources(everything, timeout=60)
            cuts = statistics.quantiles(samples, n=100)
            print(f"{n:>18} {statistics.median(samples) * 1e3:>8.1f} {cuts[98] * 1e3:>8.1f} "
                  f"{len(samples):>8}")
    finally:
        servers.stop(1)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
