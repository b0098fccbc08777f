"""Prove a DRA driver's upgrade path under load, on any cluster (docs/vendors.md).

Pods with one GPU claim each start on every node of the driver at a steady rate
(``fakegpu.testkit.load.PodLoad``) while YOUR upgrade command runs (a ``helm upgrade`` to the
next image tag, a DaemonSet rollout ...); the driver's published devices per node are sampled
meanwhile. Then the checks fakegpu's own upgrade suite makes of its plugin (e2e/test_upgrade.py),
none of which reads the driver's files, only the API:

- no pod failed, every pod started;
- no node's published devices dropped below what it had before the upgrade.

It writes ``OUT.json`` and, with matplotlib, ``OUT.png`` (pods per second, devices per node)
and exits 0 when every check held, 1 when one did not::

    python upgrade_under_load.py --kubeconfig "$KUBECONFIG" --driver gpu.example.com \\
        --rate 0.5 --out reports/upgrade -- \\
        helm upgrade my-driver ./chart --reuse-values --set image.tag=v2 --wait
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

from kubernetes import client as kclient

from fakegpu.testkit.dra import ResourceApi
from fakegpu.testkit.k8s import create_namespace, delete_namespace, new_api_client
from fakegpu.testkit.load import LoadReport, PodLoad
from fakegpu.testkit.upgrade import Sample, write_timeline


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--driver", required=True, help="the DRA driver's name")
    p.add_argument("--device-class", default=None, help="default: the driver's name")
    p.add_argument("--image", default="registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
                   help="the pods' image (runs `true`); on a fakegpu cluster its workload "
                        "image (fakegpu cluster status --format json)")
    p.add_argument("--rate", type=float, default=0.5, help="pods per second per node")
    p.add_argument("--before", type=float, default=20.0, help="seconds of load before")
    p.add_argument("--after", type=float, default=20.0, help="seconds of load after")
    p.add_argument("--out", type=Path, default=Path("upgrade-under-load"),
                   help="OUT.json and OUT.png are written")
    p.add_argument("upgrade", nargs=argparse.REMAINDER, help="-- the upgrade command")
    args = p.parse_args(argv)
    if args.upgrade[:1] == ["--"]:
        args.upgrade = args.upgrade[1:]
    if not args.upgrade:
        p.error("no upgrade command after --")
    return args


def devices_per_node(resources: ResourceApi, driver: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in resources.slices(driver):
        node = s["spec"].get("nodeName") or s["spec"].get("pool", {}).get("name", "")
        counts[node] = counts.get(node, 0) + len(s["spec"].get("devices") or [])
    return counts


def problems(load: LoadReport, samples: list[Sample], before: dict[str, int]) -> list[str]:
    """What a user would have noticed: pods failed or never started, devices withdrawn."""
    found = [f"pod {p.name} on {p.node} failed at {p.failed:.1f}s: {p.failure}"
             for p in load.failed]
    found += [f"pod {p.name} on {p.node} never started" for p in load.never_started
              if p.failed is None]
    for node, had in sorted(before.items()):
        low = min((s.devices.get(node, 0) for s in samples), default=had)
        if low < had:
            found.append(f"node {node} published {low} devices during the upgrade, {had} before")
    return found


def main(argv: list[str]) -> int:
    args = parse(argv)
    api = new_api_client(args.kubeconfig)
    resources = ResourceApi(api)
    core = kclient.CoreV1Api(api)
    before = devices_per_node(resources, args.driver)
    if not before:
        print(f"no ResourceSlices of {args.driver}: is the driver installed?", file=sys.stderr)
        return 2
    namespace = create_namespace(core, "upgrade-under-load")
    samples: list[Sample] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def sample() -> None:
        while not stop.wait(0.5):
            try:
                samples.append(Sample(time.monotonic() - t0,
                                      devices_per_node(resources, args.driver), {}))
            except Exception as err:  # an apiserver hiccup is a gap in the picture
                print(f"sample: {err}", file=sys.stderr)

    load = PodLoad(api, namespace, sorted(before), args.image,
                   args.device_class or args.driver, rate_per_node=args.rate, driver=args.driver)
    sampler = threading.Thread(target=sample, daemon=True)
    try:
        sampler.start()
        load_offset = time.monotonic() - t0
        load.start()
        time.sleep(args.before)
        upgrade_at = time.monotonic() - t0
        upgraded = subprocess.run(args.upgrade, check=False).returncode
        done_at = time.monotonic() - t0
        time.sleep(args.after)
        report = load.stop()
    finally:
        stop.set()
        sampler.join()
        delete_namespace(core, namespace)
    marks = [(upgrade_at, "upgrade"), (done_at, f"upgrade done (exit {upgraded})")]
    js, png = write_timeline(args.out, f"{args.driver}: upgrade under load", report, samples,
                             marks, load_offset=load_offset)
    found = problems(report, samples, before)
    if upgraded != 0:
        found.insert(0, f"the upgrade command exited {upgraded}")
    print(f"{len(report.pods)} pods on {len(before)} nodes, timeline: {png or js}")
    for line in found:
        print(f"PROBLEM: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
