"""Seamless driver upgrades under load: the plugin is replaced on every node while GPU pods
start the whole time (docs/upgrades.md).

Each test rolls the plugin to a version of its own through the test kit's provider-neutral
``upgrade.upgrade_plugin`` while ``load.PodLoad`` creates one short GPU pod per node per second,
each with a claim of its own, and checks what a user sees: pods (phase, container states,
warning events), claims (allocation, device status ``data.pluginVersion``: which plugin version
prepared the claim) and ResourceSlices, sampled every half second. Where the plugin instances
run is the provider's business (its status reports them per node). The rolling test writes its
timeline (JSON and PNG) to reports/ beside the JUnit report.

Order matters only for speed: each test first brings every node to its own starting version
(a no-op when the node is there already), so any test runs alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import faults, k8s
from fakegpu.testkit.dra import (
    PodClaim,
    ResourceApi,
    pod_claim_name,
    pod_manifest,
    wait_claims_released,
)
from fakegpu.testkit.load import LoadReport, PodLoad, PodRecord
from fakegpu.testkit.upgrade import (
    Background,
    Sample,
    Sampler,
    UpgradeStalled,
    plugin_instances,
    upgrade_plugin,
    write_timeline,
)
from fakegpu.testkit.wait import NotYet, wait_for

# Both providers. `make test` runs it on embedded only (its kind pass deselects it): on kind
# the project's 2-core VM starts about 1 pod/s in all, so the suite passes there at 0.25 pod/s
# per node (`make test-upgrade-kind`, about 25 min), too long for CI's budget (docs/upgrades.md).
# serial: every test replaces or kills the plugin of the nodes its load runs on.
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

# Pods per second per node (the floor); FAKEGPU_UPGRADE_LOAD_RATE changes it, e.g. on a
# host too small to start that many pods (they queue, and the suite takes longer).
RATE = float(os.environ.get("FAKEGPU_UPGRADE_LOAD_RATE") or 1.0)
WARMUP_PODS = 1  # per node: the load runs before the upgrade begins
SETTLE_S = 420.0  # for the queue of pods a slow host leaves when the load stops
# How long the kubelet keeps a driver's ResourceSlices once no instance of it is registered
# (defaultWipingDelay, pkg/kubelet/cm/dra/manager.go, 1.33 and later).
KUBELET_WIPING_DELAY_S = 30.0
# Slack for where "serving" is seen late: a terminating plugin pod may still read Ready for
# a few seconds after its sockets closed (kind, under load). A plugin that removes its own
# slices on the way out drops them at a gap of about nothing, far below the delay.
SAMPLE_SLACK_S = 5.0


@pytest.fixture(scope="module")
def nodes_with_gpus(fakegpu_topology: Any) -> list[str]:
    """The topology's nodes that have GPUs (what the load runs on), in its order."""
    return [n.name for n in fakegpu_topology.nodes if n.gpus]


@pytest.fixture
def load_factory(k8s_client: Any, namespace: str, fakegpu_cluster: ClusterInfo,
                 nodes_with_gpus: list[str]) -> Iterator[Any]:
    made: list[PodLoad] = []

    def make() -> PodLoad:
        load = PodLoad(k8s_client, namespace, nodes_with_gpus, fakegpu_cluster.workload_image,
                       fakegpu_cluster.driver_name, rate_per_node=RATE,
                       driver=fakegpu_cluster.driver_name)
        made.append(load)
        return load

    yield make
    for load in made:  # a test that failed half-way: stop its threads
        if load._threads and not load._stop_observing.is_set():
            load.stop(settle_timeout=1.0)


def reports_dir(request: pytest.FixtureRequest) -> Path:
    return Path(request.config.rootpath) / "reports"


