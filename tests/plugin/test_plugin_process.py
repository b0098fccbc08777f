"""``fakegpu plugin run`` as real processes, on the fake libnvidia-ml.so.1, against a real
kube-apiserver; the test plays the kubelet over the plugin's unix sockets.

Skips LOUDLY (with the reason) while the fake NVML library or the Kubernetes binaries are not
available on this host: these tests are the plugin's end-to-end proof.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu import drivers
from fakegpu import wait as waiting
from fakegpu.kubeletplugin.proto import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from fakegpu.topology.packaged import FIXTURES

pytestmark = pytest.mark.integration
DRIVER = drivers.FAKEGPU
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def apiserver(bare_control_plane: Any) -> Iterator[Path]:
    """A real etcd + kube-apiserver. The binaries are obtained (built from the Go module proxy
    when missing, as in CI) rather than skipped for: only a host that truly cannot have them
    (no Go and nothing cached, an unsupported architecture) skips, saying why."""
    with bare_control_plane() as cp:
        yield cp.kubeconfig


@pytest.fixture(scope="module")
def nvml_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    from fakegpu.nvml import env as nvml
    from fakegpu.nvml import state
    from fakegpu.topology.load import load_topology

    topology = load_topology(FIXTURES / "dgx-h100.yaml")
    node = topology.nodes[0].name
    path = tmp_path_factory.mktemp("nvml") / "state.bin"
    state.render(topology, node, path)
    return {**os.environ, **nvml.env(path)}, node


def test_serves_the_kubelet_while_the_apiserver_is_unreachable(
        short_tmp: Path, nvml_env: tuple[dict[str, str], str]) -> None:
    env, node = nvml_env
    kubeconfig = short_tmp / "kubeconfig"
    kubeconfig.write_text(  # a port nothing listens on
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    inst = Instance(short_tmp, kubeconfig, env, node, "solo")
    try:
        time.sleep(2)  # let the publisher fail and back off
        with grpc.insecure_channel(f"unix://{inst.dra}") as ch:
            r = dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[
                    dra_v1_pb2.Claim(namespace="t", name="c", uid="u1")]), timeout=30)
        assert "cannot" in r.claims["u1"].error  # that claim's error, not a failed call
        with grpc.insecure_channel(f"unix://{inst.reg}") as ch:
            info = pluginregistration_pb2_grpc.RegistrationStub(ch).GetInfo(
                pluginregistration_pb2.InfoRequest(), timeout=5)
        assert info.name == DRIVER
        inst.proc.send_signal(signal.SIGTERM)
        assert inst.proc.wait(30) == 0
        assert not inst.reg.exists() and not inst.dra.exists()
        log = (short_tmp / "solo.log").read_text()
        assert "cannot publish ResourceSlices" in log
    finally:
        if inst.proc.poll() is None:
            inst.proc.kill()
            inst.proc.wait()
        inst.log.close()


@pytest.mark.parametrize("flag", ["--instance-id", "--driver", "--node"])
def test_a_path_in_a_flag_is_refused_before_anything_touches_the_disk(
        short_tmp: Path, nvml_env: tuple[dict[str, str], str], flag: str) -> None:
    """Issue input: ``--instance-id ../../../victim`` deleted a file outside the kubelet root
    (the socket path resolved there and a 'leftover socket' was unlinked)."""
    env, node = nvml_env
    kubelet = short_tmp / "kubelet"
    # Where the DRA socket of that instance id resolves once its parent exists.
    victim = short_tmp / "victim.sock"
    victim.write_text("precious")
    value = {"--instance-id": "../../../../victim", "--driver": "../x",
             "--node": "n/../x"}[flag]
    args = {"--instance-id": "i", "--driver": DRIVER, "--node": node, flag: value}
    done = subprocess.run(
        [sys.executable, "-m", "fakegpu", "plugin", "run", "--no-slices",
         "--kubelet-root", str(kubelet), "--cdi-root", str(short_tmp / "cdi"),
         *[x for kv in args.items() for x in kv]],
        env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"fakegpu: {flag} ") and "letters, digits" in line
    assert victim.read_text() == "precious"
    assert not kubelet.exists()  # nothing created either


class Instance:
    def __init__(self, root: Path, kubeconfig: Path, env: dict[str, str], node: str,
                 instance_id: str, rediscover_s: float = 1, driver: str = DRIVER) -> None:
        self.id = instance_id
        self.reg = root / "kubelet" / "plugins_registry" / f"{driver}-{instance_id}-reg.sock"
        self.dra = root / "kubelet" / "plugins" / driver / f"dra-{instance_id}.sock"
        self.log = (root / f"{instance_id}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fakegpu", "plugin", "run", "--node", node,
             "--driver", driver, "--kubeconfig", str(kubeconfig),
             "--kubelet-root", str(root / "kubelet"), "--cdi-root", str(root / "cdi"),
             "--instance-id", instance_id, "--rediscover-interval", str(rediscover_s),
             "--grace-period", "5"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.reg.exists() and self.dra.exists(), f"{instance_id} sockets",
                 self.proc)

    def close(self) -> None:
        """Stop the process whatever happened (SIGTERM, then SIGKILL), close its log."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def wait_for(cond: Callable[[], Any], what: str, proc: subprocess.Popen[bytes] | None = None,
             timeout: float = 30) -> Any:
    """fakegpu's one polling loop: a falsy value is "not yet"; the plugin dying ends it."""

    def once() -> Any:
        value = cond()
        if not value:
            raise waiting.NotYet(repr(value))
        return value

    def guard() -> None:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"plugin exited ({proc.returncode}) while waiting for {what}")

    return waiting.wait_for(once, what=what, timeout=timeout, interval=0.2, guard=guard)


