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
from benchlib import load_average, machine
from peers import EXAMPLE_DRIVER_GIT, example_driver

from fakegpu import drivers
from fakegpu.kubeletplugin.proto import dra_v1_pb2, dra_v1_pb2_grpc
from fakegpu.kubeletplugin.server import PluginServers
from fakegpu.kubeletplugin.sockets import socket_alive, socket_paths
from fakegpu.plugin.discovery import Device, Inventory
from fakegpu.plugin.driver import Devices, Driver, DriverConfig
from fakegpu.topology.packaged import FIXTURES

DRIVER, GPUS, CLAIMS, NAMESPACE = drivers.FAKEGPU, 8, 100, "bench"
REPO = Path(__file__).resolve().parents[1]
CONCURRENCY = (1, 10, 100)
MIN_SAMPLES = 200  # per concurrency: --rounds per worker, or more when that gives fewer
# The example driver as the benchmark runs it: writing device status as fakegpu does, and with
# client limits that do not throttle it (its defaults, 5 qps and burst 10, would measure them).
EXAMPLE_COMMAND = ("{binary} --node-name {node} --cdi-root {root}/cdi-example "
                   "--kubelet-registrar-directory-path {root}/kubelet/plugins_registry "
                   "--kubelet-plugins-directory-path {root}/kubelet/plugins "
                   "--kubeconfig {kubeconfig} --gpu-device-status "
                   "--kube-api-qps 1000 --kube-api-burst 1000")


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
def control_plane(root: Path) -> Iterator[tuple[Path, Any]]:
    """A real etcd + kube-apiserver (cached binaries), the benchmark's namespace and node:
    (kubeconfig, CustomObjectsApi)."""
    from kubernetes import client, config

    from fakegpu.cluster.embedded.controlplane import ControlPlane

    bins = _control_plane_binaries()
    if bins is None:
        print("no cached kube-apiserver + etcd (fakegpu cluster up builds them): "
              "--apiserver skipped")
        sys.exit(0)
    with ControlPlane(root / "cp", bins, controllers=False) as cp:
        api = config.new_client_from_config(str(cp.kubeconfig))
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        # The node exists, as on a cluster: a plugin that publishes slices finds it.
        core.create_node({"metadata": {"name": _node()}})
        for sub in ("plugins_registry", "plugins"):  # what a kubelet has made
            (root / "kubelet" / sub).mkdir(parents=True, exist_ok=True)
        yield cp.kubeconfig, client.CustomObjectsApi(api)


def _node() -> str:
    from fakegpu.topology.load import load_topology

    return load_topology(FIXTURES / "hgx-h200.yaml").nodes[0].name


def create_claims(objects: Any, driver: str, prefix: str = "c") -> dict[str, str]:
    """CLAIMS claims allocated to ``driver`` on the node, named <prefix><i>: name -> uid."""
    uids = {}
    for i in range(CLAIMS):
        body = _claim(i, driver, _node())
        body["metadata"]["name"] = f"{prefix}{i}"
        allocation = body.pop("status")
        del body["metadata"]["uid"]
        made = objects.create_namespaced_custom_object(
            "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", body)
        made["status"] = allocation
        objects.replace_namespaced_custom_object_status(
            "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", f"{prefix}{i}", made)
        uids[f"{prefix}{i}"] = made["metadata"]["uid"]
    return uids