def started_on_every_node(load: PodLoad, nodes: Sequence[str], count: int,
                          created_after: float = 0.0) -> None:
    """Wait until ``count`` pods created after ``created_after`` have started on each node."""

    def enough() -> None:
        with load._lock:
            have = {n: sum(1 for r in load.records.values() if r.node == n
                           and r.created >= created_after and r.started is not None)
                    for n in nodes}
        if min(have.values()) < count:
            raise NotYet(f"pods started per node: {have}")

    wait_for(enough, what=f"{count} load pods started on every node", timeout=180, interval=0.5)


def describe(pods: Sequence[PodRecord]) -> str:
    return "; ".join(f"{p.name} ({p.failure or 'never started'}; warnings: "
                     f"{' | '.join(p.warnings[-2:]) or 'none'})" for p in pods[:8])


def assert_no_pod_failed(report: LoadReport) -> None:
    bad = report.failed + [p for p in report.never_started if p.failed is None]
    assert not bad, f"{len(bad)} of {len(report.pods)} load pods failed: {describe(bad)}"


def assert_rate(report: LoadReport, load: PodLoad, nodes: Sequence[str]) -> None:
    assert not load.create_errors, f"pod creation failed: {load.create_errors[:5]}"
    per_node = report.rate_per_node()
    # The load is open-loop (each tick's create in a thread of its own, on the clock's
    # schedule): every tick due before it stopped made a pod, however slow the API server.
    want = int(report.duration_s * RATE)
    counts = {n: sum(1 for p in report.pods if p.node == n) for n in nodes}
    assert min(counts.values()) >= want, (f"load below {RATE}/s per node over "
                                          f"{report.duration_s:.1f}s: {counts} ({per_node})")


def baseline_devices(resource_api: ResourceApi, cluster: ClusterInfo) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in resource_api.slices(cluster.driver_name):
        node = s["spec"].get("nodeName") or s["spec"]["pool"]["name"]
        out[node] = out.get(node, 0) + len(s["spec"].get("devices") or [])
    return out


def assert_slices_never_shrank(samples: Sequence[Sample], baseline: dict[str, int]) -> None:
    assert samples, "no sample of the ResourceSlices was taken"
    drops = [(s.t, node, s.devices.get(node, 0), want) for s in samples
             for node, want in baseline.items() if s.devices.get(node, 0) < want]
    assert not drops, ("a node's ResourceSlices lost devices (time s, node, seen, published "
                       f"before): {drops[:6]}")


def assert_slices_outlived_the_gaps(samples: Sequence[Sample], baseline: dict[str, int]
                                    ) -> dict[str, float]:
    """A node without a serving plugin keeps its slices for the kubelet's wiping delay: a
    drop is allowed only once the node has had no serving plugin for that long (then the
    kubelet wipes them, as it must; the new instance publishes again). Returns the longest
    gap seen per node, in seconds."""
    assert samples, "no sample of the ResourceSlices was taken"
    early, gaps = [], {node: 0.0 for node in baseline}
    last_serving: dict[str, float | None] = {node: None for node in baseline}
    for s in samples:
        for node, want in baseline.items():
            if s.serving.get(node, 0) > 0:
                last_serving[node] = s.t
                continue
            since = last_serving[node]
            gap = s.t - (since if since is not None else samples[0].t)
            gaps[node] = max(gaps[node], gap)
            if s.devices.get(node, 0) < want and gap < KUBELET_WIPING_DELAY_S - SAMPLE_SLACK_S:
                early.append((round(s.t, 1), node, s.devices.get(node, 0), want, round(gap, 1)))
    assert not early, ("a node's ResourceSlices lost devices before the kubelet's wiping delay "
                       "(time s, node, seen, published before, s without a serving plugin): "
                       f"{early[:6]}")
    return gaps