def test_two_instances_on_fake_gpus_and_real_apiserver(
        short_tmp: Path, apiserver: Path, nvml_env: tuple[dict[str, str], str]) -> None:
    from kubernetes import client, config

    env, node = nvml_env
    api = config.new_client_from_config(str(apiserver))
    objects = client.CustomObjectsApi(api)
    first = Instance(short_tmp, apiserver, env, node, "pod-1")
    second = Instance(short_tmp, apiserver, env, node, "pod-2")
    try:
        # The kubelet's side of registration.
        for inst in (first, second):
            with grpc.insecure_channel(f"unix://{inst.reg}") as ch:
                stub = pluginregistration_pb2_grpc.RegistrationStub(ch)
                info = stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=5)
                assert info.endpoint == str(inst.dra)
                assert list(info.supported_versions) == [
                    "v1.DRAPlugin", "v1beta1.DRAPlugin",
                    "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]
                stub.NotifyRegistrationStatus(
                    pluginregistration_pb2.RegistrationStatus(plugin_registered=True), timeout=5)

        def slices() -> list[dict[str, Any]]:
            got = objects.list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices",
                field_selector=f"spec.driver={DRIVER},spec.nodeName={node}")
            return list(got["items"])

        published = wait_for(slices, "ResourceSlices")
        # The shape of the served version (v1 on 1.37): flat attributes, one pool per node.
        # managedFields record the version each writer used: the plugin wrote v1.
        assert {f["apiVersion"] for s in published
                for f in s["metadata"]["managedFields"]} == {"resource.k8s.io/v1"}
        pools = {(s["spec"]["pool"]["name"], s["spec"]["pool"]["resourceSliceCount"])
                 for s in published}
        assert pools == {(node, len(published))}
        devices = [d for s in published for d in s["spec"]["devices"]]
        assert devices and all(d["name"].startswith("gpu-") for d in devices)
        assert devices[0]["attributes"]["productName"]["string"]
        assert devices[0]["attributes"]["driverVersion"]["version"]
        assert "basic" not in devices[0]

        client.CoreV1Api(api).create_namespace({"metadata": {"name": "t"}})
        uids = []
        for i in range(6):
            body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": f"c{i}"},
                    "spec": {"devices": {"requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]}}}
            made = objects.create_namespaced_custom_object("resource.k8s.io", "v1", "t",
                                                           "resourceclaims", body)
            made["status"] = {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": DRIVER, "pool": node,
                 "device": devices[i % len(devices)]["name"]}]}}}
            objects.replace_namespaced_custom_object_status(
                "resource.k8s.io", "v1", "t", "resourceclaims", f"c{i}", made)
            uids.append(made["metadata"]["uid"])

        v1 = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{first.dra}"))
        beta = dra_v1beta1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{second.dra}"))
        answers = {}
        for i in range(3):  # prepared by the first instance (v1)
            r = v1.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[
                dra_v1_pb2.Claim(namespace="t", name=f"c{i}", uid=uids[i])]), timeout=10)
            assert r.claims[uids[i]].error == ""
            answers[uids[i]] = [list(d.cdi_device_ids) for d in r.claims[uids[i]].devices]
        first.proc.send_signal(signal.SIGKILL)  # killed mid-stream: no goodbye at all
        first.proc.wait(10)
        for i in range(6):  # the survivor answers for all, v1beta1
            r = beta.NodePrepareResources(dra_v1beta1_pb2.NodePrepareResourcesRequest(claims=[
                dra_v1beta1_pb2.Claim(namespace="t", name=f"c{i}", uid=uids[i])]), timeout=10)
            assert r.claims[uids[i]].error == ""
            ids = [list(d.cdi_device_ids) for d in r.claims[uids[i]].devices]
            assert answers.setdefault(uids[i], ids) == ids
            assert (short_tmp / "cdi" / f"gpu_fakegpu_dev-claim_{uids[i]}.json").exists()
        by_name = {d["name"]: d for d in devices}
        for i in range(6):  # every claim's status names its device and that device's facts
            claim = objects.get_namespaced_custom_object("resource.k8s.io", "v1", "t",
                                                         "resourceclaims", f"c{i}")
            [status] = claim["status"]["devices"]
            assert (status["driver"], status["pool"]) == (DRIVER, node)
            assert status["data"]["uuid"] == by_name[status["device"]]["attributes"]["uuid"][
                "string"]
        r = beta.NodeUnprepareResources(dra_v1beta1_pb2.NodeUnprepareResourcesRequest(claims=[
            dra_v1beta1_pb2.Claim(namespace="t", name=f"c{i}", uid=u)
            for i, u in enumerate(uids)]), timeout=10)
        assert all(c.error == "" for c in r.claims.values())
        assert list((short_tmp / "cdi").glob("*.json")) == []
        # The last instance leaving cleans up the node's slices.
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(30) == 0
        assert not second.reg.exists() and not second.dra.exists()
        assert slices() == []
    finally:
        for inst in (first, second):
            if inst.proc.poll() is None:
                inst.proc.kill()
                inst.proc.wait()
            inst.log.close()