@contextmanager
def plugin_process(root: Path, kubeconfig: Path, objects: Any, external: str | None,
                   driver: str) -> Iterator[Path]:
    """fakegpu's plugin (or ``external``) as its own process, serving ``driver``: its socket.
    On the way out: how many claims it wrote status for, and its warnings."""
    from fakegpu.nvml import env as nvml
    from fakegpu.nvml import state
    from fakegpu.topology.load import load_topology

    node = _node()
    logfile = root / f"plugin-{driver}.log"
    log = logfile.open("w")
    if external:
        command = external.format(kubeconfig=kubeconfig, root=root, node=node)
        proc = subprocess.Popen(command, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    else:
        topology = load_topology(FIXTURES / "hgx-h200.yaml")
        path = state.render(topology, node, root / "node.state")
        proc = subprocess.Popen(
            [sys.executable, "-m", "fakegpu", "plugin", "run", "--node", node,
             "--driver", DRIVER, "--kubeconfig", str(kubeconfig),
             "--kubelet-root", str(root / "kubelet"), "--cdi-root", str(root / "cdi"),
             "--no-slices"],
            env={**os.environ, **nvml.env(path)}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    sock = root / "kubelet" / "plugins" / driver / "dra.sock"
    try:
        deadline = time.monotonic() + 60
        while not socket_alive(sock):  # accepting, not merely created
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the plugin did not start; see {logfile}:\n"
                                 + logfile.read_text()[-2000:])
            time.sleep(0.1)
        yield sock
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
        noisy = [line for line in logfile.read_text().splitlines()
                 if "WARN" in line or "ERROR" in line or line.startswith(("W1", "E1"))]
        print(f"plugin {driver} log: {len(noisy)} warning/error lines"
              + "".join(f"\n  {line[:160]}" for line in noisy[:5]))


@contextmanager
def with_apiserver(root: Path, external: str | None,
                   external_driver: str) -> Iterator[tuple[Path, dict[str, str]]]:
    driver = external_driver if external else DRIVER
    with control_plane(root) as (kubeconfig, objects):
        uids = create_claims(objects, driver)
        with plugin_process(root, kubeconfig, objects, external, driver) as sock:
            yield sock, uids


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

    from fakegpu.cluster.artifacts import binaries, bincache

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


Pair = tuple[float, float]  # (prepare, unprepare) seconds


def pairs(sock: Path, uids: dict[str, str], workers: int, repeat: int) -> list[Pair]:
    """``workers`` clients at once, each preparing and unpreparing its own claim (the i-th of
    ``uids``) ``repeat`` times over one channel: every (prepare, unprepare) duration."""
    stub = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{sock}"))
    names = list(uids)

    def one(i: int) -> list[Pair]:
        claim = dra_v1_pb2.Claim(namespace=NAMESPACE, name=names[i], uid=uids[names[i]])
        got = []
        for _ in range(repeat):
            start = time.perf_counter()
            r = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim]), timeout=120)
            assert r.claims[claim.uid].error == "", r.claims[claim.uid].error
            mid = time.perf_counter()
            u = stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=120)
            assert u.claims[claim.uid].error == "", u.claims[claim.uid].error
            got.append((mid - start, time.perf_counter() - mid))
        return got

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return [p for got in pool.map(one, range(workers)) for p in got]


def summarize(measured: list[Pair]) -> dict[str, Any]:
    """p50 and p99 in ms of prepare, unprepare and the pair, and the sample count."""
    row: dict[str, Any] = {}
    for label, values in (("prepare", [p for p, _ in measured]),
                          ("unprepare", [u for _, u in measured]),
                          ("both", [p + u for p, u in measured])):
        cuts = statistics.quantiles(values, n=100) if len(values) > 1 else values * 99
        row[label] = {"p50": statistics.median(values) * 1e3, "p99": cuts[98] * 1e3}
    return {**row, "samples": len(measured)}