def long_running_pods(core: kclient.CoreV1Api, namespace: str, cluster: ClusterInfo,
                      resource_api: ResourceApi, nodes: Sequence[str]) -> dict[str, str]:
    """One sleeping GPU pod per node; pod name -> its container's start time."""
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "steady-gpu", [resource_api.device_request("gpu", cluster.driver_name)]), namespace)
    for node in nodes:
        pod = pod_manifest(f"steady-{node}", cluster.workload_image, ["sleep", "3600"],
                           [PodClaim("gpu", template="steady-gpu")])
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        k8s.create_pod(core, namespace, pod)
    started = {}
    for node in nodes:
        pod = k8s.wait_pod_running(core, namespace, f"steady-{node}")
        started[f"steady-{node}"] = str(pod.status.container_statuses[0].state.running.started_at)
    return started


def assert_still_running(core: kclient.CoreV1Api, namespace: str,
                         started: dict[str, str]) -> None:
    for name, at in started.items():
        pod = k8s.read_pod(core, namespace, name)
        cs = pod.status.container_statuses[0]
        assert pod.status.phase == "Running" and cs.state.running is not None, \
            f"pod {name} that ran before the upgrade is no longer running: {pod.status.phase}"
        assert (str(cs.state.running.started_at), cs.restart_count) == (at, 0), \
            f"pod {name} was restarted during the upgrade"


def claim_version(resource_api: ResourceApi, core: kclient.CoreV1Api, namespace: str,
                  pod: str, driver: str) -> str:
    claim = resource_api.claim(namespace, pod_claim_name(k8s.read_pod(core, namespace, pod),
                                                         "gpu"))
    versions = [str((d.get("data") or {}).get("pluginVersion", ""))
                for d in (claim.get("status") or {}).get("devices") or []
                if d.get("driver") == driver]
    assert len(versions) == 1, f"claim of pod {pod}: device status entries {versions}"
    return versions[0]


def versions_by_node(report: LoadReport, created_after: float) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in report.pods:
        if p.created >= created_after and p.plugin_version:
            out.setdefault(p.node, set()).add(p.plugin_version)
    return out


def run_under_load(load: PodLoad, sampler: Sampler, nodes: Sequence[str], cluster: ClusterInfo,
                   **upgrade: Any) -> tuple[LoadReport, list[Sample], list[tuple[float, str]],
                                            float, BaseException | None]:
    """Load and sampler on, warm-up, the upgrade, pods after it; (report, samples, marks,
    load time at which the upgrade ended, the upgrade's error if any)."""
    sampler.start()
    load.start()
    offset = sampler.at(load._t0)
    started_on_every_node(load, nodes, WARMUP_PODS)
    marks = [(sampler.at(load._t0) + load.now(), f"upgrade to {upgrade['version']}")]
    job = Background(cluster, **upgrade)
    error: BaseException | None = None
    try:
        job.join(timeout=600)
    except UpgradeStalled as err:
        error = err
    ended = load.now()
    marks.append((offset + ended, "upgrade " + ("stalled" if error else "done")))
    # A last tick of pods after the upgrade, then the load stops and its queue drains.
    def created_after() -> None:
        if not load.created_after(ended):
            raise NotYet("no pod created on every node since the upgrade ended")

    wait_for(created_after, what="pods created after the upgrade", timeout=30, interval=0.2)
    report = load.stop(settle_timeout=SETTLE_S)
    started_after = {p.node for p in report.pods if p.created >= ended and p.started}
    assert started_after >= set(nodes), \
        f"no pod created after the upgrade started on {sorted(set(nodes) - started_after)}"
    samples = sampler.stop()
    return report, samples, marks, ended, error