def fake_node(root: Path, fixture: str, node_index: int) -> tuple[dict[str, str], str, Path]:
    """A node's own NVML state file (faults injected here touch no other test)."""
    from fakegpu.nvml import env as nvml
    from fakegpu.nvml import state
    from fakegpu.topology.load import load_topology

    topology = load_topology(FIXTURES / fixture)
    node = topology.nodes[node_index].name
    path = state.render(topology, node, root / f"{node}.bin")
    return {**os.environ, **nvml.env(path)}, node, path


class Pool:
    """The node's pool as the apiserver holds it."""

    def __init__(self, kubeconfig: Path, node: str, driver: str = DRIVER) -> None:
        from kubernetes import client, config

        self.objects = client.CustomObjectsApi(config.new_client_from_config(str(kubeconfig)))
        self.node, self.driver = node, driver

    def slices(self) -> list[dict[str, Any]]:
        got = self.objects.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices",
            field_selector=f"spec.driver={self.driver},spec.nodeName={self.node}")
        return list(got["items"])

    def generation(self) -> int:
        return max((int(s["spec"]["pool"]["generation"]) for s in self.slices()), default=0)

    def devices(self) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for s in self.slices() for d in s["spec"]["devices"]}

    def taints(self, device: str, effect: str = "NoSchedule") -> dict[str, str]:
        """The device's taints of one effect: key -> value."""
        found = self.devices().get(device, {}).get("taints") or []
        return {t["key"]: t.get("value", "") for t in found if t["effect"] == effect}


