"""Benchmark: the scheduler and apiserver with a fleet of simulated GPU nodes.

For each size (100 and 1,000 simulated nodes of 8 H100 GPUs; nine in ten with whole GPUs, one
in ten with every GPU in MIG mode as 4g.40gb + 3g.40gb) it runs the real CLI,
``fakegpu cluster up`` (timed; KWOK and the fleet slice publisher included), then:

- slice publish time: the fleet publisher's first full pass over every simulated node (its
  own log line), with the number of devices it published;
- apiserver and etcd memory (VmRSS) once up, and again after the claims;
- allocation throughput and latency: ``--claims`` pods at once, each with a claim from a
  template for one whole GPU (then, separately, one 3g.40gb MIG device), tolerating KWOK's
  node taint; latency is from the pod's creation (as the client saw it return) until the
  claim's allocation is first seen on a watch; throughput is claims allocated per second
  from the first create to the last allocation. The pods are Running through KWOK.

then ``fakegpu cluster down``. The 1,000-node size is the packaged fleet-1000 (2 real nodes
too); the 100-node one is the same shape, generated. Needs root and the embedded provider;
run it under ``flock /tmp/cluster.lock`` on a shared host.

Usage: .venv/bin/python benchmarks/fleet_scheduler.py [--sizes 100,1000] [--claims 200]
       [--json reports/benchmarks/fleet.json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from benchlib import load_average, machine
from kubernetes import client, watch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from fakegpu.cluster.embedded.state import ClusterState, clusters_dir  # noqa: E402
from fakegpu.kube import api as kubeapi  # noqa: E402
from fakegpu.kube.resource import GROUP  # noqa: E402
from fakegpu.topology.packaged import FIXTURES  # noqa: E402

CLUSTER = "fg-fleet"
NAMESPACE = "fleet-bench"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def topology_for(size: int, where: Path) -> Path:
    if size == 1000:
        return FIXTURES / "fleet-1000.yaml"
    whole, mig = size * 9 // 10, size - size * 9 // 10
    text = f"""\
name: fleet-{size}
seed: 17
nodes:
  - name: "dgx-{{0..1}}"
    gpus: {{product: H100-SXM5-80GB, count: 8}}
  - name: "sim-{{000..{whole - 1:03d}}}"
    simulated: true
    gpus: {{product: H100-SXM5-80GB, count: 8}}
  - name: "sim-mig-{{00..{mig - 1:02d}}}"
    simulated: true
    gpus:
      product: H100-SXM5-80GB
      count: 8
      mig: {{enabled: true, instances: [{{profile: 4g.40gb}}, {{profile: 3g.40gb}}]}}
