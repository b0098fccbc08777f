"""Prepare + unprepare latency of a DRA kubelet plugin over its real gRPC socket, at 1, 10
and 100 concurrent claims: each of N workers prepares its own claim (NodePrepareResources, v1,
one claim per call, as the kubelet sends a one-claim pod's) and unprepares it again, --rounds
times, so every prepare does the full work.

Two setups:

- default: fakegpu's plugin in this process, claims from memory (no apiserver): the plugin's
  own cost (gRPC, files, fsyncs, locks), with the client sharing its GIL.
- ``--apiserver``: a real etcd + kube-apiserver from the cached Kubernetes binaries (it says so
  and exits 0 when they are not cached; it never builds them). The claims are created and
  allocated through the API; the plugin runs as its own process (``fakegpu plugin run`` on a
  fake NVML node, hgx-h200: 8 GPUs), reads every claim and writes its device status, as on a
  node. ``--external CMD`` drives another plugin instead, under the same apiserver and client
  (e.g. the upstream example driver, built outside this tree): CMD is run through the shell
  with {kubeconfig}, {root} and {node} substituted, and must serve
  ``{root}/kubelet/plugins/<--external-driver>/dra.sock`` for devices gpu-0..gpu-7 of pool
  {node}.

With ``--hold N`` (in-process) one call first prepares N more claims while single claims
are timed alongside, and the table is then measured with the N claims held.

Usage: python benchmarks/plugin_prepare.py [--rounds N] [--hold N] [--apiserver [--external
       CMD --external-driver NAME]] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from fakegpu.plugin.discovery import Device, Inventory
from fakegpu.plugin.driver import Devices, Driver, DriverConfig
from fakegpu.plugin.proto import dra_v1_pb2, dra_v1_pb2_grpc
from fakegpu.plugin.server import PluginServers, socket_alive, socket_paths

DRIVER, GPUS, CLAIMS, NAMESPACE = "gpu.fakegpu.dev", 8, 100, "bench"
REPO = Path(__file__).resolve().parents[1]
CONCURRENCY = (1, 10, 100)
MIN_SAMPLES = 200  # per concurrency: --rounds per worker, or more when that gives fewer


def _inventory() -> Inventory:
    return Inventory("580.159.03", "13.0", tuple(Device(
        name=f"gpu-{i}", type="gpu", minor=i, uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000",
        product_name="NVIDIA H100 80GB HBM3", brand="Nvidia", architecture="Hopper",
        cuda_compute_capability="9.0", memory_bytes=80 << 30, pci_bus_id=f"0000:{i:02x}:00.0",
        pcie_root="pci0000:00") for i in range(GPUS)))


def _claim(i: int, driver: str, node: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": NAMESPACE, "name": f"c{i}", "uid": f"uid-{i}"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": driver}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": driver, "pool": node,
                 "device": f"gpu-{i % GPUS}"}]}}}}


class MemoryClaims:
    def __init__(self, node: str, count: int = CLAIMS) -> None:
        self.claims = {(NAMESPACE, f"c{i}"): _claim(i, DRIVER, node) for i in range(count)}
        self.lock = threading.Lock()

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.claims[(namespace, name)])

    def replace_claim_status(self, claim: dict[str, Any]) -> None:
        with self.lock:
            key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
            self.claims[key]["status"] = copy.deepcopy(claim["status"])


@contextmanager
def in_process(root: Path, hold: int) -> Iterator[tuple[Path, dict[str, str]]]:
    node = "bench-node"
    cfg = DriverConfig(driver=DRIVER, node=node, state_dir=root / "state", cdi_root=root / "cdi",
                       write_status=True)
    driver = Driver(cfg, MemoryClaims(node, CLAIMS + hold), Devices(_inventory))
    servers = PluginServers(driver, socket_paths(root / "kubelet", DRIVER), workers=32)
    try:
        if hold:
            hold_claims(servers.paths.dra, hold)
        yield servers.paths.dra, {f"c{i}": f"uid-{i}" for i in range(CLAIMS)}
    finally:
        servers.stop(1)
        driver.close()


@contextmanager
def with_apiserver(root: Path, external: str | None,
                   external_driver: str) -> Iterator[tuple[Path, dict[str, str]]]:
    from kubernetes import client, config

    from fakegpu.cluster.controlplane import ControlPlane
    from fakegpu.nvml import env as nvml
    from fakegpu.nvml import state
    from fakegpu.topology.load import load_topology

    bins = _control_plane_binaries()
    if bins is None:
        print("no cached kube-apiserver + etcd (fakegpu cluster up builds them): "
              "--apiserver skipped")
        sys.exit(0)
    topology = load_topology(REPO / "fixtures" / "hgx-h200.yaml")
    node = topology.nodes[0].name
    driver = external_driver if external else DRIVER
    with ControlPlane(root / "cp", bins, controllers=False) as cp:
        api = config.new_client_from_config(str(cp.kubeconfig))
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        # The node exists, as on a cluster: a plugin that publishes slices finds it.
        core.create_node({"metadata": {"name": node}})
        objects = client.CustomObjectsApi(api)
        uids = {}
        for i in range(CLAIMS):
            body = _claim(i, driver, node)
            allocation = body.pop("status")
            del body["metadata"]["uid"]
            made = objects.create_namespaced_custom_object(
                "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", body)
            made["status"] = allocation
            objects.replace_namespaced_custom_object_status(
                "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", f"c{i}", made)
            uids[f"c{i}"] = made["metadata"]["uid"]
        log = (root / "plugin.log").open("w")
        for sub in ("plugins_registry", "plugins"):  # what a kubelet has made
            (root / "kubelet" / sub).mkdir(parents=True, exist_ok=True)
        if external:
            command = external.format(kubeconfig=cp.kubeconfig, root=root, node=node)
            proc = subprocess.Popen(command, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        else:
            path = state.render(topology, node, root / "node.state")
            proc = subprocess.Popen(
                [sys.executable, "-m", "fakegpu", "plugin", "run", "--node-name", node,
                 "--driver-name", DRIVER, "--kubeconfig", str(cp.kubeconfig),
                 "--kubelet-root", str(root / "kubelet"), "--cdi-root", str(root / "cdi"),
                 "--no-slices"],
                env={**os.environ, **nvml.env(path)}, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        sock = root / "kubelet" / "plugins" / driver / "dra.sock"
        try:
            deadline = time.monotonic() + 60
            while not socket_alive(sock):  # accepting, not merely created
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the plugin did not start; see {root / 'plugin.log'}:\n"
                                     + (root / "plugin.log").read_text()[-2000:])
                time.sleep(0.1)
            yield sock, uids
            written = sum(
                any(d.get("driver") == driver for d in (c.get("status") or {}).get("devices") or [])
                for c in objects.list_namespaced_custom_object(
                    "resource.k8s.io", "v1", NAMESPACE, "resourceclaims")["items"])
            print(f"claims with status.devices written by {driver}: {written}/{CLAIMS}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
            log.close()
            noisy = [line for line in (root / "plugin.log").read_text().splitlines()
                     if "WARN" in line or "ERROR" in line or line.startswith(("W1", "E1"))]
            print(f"plugin log: {len(noisy)} warning/error lines"
                  + "".join(f"\n  {line[:160]}" for line in noisy[:5]))


def hold_claims(sock: Path, hold: int) -> None:
    """Prepare ``hold`` more claims in ONE call (the issue's 10,000-claim batch) while another
    client prepares and unprepares a single claim over and over; the node then holds them."""
    stub = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{sock}"))
    batch = dra_v1_pb2.NodePrepareResourcesRequest(claims=[
        dra_v1_pb2.Claim(namespace=NAMESPACE, name=f"c{i}", uid=f"uid-{i}")
        for i in range(CLAIMS, CLAIMS + hold)])
    done = threading.Event()
    singles: list[float] = []

    def single() -> None:
        claim = dra_v1_pb2.Claim(namespace=NAMESPACE, name="c0", uid="uid-0")
        while not done.is_set():
            start = time.perf_counter()
            stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim]),
                                      timeout=600)
            stub.NodeUnprepareResources(dra_v1_pb2.NodeUnprepareResourcesRequest(
                claims=[claim]), timeout=600)
            singles.append(time.perf_counter() - start)

    side = threading.Thread(target=single)
    side.start()
    start = time.perf_counter()
    answer = stub.NodePrepareResources(batch, timeout=3600)
    took = time.perf_counter() - start
    done.set()
    side.join()
    assert all(not c.error for c in answer.claims.values()), "the batch had errors"
    print(f"one call preparing {hold} claims: {took:.1f} s; meanwhile {len(singles)} "
          f"single-claim prepare+unprepare pairs, p50 {statistics.median(singles) * 1e3:.1f} ms, "
          f"max {max(singles) * 1e3:.1f} ms; the node now holds {hold} claims", flush=True)


def _control_plane_binaries() -> Any:
    """kube-apiserver and etcd from the binary cache, or None: only those two are needed."""
    from types import SimpleNamespace

    from fakegpu.cluster import binaries, bincache

    version = binaries.resolve_version(None)
    found = {}
    for recipe in binaries.recipes(version):
        if recipe.component.key in ("kubernetes", "etcd"):
            if bincache.load_manifest(recipe.component) is None:
                return None
            found[recipe.component.key] = bincache.entry_dir(recipe.component) / "bin"
    k8s = found["kubernetes"]
    return SimpleNamespace(k8s_version=version, kube_apiserver=k8s / "kube-apiserver",
                           kube_controller_manager=k8s / "kube-controller-manager",
                           kube_scheduler=k8s / "kube-scheduler", kubectl=k8s / "kubectl",
                           etcd=found["etcd"] / "etcd")


def measure(sock: Path, uids: dict[str, str], rounds: int, report: Callable[[str], None],
            concurrency: tuple[int, ...] = CONCURRENCY) -> dict[str, Any]:
    stub = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{sock}"))

    def one(i: int, rounds: int) -> list[tuple[float, float]]:
        claim = dra_v1_pb2.Claim(namespace=NAMESPACE, name=f"c{i}", uid=uids[f"c{i}"])
        pairs = []
        for _ in range(rounds):
            start = time.perf_counter()
            r = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim]), timeout=120)
            assert r.claims[claim.uid].error == "", r.claims[claim.uid].error
            mid = time.perf_counter()
            u = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=120)
            assert u.claims[claim.uid].error == "", u.claims[claim.uid].error
            pairs.append((mid - start, time.perf_counter() - mid))
        return pairs

    one(0, 3)  # warm up: connections, caches
    results: dict[str, Any] = {}
    report(f"{'concurrent':>10} {'prepare p50':>12} {'p99':>8} {'unprepare p50':>14} {'p99':>8} "
           f"{'both p50':>9} {'p99':>8} {'samples':>8}   (ms)")
    for n in concurrency:
        repeat = max(rounds, -(-MIN_SAMPLES // n))  # enough samples for a p99 at n=1 too
        with ThreadPoolExecutor(max_workers=n) as pool:
            pairs = [p for got in pool.map(one, range(n), [repeat] * n) for p in got]
        row = {}
        for label, values in (("prepare", [p for p, _ in pairs]),
                              ("unprepare", [u for _, u in pairs]),
                              ("both", [p + u for p, u in pairs])):
            cuts = statistics.quantiles(values, n=100) if len(values) > 1 else values * 99
            row[label] = {"p50": statistics.median(values) * 1e3, "p99": cuts[98] * 1e3}
        results[str(n)] = {**row, "samples": len(pairs)}
        report(f"{n:>10} {row['prepare']['p50']:>12.1f} {row['prepare']['p99']:>8.1f} "
               f"{row['unprepare']['p50']:>14.1f} {row['unprepare']['p99']:>8.1f} "
               f"{row['both']['p50']:>9.1f} {row['both']['p99']:>8.1f} {len(pairs):>8}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--apiserver", action="store_true",
                        help="a real kube-apiserver (cached binaries), the plugin as a process")
    parser.add_argument("--external", metavar="CMD",
                        help="with --apiserver: drive this plugin command instead of fakegpu's")
    parser.add_argument("--external-driver", default="gpu.example.com", metavar="NAME")
    parser.add_argument("--hold", type=int, default=0, metavar="N",
                        help="in-process only: first prepare N more claims in one call (and "
                             "time single claims meanwhile), then measure with them held")
    parser.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)),
                        metavar="N,N", help="concurrent claims to measure "
                                            "(default: %(default)s, at most 100)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    concurrency = tuple(int(n) for n in args.concurrency.split(","))
    if not all(1 <= n <= CLAIMS for n in concurrency):
        parser.error(f"--concurrency: each between 1 and {CLAIMS}")
    if args.external and not args.apiserver:
        parser.error("--external needs --apiserver (the other plugin reads its claims there)")
    root = Path(tempfile.mkdtemp(prefix="fgb-", dir="/tmp"))
    try:
        setup = (with_apiserver(root, args.external, args.external_driver) if args.apiserver
                 else in_process(root, args.hold))
        with setup as (sock, uids):
            print(f"plugin: {shlex.quote(args.external) if args.external else 'fakegpu'}; "
                  f"{'apiserver' if args.apiserver else 'claims from memory'}; "
                  f"rounds {args.rounds}", flush=True)
            results = measure(sock, uids, args.rounds, lambda line: print(line, flush=True),
                              concurrency)
        if args.json:
            args.json.write_text(json.dumps({"external": args.external,
                                             "apiserver": args.apiserver,
                                             "rounds": args.rounds, "results": results},
                                            indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