def test_rolling_upgrade_under_load_fails_no_pod(
        request: pytest.FixtureRequest, fakegpu_cluster: ClusterInfo, core_v1: Any,
        resource_api: ResourceApi, namespace: str, nodes_with_gpus: list[str],
        load_factory: Any) -> None:
    # From whatever runs (a fresh cluster: the package's version) to 2.0.0; a reused cluster
    # that runs 2.0.0 already goes to 2.0.1, so there is always an upgrade to watch.
    serving = {i.get("version", "") for v in plugin_instances(fakegpu_cluster).values()
               for i in v}
    target = "2.0.1" if any(v.endswith("2.0.0") for v in serving) else "2.0.0"
    steady = long_running_pods(core_v1, namespace, fakegpu_cluster, resource_api, nodes_with_gpus)
    baseline = baseline_devices(resource_api, fakegpu_cluster)
    load = load_factory()
    sampler = Sampler(fakegpu_cluster, resource_api)
    report, samples, marks, ended, error = run_under_load(
        load, sampler, nodes_with_gpus, fakegpu_cluster, version=target)
    js, png = write_timeline(reports_dir(request) / f"upgrade-timeline-{fakegpu_cluster.provider}",
                             f"rolling upgrade to {target} under load "
                             f"({fakegpu_cluster.provider}, {len(nodes_with_gpus)} nodes, "
                             f"{RATE:g} pod/s/node)", report, samples, marks,
                             load_offset=sampler.at(load._t0))
    assert error is None, f"the upgrade failed: {error}"
    assert_no_pod_failed(report)
    assert_rate(report, load, nodes_with_gpus)
    assert_slices_never_shrank(samples, baseline)
    assert_still_running(core_v1, namespace, steady)
    # Both instances were alive on every node at some moment (the surge overlap) ...
    peak = {n: max(s.instances.get(n, 0) for s in samples) for n in nodes_with_gpus}
    assert all(v == 2 for v in peak.values()), f"plugin instances at most, per node: {peak}"
    # ... and claims of pods created after the upgrade were prepared by the new version only.
    after = versions_by_node(report, ended)
    assert after and all(v == {target} for v in after.values()), \
        f"plugin versions that prepared claims after the upgrade: {after}"
    # Prepared exactly once: no pod's start needed a second prepare (each failed prepare is a
    # warning event on the pod, and the kubelet asks again only after one).
    retried = [p for p in report.pods if any("Prepare" in w for w in p.warnings)]
    assert not retried, f"pods whose claims were prepared more than once: {describe(retried)}"
    assert js.is_file() and (png is None or png.is_file())


def test_a_broken_release_stalls_and_rolling_back_restores(
        fakegpu_cluster: ClusterInfo, core_v1: Any, resource_api: ResourceApi, namespace: str,
        nodes_with_gpus: list[str], load_factory: Any) -> None:
    upgrade_plugin(fakegpu_cluster, version="2.0.0")
    baseline = baseline_devices(resource_api, fakegpu_cluster)
    load = load_factory()
    sampler = Sampler(fakegpu_cluster, resource_api)
    report, samples, _marks, _ended, error = run_under_load(
        load, sampler, nodes_with_gpus, fakegpu_cluster, version="3.0.0", broken=True, timeout=20)
    assert isinstance(error, UpgradeStalled), f"a broken release did not stall: {error}"
    assert "did not become ready" in str(error)
    # Stalled on the first node: the broken instance is still there beside the serving one.
    stalled = {n: len(v) for n, v in plugin_instances(fakegpu_cluster).items()}
    assert max(stalled.values()) == 2 and sum(stalled.values()) == len(stalled) + 1, \
        f"plugin instances per node while stalled: {stalled}"
    assert_no_pod_failed(report)
    assert_slices_never_shrank(samples, baseline)
    # run_under_load saw pods created after the stall start on every node; every claim of the
    # load whose status was seen (a pod of "true" may come and go between two polls) was
    # prepared by 2.0.0: the broken release prepared nothing.
    seen = versions_by_node(report, 0.0)
    assert set(seen) == set(nodes_with_gpus) and all(v == {"2.0.0"} for v in seen.values()), \
        f"versions that prepared the load's claims, per node: {seen}"
    # Rolling back: the pending instance goes, every node has one instance of 2.0.0 again.
    upgrade_plugin(fakegpu_cluster, version="2.0.0")

    def one_each() -> None:
        back = {n: len(v) for n, v in plugin_instances(fakegpu_cluster).items()}
        if not all(v == 1 for v in back.values()):
            raise NotYet(f"plugin instances per node: {back}")

    # kind: the broken pod may take a moment to go once the rollout is back.
    wait_for(one_each, what="one plugin instance per node after the rollback", timeout=90)