"""
    path = where / f"fleet-{size}.yaml"
    path.write_text(text)
    return path


@dataclass
class Alloc:
    kind: str  # "gpu" | "mig"
    claims: int
    allocated: int
    seconds: float
    per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass
class Size:
    simulated_nodes: int
    real_nodes: int
    devices: int
    up_s: float
    publish_s: float
    apiserver_rss_mib: float
    etcd_rss_mib: float
    apiserver_rss_after_mib: float = 0.0
    etcd_rss_after_mib: float = 0.0
    allocations: list[Alloc] = field(default_factory=list)
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _memory(st: ClusterState) -> tuple[float, float]:
    return _rss_mib(st.processes["kube-apiserver"].pid), _rss_mib(st.processes["etcd"].pid)


def _publish_pass(st: ClusterState) -> float:
    text = (st.root / "fleet" / "logs" / "publisher.log").read_text()
    found = re.findall(r"fleet: (\d+) simulated nodes synced in ([\d.]+)s", text)
    return float(found[0][1]) if found else float("nan")


def _devices(api: client.ApiClient, driver: str, sims: set[str]) -> dict[str, int]:
    """Devices the simulated nodes publish: all, whole GPUs, and 3g.40gb MIG devices (what
    the claims ask for)."""
    counts = {"all": 0, "gpu": 0, "mig": 0}
    for s in kubeapi.resource_slices(api, driver=driver):
        if s["spec"].get("nodeName") not in sims:
            continue
        for dev in s["spec"].get("devices") or []:
            counts["all"] += 1
            if "-mig-" not in dev["name"]:
                counts["gpu"] += 1
            elif "-mig-3g40gb-" in dev["name"]:
                counts["mig"] += 1
    return counts


def _template(version: str, name: str, device_class: str, cel: str | None) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": device_class}
    if cel:
        exact["selectors"] = [{"cel": {"expression": cel}}]
    req = {"name": "gpu", "exactly": exact} if version == "v1" else {"name": "gpu", **exact}
    return {"apiVersion": f"{GROUP}/{version}", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": [req]}}}}


def _pod(name: str, template: str, image: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"tolerations": [KWOK_TOLERATION], "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"fakegpu.dev/simulated": "true"},
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": image,
                                     "resources": {"claims": [{"name": "gpu"}]}}]}}


def allocate(api: client.ApiClient, version: str, kind: str, device_class: str,
             cel: str | None, claims: int, image: str) -> Alloc:
    core, objs = client.CoreV1Api(api), client.CustomObjectsApi(api)
    template = f"bench-{kind}"
    objs.create_namespaced_custom_object(GROUP, version, NAMESPACE, "resourceclaimtemplates",
                                         _template(version, template, device_class, cel))
    created: dict[str, float] = {}  # pod name -> when its create returned
    allocated: dict[str, float] = {}  # pod name -> when its claim was seen allocated
    done = threading.Event()

    def follow() -> None:
        w = watch.Watch()  # type: ignore[no-untyped-call]
        events = w.stream(  # type: ignore[no-untyped-call]
            objs.list_namespaced_custom_object, GROUP, version, NAMESPACE, "resourceclaims",
            timeout_seconds=300)
        for ev in events:
            obj = ev["object"]
            if (obj.get("status") or {}).get("allocation"):
                owners = obj["metadata"].get("ownerReferences") or []
                pod = owners[0]["name"] if owners else ""
                if pod.startswith(f"{kind}-") and pod not in allocated:
                    allocated[pod] = time.monotonic()
            if len(allocated) >= claims or done.is_set():
                w.stop()  # type: ignore[no-untyped-call]

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    time.sleep(1.0)  # the watch is open before the first create
    first = time.monotonic()
    for i in range(claims):
        name = f"{kind}-{i:05d}"
        core.create_namespaced_pod(NAMESPACE, cast(Any, _pod(name, template, image)))
        created[name] = time.monotonic()
    watcher.join(timeout=300)
    done.set()
    lat = sorted((allocated[p] - created[p]) * 1000 for p in allocated if p in created)
    last = max(allocated.values(), default=first)

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else float("nan")

    span = last - first
    return Alloc(kind, claims, len(allocated), round(span, 2),
                 round(len(allocated) / span, 1) if span > 0 else float("nan"),
                 pct(0.50), pct(0.99), round(lat[-1], 1) if lat else float("nan"))


def run_size(size: int, claims: int, work: Path) -> Size:
    topology = topology_for(size, work)
    load_before = load_average()
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "fakegpu", "cluster", "up", "--cluster", CLUSTER,
                    "--topology", str(topology), "--timeout", "300"], check=True,
                   stdout=subprocess.DEVNULL)
    up_s = time.monotonic() - started
    try:
        st = ClusterState.load(clusters_dir() / CLUSTER)
        api_rss, etcd_rss = _memory(st)
        with kubeapi.session(st.kubeconfig) as api:
            version = kubeapi.resource_version(api)
            devices = _devices(api, st.driver, set(st.simulated))
        out = Size(len(st.simulated), len(st.nodes), devices["all"], round(up_s, 1),
                   _publish_pass(st), round(api_rss), round(etcd_rss), load_before=load_before)
        api = kubeapi.connect(st.kubeconfig)
        client.CoreV1Api(api).create_namespace(cast(Any, {"metadata": {"name": NAMESPACE}}))
        mig_class = "mig." + st.driver.removeprefix("gpu.")
        profile = f"device.attributes['{st.driver}'].profile == '3g.40gb'"
        for kind, device_class, cel in (("gpu", st.driver, None),
                                        ("mig", mig_class, profile)):
            # Never more claims than devices: the rest would wait for ever.
            out.allocations.append(allocate(api, version, kind, device_class, cel,
                                            min(claims, devices[kind]), st.workload_image))
        out.apiserver_rss_after_mib, out.etcd_rss_after_mib = (round(x) for x in _memory(st))
        out.load_after = load_average()
        return out
    finally:
        subprocess.run([sys.executable, "-m", "fakegpu", "cluster", "down", "--cluster", CLUSTER],
                       check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--json", type=Path, default=REPO / "reports/benchmarks/fleet.json")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as work:
        for size in (int(s) for s in args.sizes.split(",")):
            res = run_size(size, args.claims, Path(work))
            print(json.dumps(asdict(res)), flush=True)
            results.append(asdict(res))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": machine(), "sizes": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