def allocate(objects: Any, namespace: str, name: str, node: str, device: str) -> str:
    """A claim allocated to ``device``, as the scheduler would write it; returns its UID."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": DRIVER}}]}}}
    made = objects.create_namespaced_custom_object("resource.k8s.io", "v1", namespace,
                                                   "resourceclaims", body)
    made["status"] = {"allocation": {"devices": {"results": [
        {"request": "gpus", "driver": DRIVER, "pool": node, "device": device}]}}}
    objects.replace_namespaced_custom_object_status("resource.k8s.io", "v1", namespace,
                                                    "resourceclaims", name, made)
    return str(made["metadata"]["uid"])


def test_nvml_events_taint_devices_at_once_and_prepared_claims_survive(
        short_tmp: Path, apiserver: Path) -> None:
    from kubernetes import client, config

    from fakegpu.nvml import faults

    env, node, state_path = fake_node(short_tmp, "dgx-h100.yaml", 0)
    pool = Pool(apiserver, node)
    # Periodic rediscovery far away: whatever changes within the waits came from an event.
    inst = Instance(short_tmp, apiserver, env, node, "ev", rediscover_s=600)
    try:
        wait_for(lambda: len(pool.devices()) == 8, "8 GPUs published", inst.proc)
        first = pool.generation()
        assert all(pool.taints(n) == {} for n in pool.devices())
        client.CoreV1Api(config.new_client_from_config(str(apiserver))).create_namespace(
            {"metadata": {"name": "ev"}})
        uid = allocate(pool.objects, "ev", "held", node, "gpu-3")
        dra = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{inst.dra}"))

        def prepare() -> list[list[str]]:
            r = dra.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[
                dra_v1_pb2.Claim(namespace="ev", name="held", uid=uid)]), timeout=10)
            assert r.claims[uid].error == ""
            return [list(d.cdi_device_ids) for d in r.claims[uid].devices]

        before = prepare()
        wait_for(lambda: "watching NVML events" in (short_tmp / "ev.log").read_text(),
                 "the event set", inst.proc)

        faults.inject(state_path, 2, "xid", 48)  # double-bit ECC XID: critical
        wait_for(lambda: pool.taints("gpu-2") == {f"{DRIVER}/xid": "48"}, "xid taint", inst.proc)
        assert pool.generation() > first
        faults.inject(state_path, 5, "xid", 13)  # the application's fault: informational
        wait_for(lambda: pool.taints("gpu-5", "None") == {f"{DRIVER}/xid": "13"},
                 "informational xid taint", inst.proc)
        faults.inject(state_path, 3, "gpu-lost")
        wait_for(lambda: f"{DRIVER}/gpu-lost" in pool.taints("gpu-3"), "gpu-lost taint",
                 inst.proc)
        assert pool.taints("gpu-3")[f"{DRIVER}/xid"] == "79"  # NVML's XID for a lost GPU
        assert pool.taints("gpu-5") == {} and pool.taints("gpu-2") == {f"{DRIVER}/xid": "48"}
        assert len(pool.devices()) == 8  # tainted, not gone: the served API has taints
        assert prepare() == before  # the prepared claim on the lost GPU is still answered
        assert (short_tmp / "cdi" / f"gpu_fakegpu_dev-claim_{uid}.json").exists()
        # Taints follow health both ways: a cleared fault lifts its taint (no event says so:
        # the plugin reads the GPUs' state), and state-only faults taint and lift too.
        faults.clear(state_path, 2, "xid")
        wait_for(lambda: pool.taints("gpu-2") == {}, "xid taint lifted", inst.proc)
        faults.inject(state_path, 4, "nvlink-down", 0)
        wait_for(lambda: pool.taints("gpu-4") == {f"{DRIVER}/nvlink-down": "0"},
                 "nvlink-down taint", inst.proc)
        faults.clear(state_path, 4)
        wait_for(lambda: pool.taints("gpu-4") == {}, "nvlink-down taint lifted", inst.proc)
        inst.proc.send_signal(signal.SIGTERM)
        assert inst.proc.wait(30) == 0
        assert pool.slices() == []
    finally:
        inst.close()


def test_device_health_streams_to_the_kubelet_from_nvml_faults(
        short_tmp: Path, apiserver: Path) -> None:
    """KEP-4680: the kubelet's NodeWatchResources stream (v1alpha1, what kubelets before 1.37
    open) reports a GPU UNHEALTHY once a fault is injected and HEALTHY once it is cleared; the
    claim prepared on it shows the same in its device status conditions."""
    import queue
    import threading

    from fakegpu.kubeletplugin.proto import dra_health_v1alpha1_pb2 as pb
    from fakegpu.kubeletplugin.proto import dra_health_v1alpha1_pb2_grpc as pb_grpc
    from fakegpu.nvml import faults

    env, node, state_path = fake_node(short_tmp, "dgx-h100.yaml", 0)
    inst = Instance(short_tmp, apiserver, env, node, "hs", rediscover_s=600)
    reports: queue.Queue[dict[str, str]] = queue.Queue()
    channel = grpc.insecure_channel(f"unix://{inst.dra}")
    stream = pb_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
        pb.NodeWatchResourcesRequest(), timeout=120)

    def read() -> None:
        try:
            for report in stream:
                reports.put({d.device.device_name: pb.HealthStatus.Name(d.health)
                             for d in report.devices if d.device.pool_name == node})
        except grpc.RpcError:
            pass

    threading.Thread(target=read, daemon=True).start()

    def reported(want: Callable[[dict[str, str]], bool]) -> Callable[[], Any]:
        def check() -> Any:
            while not reports.empty():
                got = reports.get_nowait()
                if want(got):
                    return got
            return None
        return check

    from kubernetes import client, config

    pool = Pool(apiserver, node)
    client.CoreV1Api(config.new_client_from_config(str(apiserver))).create_namespace(
        {"metadata": {"name": "hs"}})

    def healthy_condition() -> str:
        [entry] = pool.objects.get_namespaced_custom_object(
            "resource.k8s.io", "v1", "hs", "resourceclaims", "on-gpu-2")["status"]["devices"]
        found = {c["type"]: c["status"] for c in entry.get("conditions") or []}
        return found.get("Healthy", "") if found.get("Ready") == "True" else ""

    try:
        first = wait_for(reported(lambda r: len(r) == 8), "a full health report", inst.proc)
        assert set(first.values()) == {"HEALTHY"}
        # A claim prepared on gpu-2: its device status gets Ready and Healthy conditions.
        uid = allocate(pool.objects, "hs", "on-gpu-2", node, "gpu-2")
        dra = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{inst.dra}"))
        r = dra.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[
            dra_v1_pb2.Claim(namespace="hs", name="on-gpu-2", uid=uid)]), timeout=10)
        assert r.claims[uid].error == ""
        wait_for(lambda: healthy_condition() == "True", "claim conditions", inst.proc)
        wait_for(lambda: "watching NVML events" in (short_tmp / "hs.log").read_text(),
                 "the event set", inst.proc)
        faults.inject(state_path, 2, "xid", 48)
        got = wait_for(reported(lambda r: r.get("gpu-2") == "UNHEALTHY"), "gpu-2 unhealthy",
                       inst.proc)
        assert {n for n, h in got.items() if h != "HEALTHY"} == {"gpu-2"}
        wait_for(lambda: healthy_condition() == "False", "claim condition Healthy=False",
                 inst.proc)
        faults.clear(state_path, 2)
        wait_for(reported(lambda r: len(r) == 8 and set(r.values()) == {"HEALTHY"}),
                 "gpu-2 healthy again", inst.proc)
        wait_for(lambda: healthy_condition() == "True", "claim condition Healthy=True",
                 inst.proc)
    finally:
        stream.cancel()
        channel.close()
        inst.close()


def test_mig_reconfiguration_through_nvml_republishes_a_new_generation(
        short_tmp: Path, apiserver: Path) -> None:
    env, node, _state = fake_node(short_tmp, "mixed.yaml", 0)  # a100-0: GPU 0 and 1 in MIG mode
    pool = Pool(apiserver, node)
    inst = Instance(short_tmp, apiserver, env, node, "mig", rediscover_s=1)
    try:
        names = wait_for(lambda: sorted(pool.devices()), "slices", inst.proc)
        assert "gpu-1" not in names and "gpu-2" in names  # MIG mode: never offered whole
        migs = [n for n in names if n.startswith("gpu-0-mig-")]
        assert len(migs) == 3
        for name in migs:
            d = pool.devices()[name]
            assert d["attributes"]["type"] == {"string": "mig"}
            assert d["attributes"]["parentUUID"]["string"].startswith("GPU-")
            assert {"multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines",
                    "ofaEngines", "memory"} <= set(d["capacity"])
        first = pool.generation()
        # An operator reconfigures through NVML: a 1g instance on GPU 1, MIG on for GPU 2.
        subprocess.run([sys.executable, "-c", _RECONFIGURE], env=env, check=True, timeout=60)
        wait_for(lambda: any(n.startswith("gpu-1-mig-") for n in pool.devices())
                 and "gpu-2" not in pool.devices(), "the reconfigured pool", inst.proc)
        assert pool.generation() > first
        new = [n for n in pool.devices() if n.startswith("gpu-1-mig-")]
        assert new == ["gpu-1-mig-1g5gb-19-0"]  # 1g.5gb: profile id 19, first slice
        assert pool.devices()[new[0]]["attributes"]["profile"] == {"string": "1g.5gb"}
    finally:
        inst.proc.send_signal(signal.SIGTERM)
        inst.close()


_RECONFIGURE = """
import pynvml as n
n.nvmlInit()
gpu1, gpu2 = n.nvmlDeviceGetHandleByIndex(1), n.nvmlDeviceGetHandleByIndex(2)
info = n.nvmlDeviceGetGpuInstanceProfileInfo(gpu1, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
gi = n.nvmlDeviceCreateGpuInstance(gpu1, info.id)
ci = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
n.nvmlGpuInstanceCreateComputeInstance(gi, ci.id)
n.nvmlDeviceSetMigMode(gpu2, n.NVML_DEVICE_MIG_ENABLE)
n.nvmlShutdown()
"""


NVIDIA = drivers.NVIDIA


def test_nvidia_compatible_health_names_and_node_owner(short_tmp: Path, apiserver: Path) -> None:
    """With NVIDIA's driver name: MIG names NVIDIA's driver parses, slices owned by the Node,
    a GPU-wide XID on a MIG GPU ignored (NVIDIA publishes no such device), and a lost GPU
    tainting every device of the node."""
    from kubernetes import client, config

    from fakegpu.nvml import faults

    env, node, state_path = fake_node(short_tmp, "mixed.yaml", 0)  # a100-0: GPU 0 in MIG mode
    core = client.CoreV1Api(config.new_client_from_config(str(apiserver)))
    uid = core.create_node({"metadata": {"name": node}}).metadata.uid
    pool = Pool(apiserver, node, NVIDIA)
    inst = Instance(short_tmp, apiserver, env, node, "nv", rediscover_s=600, driver=NVIDIA)
    try:
        names = sorted(wait_for(pool.devices, "slices", inst.proc))
        assert names == ["gpu-0-mig-1g5gb-19-6", "gpu-0-mig-2g10gb-14-4", "gpu-0-mig-3g20gb-9-0",
                         "gpu-2", "gpu-3"]
        assert {o["kind"]: o["uid"] for s in pool.slices()
                for o in s["metadata"]["ownerReferences"]} == {"Node": uid}
        wait_for(lambda: "watching NVML events" in (short_tmp / "nv.log").read_text(),
                 "the event set", inst.proc)
        faults.inject(state_path, 0, "xid", 48)  # GPU-wide, on the MIG GPU: ignored
        faults.inject(state_path, 2, "xid", 48)  # after it: once this shows, both were read
        wait_for(lambda: pool.taints("gpu-2") == {f"{NVIDIA}/xid": "48"}, "xid taint",
                 inst.proc)
        assert all(pool.taints(n) == {} for n in names if n.startswith("gpu-0-"))
        faults.inject(state_path, 3, "gpu-lost")
        wait_for(lambda: all(f"{NVIDIA}/gpu-lost" in pool.taints(n) for n in names),
                 "gpu-lost on every device", inst.proc)
    finally:
        inst.close()