def test_sequential_upgrade_pods_wait_for_the_new_plugin(
        fakegpu_cluster: ClusterInfo, core_v1: Any, resource_api: ResourceApi, namespace: str,
        nodes_with_gpus: list[str], load_factory: Any) -> None:
    upgrade_plugin(fakegpu_cluster, version="2.0.0")
    baseline = baseline_devices(resource_api, fakegpu_cluster)
    load = load_factory()
    sampler = Sampler(fakegpu_cluster, resource_api)
    report, samples, _marks, ended, error = run_under_load(
        load, sampler, nodes_with_gpus, fakegpu_cluster, version="2.1.0", strategy="sequential")
    assert error is None, f"the upgrade failed: {error}"
    # Each node was without a serving plugin for a moment (what makes it sequential) ...
    low = {n: min(s.serving.get(n, 0) for s in samples) for n in nodes_with_gpus}
    assert all(v == 0 for v in low.values()), f"serving plugins at least, per node: {low}"
    # ... its slices outlived the gap or, where the gap was longer than the kubelet's wiping
    # delay (a slow host), at least that delay; the pods created meanwhile started once the
    # new plugin was up.
    gaps = assert_slices_outlived_the_gaps(samples, baseline)
    print(f"longest time without a serving plugin per node (s): {gaps}")
    assert_no_pod_failed(report)
    after = versions_by_node(report, ended)
    assert after and all(v == {"2.1.0"} for v in after.values()), after


def test_kill_9_of_the_old_instance_mid_prepare_the_new_one_prepares(
        fakegpu_cluster: ClusterInfo, core_v1: Any, resource_api: ResourceApi, namespace: str,
        nodes_with_gpus: list[str]) -> None:
    if fakegpu_cluster.provider == "kind":
        pytest.skip("kind rolls the plugin DaemonSet on every node and Kubernetes stops its "
                    "pods: a one-node rollout with a kill -9 of the old instance needs the "
                    "embedded provider")
    node = nodes_with_gpus[0]
    # The old instance takes 30 s for every prepare: whatever it is asked, it is asked it
    # when the upgrade below kills it.
    upgrade_plugin(fakegpu_cluster, version="2.2.0", prepare_delay_s=30, nodes=(node,))
    resource_api.create("resourceclaimtemplates", resource_api.claim_template(
        "one-gpu", [resource_api.device_request("gpu", fakegpu_cluster.driver_name)]), namespace)
    pod = pod_manifest("inflight", fakegpu_cluster.workload_image, ["sleep", "3600"],
                       [PodClaim("gpu", template="one-gpu")])
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    k8s.create_pod(core_v1, namespace, pod)

    def reserved() -> None:
        p = k8s.read_pod(core_v1, namespace, "inflight")
        try:
            claim = resource_api.claim(namespace, pod_claim_name(p, "gpu"))
        except Exception as err:
            raise NotYet(str(err)) from None
        if not (claim.get("status") or {}).get("reservedFor"):
            raise NotYet("claim not reserved yet")

    wait_for(reserved, what="the pod's claim allocated and reserved", timeout=120)

    def taken_up() -> None:
        # The kubelet writes ContainerCreating when its pod sync begins and asks the plugin
        # to prepare right after (before the sandbox): from here the old instance holds the
        # call for 30 s, longer than the new one needs to register.
        statuses = k8s.read_pod(core_v1, namespace, "inflight").status.container_statuses
        waiting = [cs.state.waiting.reason for cs in statuses or ()
                   if cs.state and cs.state.waiting]
        if "ContainerCreating" not in waiting:
            raise NotYet(f"container states: {waiting or 'none yet'}")

    wait_for(taken_up, what="the kubelet to take up pod inflight", timeout=120, interval=0.2)
    upgrade_plugin(fakegpu_cluster, version="2.3.0", kill_old=True, nodes=(node,))
    k8s.wait_pod_running(core_v1, namespace, "inflight", timeout=180)
    assert claim_version(resource_api, core_v1, namespace, "inflight",
                         fakegpu_cluster.driver_name) == "2.3.0"
    # Proof that the kill cut a prepare in flight: the kubelet's call broke off with the
    # connection (gRPC Unavailable; its own deadline is 45 s, DeadlineExceeded would be a
    # timeout) and it retried against the new instance.
    failed = k8s.wait_event(core_v1, namespace, "FailedPrepareDynamicResources",
                            involved="inflight", timeout=10)
    print(f"the kubelet saw: {failed.message}")
    assert "code = Unavailable" in (failed.message or ""), failed.message