def repeats(rounds: int, workers: int) -> int:
    return max(rounds, -(-MIN_SAMPLES // workers))  # enough samples for a p99 at n=1 too


HEADER = (f"{'concurrent':>10} {'prepare p50':>12} {'p99':>8} {'unprepare p50':>14} {'p99':>8} "
          f"{'both p50':>9} {'p99':>8} {'samples':>8}   (ms)")


def row_line(n: int, row: dict[str, Any]) -> str:
    return (f"{n:>10} {row['prepare']['p50']:>12.1f} {row['prepare']['p99']:>8.1f} "
            f"{row['unprepare']['p50']:>14.1f} {row['unprepare']['p99']:>8.1f} "
            f"{row['both']['p50']:>9.1f} {row['both']['p99']:>8.1f} {row['samples']:>8}")


def measure(sock: Path, uids: dict[str, str], rounds: int, report: Callable[[str], None],
            concurrency: tuple[int, ...] = CONCURRENCY) -> dict[str, Any]:
    pairs(sock, uids, 1, 3)  # warm up: connections, caches
    results: dict[str, Any] = {}
    report(HEADER)
    for n in concurrency:
        results[str(n)] = summarize(pairs(sock, uids, n, repeats(rounds, n)))
        report(row_line(n, results[str(n)]))
    return results


def compare(sockets: dict[str, tuple[Path, dict[str, str]]], rounds: int, blocks: int,
            concurrency: tuple[int, ...], report: Callable[[str], None]) -> dict[str, Any]:
    """The plugins side by side, interleaved: at each concurrency, ``blocks`` blocks per
    plugin alternate (A B, then B A, ...), each a share of the samples, so drift in the
    machine's load falls on both alike. Per plugin and concurrency: the summary over all its
    blocks."""
    for sock, uids in sockets.values():
        pairs(sock, uids, 1, 3)  # warm up
    names = list(sockets)
    results: dict[str, dict[str, Any]] = {name: {} for name in names}
    for n in concurrency:
        per_block = -(-repeats(rounds, n) // blocks)
        got: dict[str, list[Pair]] = {name: [] for name in names}
        for b in range(blocks):
            for name in names if b % 2 == 0 else names[::-1]:
                sock, uids = sockets[name]
                got[name] += pairs(sock, uids, n, per_block)
        for name in names:
            results[name][str(n)] = summarize(got[name])
        report(f"{n} concurrent: " + "; ".join(
            f"{name} prepare p50 {results[name][str(n)]['prepare']['p50']:.1f} ms "
            f"p99 {results[name][str(n)]['prepare']['p99']:.1f} ms" for name in names))
    return results


def ratios(results: dict[str, dict[str, Any]], numerator: str, denominator: str
           ) -> dict[str, dict[str, float]]:
    """numerator's latency over denominator's per concurrency, for prepare p50 and p99 (below
    1: numerator is faster)."""
    return {n: {q: results[numerator][n]["prepare"][q] / results[denominator][n]["prepare"][q]
                for q in ("p50", "p99")}
            for n in results[numerator]}


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
    parser.add_argument("--compare", action="store_true",
                        help="fakegpu's plugin and the other one (--external, by default the "
                             "upstream example driver built by peers.py) side by side under "
                             "one apiserver and client, interleaved")
    parser.add_argument("--blocks", type=int, default=4,
                        help="with --compare: alternating blocks per plugin and concurrency")
    parser.add_argument("--example-git", type=Path, default=EXAMPLE_DRIVER_GIT,
                        metavar="GIT_DIR", help="with --compare: the example driver's source")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    concurrency = tuple(int(n) for n in args.concurrency.split(","))
    if not all(1 <= n <= CLAIMS for n in concurrency):
        parser.error(f"--concurrency: each between 1 and {CLAIMS}")
    if args.external and not (args.apiserver or args.compare):
        parser.error("--external needs --apiserver (the other plugin reads its claims there)")
    if args.compare:
        run_compare(args, concurrency)
        return
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
        _write(args.json, {"benchmark": "plugin_prepare", "machine": machine(),
                           "load_average": load_average(), "external": args.external,
                           "apiserver": args.apiserver, "rounds": args.rounds,
                           "results": results})
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_compare(args: argparse.Namespace, concurrency: tuple[int, ...]) -> None:
    external, peer_name, source = args.external, "external", args.external
    if external is None:
        peer = example_driver(args.example_git)
        if peer.path is None:
            print(f"the example driver was not built: {peer.reason}; nothing compared")
            _write(args.json, {"benchmark": "plugin_prepare_compare", "machine": machine(),
                               "peer": {"name": "dra-example-driver", "built": False,
                                        "reason": peer.reason}})
            return
        external = EXAMPLE_COMMAND.replace("{binary}", shlex.quote(str(peer.path)))
        peer_name, source = "dra-example-driver", peer.source
    root = Path(tempfile.mkdtemp(prefix="fgb-", dir="/tmp"))
    load_before = load_average()
    started = time.time()
    try:
        with control_plane(root) as (kubeconfig, objects):
            ours = create_claims(objects, DRIVER, "f")
            theirs = create_claims(objects, args.external_driver, "e")
            with plugin_process(root, kubeconfig, objects, None, DRIVER) as fg_sock, \
                    plugin_process(root, kubeconfig, objects, external,
                                   args.external_driver) as peer_sock:
                print(f"fakegpu vs {peer_name} ({source}); one apiserver, one client; "
                      f"rounds {args.rounds}, {args.blocks} blocks each", flush=True)
                results = compare({"fakegpu": (fg_sock, ours), peer_name: (peer_sock, theirs)},
                                  args.rounds, args.blocks, concurrency,
                                  lambda line: print(line, flush=True))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(HEADER)
    for name, rows in results.items():
        print(name)
        for n, row in rows.items():
            print(row_line(int(n), row))
    over = ratios(results, "fakegpu", peer_name)
    for n, r in over.items():
        print(f"fakegpu / {peer_name} at {n}: prepare p50 {r['p50']:.2f}, p99 {r['p99']:.2f}")
    _write(args.json, {"benchmark": "plugin_prepare_compare", "machine": machine(),
                       "started": started, "wall_s": round(time.time() - started, 1),
                       "load_average": {"before": load_before, "after": load_average()},
                       "peer": {"name": peer_name, "built": True, "source": source,
                                "command": external},
                       "rounds": args.rounds, "blocks": args.blocks, "results": results,
                       "fakegpu_over_peer": over})


def _write(path: Path | None, data: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"written {path}")


if __name__ == "__main__":
    main()
