"""Plugin versions side by side, as real processes against a real kube-apiserver; the test plays
the kubelet (docs/upgrades.md).

What the e2e upgrade suite cannot see from the API: the kubelet's calls and the plugins' claim
records agree (a claim is prepared once, whichever instance is asked again), an older plugin
reads the records a newer one wrote (downgrade), a broken release never serves, and a plugin
stopped for replacement (SIGUSR1) leaves the node's slices to its successor.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakegpu.kubeletplugin.proto import dra_v1_pb2, dra_v1_pb2_grpc

from . import test_plugin_process as processes
from .test_plugin_process import DRIVER, Instance, Pool, allocate, wait_for

# The real apiserver and a node's NVML state, as the plugin process tests make them.
apiserver = processes.apiserver
nvml_env = processes.nvml_env

pytestmark = pytest.mark.integration


def versioned(env: dict[str, str], version: str) -> dict[str, str]:
    return {**env, "FAKEGPU_PLUGIN_VERSION": version}


def prepare(inst: Instance, uid: str, name: str) -> Any:
    with grpc.insecure_channel(f"unix://{inst.dra}") as ch:
        r = dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=[
                dra_v1_pb2.Claim(namespace="up", name=name, uid=uid)]), timeout=20)
    assert r.claims[uid].error == ""
    return [list(d.cdi_device_ids) for d in r.claims[uid].devices]


def unprepare(inst: Instance, uid: str, name: str) -> None:
    with grpc.insecure_channel(f"unix://{inst.dra}") as ch:
        r = dra_v1_pb2_grpc.DRAPluginStub(ch).NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[
                dra_v1_pb2.Claim(namespace="up", name=name, uid=uid)]), timeout=20)
    assert r.claims[uid].error == ""


def record(root: Path, uid: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((root / "kubelet" / "plugins" / DRIVER / "claims" /
                                      f"{uid}.json").read_text())
    return raw


def status_version(objects: Any, name: str) -> str:
    claim = objects.get_namespaced_custom_object("resource.k8s.io", "v1", "up",
                                                 "resourceclaims", name)
    [entry] = claim["status"]["devices"]
    return str(entry["data"].get("pluginVersion", ""))


def test_downgrade_the_older_plugin_reads_newer_records_and_prepares_once(
        short_tmp: Path, apiserver: Path, nvml_env: tuple[dict[str, str], str]) -> None:
    from kubernetes import client, config

    env, node = nvml_env
    objects = client.CustomObjectsApi(config.new_client_from_config(str(apiserver)))
    client.CoreV1Api(objects.api_client).create_namespace({"metadata": {"name": "up"}})
    newer = Instance(short_tmp, apiserver, versioned(env, "2.0.0"), node, "new")
    older = None
    try:
        devices = sorted(wait_for(lambda: Pool(apiserver, node).devices(), "devices"))
        uid0 = allocate(objects, "up", "c0", node, devices[0])
        uid1 = allocate(objects, "up", "c1", node, devices[1])
        ids = prepare(newer, uid0, "c0")
        assert record(short_tmp, uid0)["claim"]["plugin_version"] == "2.0.0"
        assert status_version(objects, "c0") == "2.0.0"
        # A field a later release may add: the older plugin must not choke on it.
        rec = record(short_tmp, uid0)
        rec["claim"]["added_by_a_later_release"] = {"x": 1}
        (short_tmp / "kubelet" / "plugins" / DRIVER / "claims" / f"{uid0}.json").write_text(
            json.dumps(rec))
        newer.close()
        older = Instance(short_tmp, apiserver, versioned(env, "1.0.0"), node, "old")
        # The kubelet asks again after the switch: the same answer, nothing prepared anew.
        assert prepare(older, uid0, "c0") == ids
        assert record(short_tmp, uid0)["claim"]["plugin_version"] == "2.0.0"
        assert status_version(objects, "c0") == "2.0.0"
        prepare(older, uid1, "c1")
        assert status_version(objects, "c1") == "1.0.0"
        unprepare(older, uid0, "c0")
        assert not (short_tmp / "kubelet" / "plugins" / DRIVER / "claims" /
                    f"{uid0}.json").exists()
        assert not list((short_tmp / "cdi").glob(f"*{uid0}*"))
    finally:
        newer.close()
        if older is not None:
            older.close()


def test_a_broken_release_never_serves_nor_publishes(
        short_tmp: Path, apiserver: Path, nvml_env: tuple[dict[str, str], str]) -> None:
    env, node = nvml_env
    kubelet = short_tmp / "kubelet"
    log = short_tmp / "broken.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fakegpu", "plugin", "run", "--node", node,
             "--driver", DRIVER, "--kubeconfig", str(apiserver), "--kubelet-root",
             str(kubelet), "--cdi-root", str(short_tmp / "cdi"), "--instance-id", "bad"],
            env=versioned(env, "3.0.0-broken"), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "startup self-check failed" in log.read_text(), "the failed check",
                 proc)
        assert not list((kubelet / "plugins_registry").glob("*bad*"))
        assert Pool(apiserver, node).slices() == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stopped_for_replacement_the_plugin_leaves_its_slices(
        short_tmp: Path, apiserver: Path) -> None:
    from .test_plugin_process import fake_node

    env, node, _path = fake_node(short_tmp, "dgx-h100.yaml", 0)
    inst = Instance(short_tmp, apiserver, env, node, "usr1")
    pool = Pool(apiserver, node)
    try:
        published = wait_for(pool.devices, "devices")
        inst.proc.send_signal(signal.SIGUSR1)
        assert inst.proc.wait(30) == 0
        assert not inst.reg.exists()
        assert pool.devices() == published  # left for the next instance to adopt
    finally:
        inst.close()
        for s in pool.slices():  # no successor here: clean up as the kubelet would
            pool.objects.delete_cluster_custom_object("resource.k8s.io", "v1",
                                                      "resourceslices", s["metadata"]["name"])