def test_downgrade_keeps_claims_the_newer_version_prepared(
        fakegpu_cluster: ClusterInfo, core_v1: Any, resource_api: ResourceApi, namespace: str,
        nodes_with_gpus: list[str]) -> None:
    upgrade_plugin(fakegpu_cluster, version="2.4.0")
    steady = long_running_pods(core_v1, namespace, fakegpu_cluster, resource_api, nodes_with_gpus)
    assert {claim_version(resource_api, core_v1, namespace, p, fakegpu_cluster.driver_name)
            for p in steady} == {"2.4.0"}
    baseline = baseline_devices(resource_api, fakegpu_cluster)
    sampler = Sampler(fakegpu_cluster, resource_api).start()
    try:
        upgrade_plugin(fakegpu_cluster, version="1.0.0")
    finally:
        samples = sampler.stop()
    assert_slices_never_shrank(samples, baseline)
    assert_still_running(core_v1, namespace, steady)
    # The older plugin unprepares what the newer one prepared: the pods end and their
    # claims go away (a claim the plugin could not unprepare would stay reserved).
    for name in steady:
        claim = pod_claim_name(k8s.read_pod(core_v1, namespace, name), "gpu")
        core_v1.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        k8s.wait_pod_gone(core_v1, namespace, name)
        wait_claims_released(resource_api, namespace, gone=[claim])


def test_the_nodes_gpu_state_outlives_the_upgrade(
        fakegpu_cluster: ClusterInfo, resource_api: ResourceApi, nodes_with_gpus: list[str],
        fault_guard: list[tuple[str, int]]) -> None:
    """Faults (and MIG instances) are the node's, not the plugin's: an upgraded plugin still
    sees them (on kind: the NVML state is a hostPath of the node, not the pod's)."""
    upgrade_plugin(fakegpu_cluster, version="2.5.0")
    node, gpu = nodes_with_gpus[-1], 1
    fault_guard.append((node, gpu))
    faults.inject(fakegpu_cluster, node, gpu, "fabric-degraded")

    def fabric_tainted() -> str:
        for s in resource_api.slices(fakegpu_cluster.driver_name, node):
            for entry in s["spec"].get("devices") or []:
                if any(t.get("key", "").endswith("/fabric") for t in entry.get("taints") or []):
                    return str(entry["name"])
        raise NotYet("no device of the node carries the fabric taint yet")

    device = wait_for(fabric_tainted, what=f"the fabric taint on {node}", timeout=90)
    upgrade_plugin(fakegpu_cluster, version="2.6.0")
    # The new plugin reads the same NVML state: the GPU is still degraded there ...
    seen = {g["index"]: g for g in faults.smi_view(fakegpu_cluster, node)["gpus"]}
    assert "degraded" in str(seen[gpu].get("fabric")), (
        f"GPU {gpu} of {node} after the upgrade: {seen.get(gpu)}")
    # ... and its device keeps the taint in the slices the new plugin publishes.
    assert fabric_tainted() == device
