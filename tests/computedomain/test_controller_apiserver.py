"""The ComputeDomain controller against a real kube-apiserver (no kubelets, no other
controllers): what it creates for a domain, how status follows the daemons' entries, and that
deletion leaves nothing behind, also for daemon pods of nodes that are gone; then the running
controller: driven by watch events (not by its resync), and stopped cleanly by SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fakegpu.cluster.embedded import computedomains
from fakegpu.computedomain import killpoint, kube, objects
from fakegpu.computedomain.controller import KILL_STEPS, Config, Controller
from fakegpu.computedomain.names import PLURAL, VERSION, daemonset_name, for_gpu_driver
from fakegpu.deploy.manifests import NAMESPACE
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.wait import NotYet, WaitTimeout, wait_for

pytestmark = pytest.mark.integration
NAMES = for_gpu_driver("gpu.nvidia.com")
# The running controller's resync, and how long its tests wait for what they expect: far
# shorter, so only the watches can explain what happens.
RESYNC_S = 300.0
WAIT_S = 30.0


@pytest.fixture(scope="module")
def apis(control_plane: tuple[client.ApiClient, Any], tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[client.ApiClient, client.ApiClient, Path]]:
    """(admin, the controller's own service account as the chart grants it, and that
    account's kubeconfig)."""
    c, cp = control_plane
    assert cp.certs is not None
    own_config = computedomains.controller_credentials(
        c, tmp_path_factory.mktemp("sa"), server=cp.server, ca=cp.certs.ca.cert_path,
        cluster="cp")
    own = kubeapi.connect(own_config)
    yield c, own, own_config
    own.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def api(apis: tuple[client.ApiClient, client.ApiClient, Path]) -> client.ApiClient:
    return apis[0]


@pytest.fixture
def controller(apis: tuple[client.ApiClient, client.ApiClient, Path]) -> Controller:
    """The controller with the chart's RBAC: a right it lacks fails these tests."""
    return Controller(apis[1], Config(NAMES, NAMESPACE, "img:1"))


def test_a_domain_gets_its_objects_status_and_a_clean_deletion(api: client.ApiClient,
                                                               controller: Controller) -> None:
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    apps: Any = client.AppsV1Api(api)
    core.create_namespace({"metadata": {"name": "job"}})
    core.create_node({"metadata": {"name": "n0"}})
    cd = custom.create_namespaced_custom_object(NAMES.group, VERSION, "job", PLURAL, {
        "apiVersion": NAMES.api_version, "kind": "ComputeDomain", "metadata": {"name": "d"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "ch"}}}})
    uid = cd["metadata"]["uid"]
    ctl = controller
    ctl.reconcile_all()

    cd = kube.get_domain(api, NAMES, "job", "d")
    assert NAMES.finalizer in cd["metadata"]["finalizers"]
    assert cd["status"] == {"status": "NotReady"}
    template = custom.get_namespaced_custom_object("resource.k8s.io", "v1", "job",
                                                   "resourceclaimtemplates", "ch")
    assert template["metadata"]["labels"][NAMES.label_key] == uid
    ds = apps.read_namespaced_daemon_set(daemonset_name(uid), NAMESPACE)
    assert ds.spec.template.spec.node_selector == {NAMES.label_key: uid}

    # Daemon pods on n0 and on n-gone (a node deleted since), each node's entry Ready.
    for node in ("n0", "n-gone"):
        core.create_namespaced_pod(NAMESPACE, {
            "metadata": {"name": f"imex-{node}", "labels": {NAMES.label_key: uid}},
            "spec": {"nodeName": node, "serviceAccountName": "fakegpu",
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "img:1"}]}})
        kube.update_status(api, NAMES, "job", "d", _ready_entry(node))
    # An entry of a node without a daemon pod is dropped.
    kube.update_status(api, NAMES, "job", "d", lambda s: {
        **s, "nodes": objects.upsert_node(s["nodes"], {
            "name": "n-left", "ipAddress": "", "cliqueID": "c.1", "status": "Ready"})})
    ctl.reconcile_all()
    status = kube.get_domain(api, NAMES, "job", "d")["status"]
    assert status["status"] == "Ready"
    assert sorted(n["name"] for n in status["nodes"]) == ["n-gone", "n0"]
    core.patch_node("n0", {"metadata": {"labels": {NAMES.label_key: uid}}})

    custom.delete_namespaced_custom_object(NAMES.group, VERSION, "job", PLURAL, "d")
    ctl.reconcile_all()
    # No kubelet confirms the pod on n0: the domain waits for it (its finalizer stays)...
    assert kube.get_domain(api, NAMES, "job", "d")["metadata"]["deletionTimestamp"]
    assert not core.list_node(label_selector=NAMES.label_key).items
    assert [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE).items] == ["imex-n0"]
    core.delete_namespaced_pod("imex-n0", NAMESPACE, grace_period_seconds=0)
    ctl.reconcile_all()
    # ...and once it is gone, nothing is left.
    with pytest.raises(errors.NotFound):
        kube.get_domain(api, NAMES, "job", "d")
    for ns in ("job", NAMESPACE):
        assert not custom.list_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, "resourceclaimtemplates")["items"]
    assert not apps.list_namespaced_daemon_set(NAMESPACE).items


def _ready_entry(node: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(status: dict[str, Any]) -> dict[str, Any]:
        return {**status, "nodes": objects.upsert_node(status.get("nodes") or [], {
            "name": node, "ipAddress": "10.0.0.1", "cliqueID": "c.1", "status": "Ready"})}
    return change


def test_objects_of_a_domain_deleted_while_no_controller_ran_are_removed(
        api: client.ApiClient, controller: Controller) -> None:
    custom: Any = client.CustomObjectsApi(api)
    apps: Any = client.AppsV1Api(api)
    # A namespace of its own: under xdist the test that creates "job" may run on another worker.
    d = objects.Domain("gone-job", "old", "0000-gone", 1, "old-ch", "Single")
    own_namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": d.namespace}}
    kubeapi.apply(api, [own_namespace,
                        objects.channel_template(NAMES, d, version=controller.resource_version),
                        objects.daemonset(NAMES, d, NAMESPACE, "img:1")])
    controller.reconcile_all()
    assert not custom.list_cluster_custom_object(
        "resource.k8s.io", "v1", "resourceclaimtemplates",
        label_selector=f"{NAMES.label_key}=0000-gone")["items"]
    assert not apps.list_namespaced_daemon_set(
        NAMESPACE, label_selector=f"{NAMES.label_key}=0000-gone").items


def test_a_bad_spec_is_an_event_on_the_domain(api: client.ApiClient,
                                              controller: Controller) -> None:
    custom: Any = client.CustomObjectsApi(api)
    core: Any = client.CoreV1Api(api)
    # The CRD's schema refuses most bad specs; a taken template name is the controller's to say.
    core.create_namespace({"metadata": {"name": "taken"}})
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", "taken",
                                           "resourceclaimtemplates", {
        "metadata": {"name": "mine"}, "spec": {"spec": {"devices": {"requests": []}}}})
    custom.create_namespaced_custom_object(NAMES.group, VERSION, "taken", PLURAL, {
        "apiVersion": NAMES.api_version, "kind": "ComputeDomain", "metadata": {"name": "d"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "mine"}}}})
    controller.reconcile_all()
    events = [e for e in core.list_namespaced_event("taken").items
              if e.reason == "InvalidSpec"]
    assert events and "ResourceClaimTemplate taken/mine exists" in events[0].message
    # ...and a condition on it (status NotReady), so `kubectl get -o yaml` says it too.
    status = kube.get_domain(api, NAMES, "taken", "d")["status"]
    [valid] = status["conditions"]
    assert (valid["type"], valid["status"], valid["reason"]) == ("Valid", "False", "InvalidSpec")
    assert "ResourceClaimTemplate taken/mine exists" in valid["message"]
    assert status["status"] == "NotReady"
    # The name freed: the next pass makes the template and the condition goes.
    custom.delete_namespaced_custom_object("resource.k8s.io", "v1", "taken",
                                           "resourceclaimtemplates", "mine")
    controller.reconcile_all()
    assert "conditions" not in kube.get_domain(api, NAMES, "taken", "d")["status"]
    with pytest.raises(client.ApiException) as refused:
        custom.create_namespaced_custom_object(NAMES.group, VERSION, "taken", PLURAL, {
            "apiVersion": NAMES.api_version, "kind": "ComputeDomain", "metadata": {"name": "x"},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "t"},
                                                "allocationMode": "Some"}}})
    assert refused.value.status == 422


@pytest.mark.parametrize("name", ["Bad_Name!", "UPPER", "x" * 300, "../x"])
def test_the_crd_refuses_a_template_name_that_is_no_object_name(api: client.ApiClient,
                                                                name: str) -> None:
    custom: Any = client.CustomObjectsApi(api)
    with pytest.raises(client.ApiException) as refused:
        custom.create_namespaced_custom_object(NAMES.group, VERSION, "default", PLURAL, {
            "apiVersion": NAMES.api_version, "kind": "ComputeDomain", "metadata": {"name": "n"},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": name}}}})
    assert refused.value.status == 422
    assert "spec.channel.resourceClaimTemplate.name" in str(refused.value.body)


# --- the running controller ---------------------------------------------------------------------


@contextlib.contextmanager
def running(ctl: Controller) -> Iterator[None]:
    """``ctl.run`` in a thread, once its watches listed and its first pass ran; on leaving,
    stopped, and it must have returned."""
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: ctl.synced.is_set() or _not_yet("first pass"),
                 what="the controller's lists and first pass", timeout=WAIT_S, interval=0.1)
        yield
    finally:
        stop.set()
        thread.join(timeout=WAIT_S)
    assert not thread.is_alive(), "the controller did not return after stop"


def _not_yet(state: str) -> bool:
    raise NotYet(state)


def _found(call: Callable[[], Any], what: str) -> Any:
    """``call()``'s object; NotYet while it is 404."""
    try:
        return call()
    except (errors.KubeError, client.ApiException) as err:  # kube's calls, or raw ones
        if not errors.is_not_found(err):
            raise
        raise NotYet(f"no {what}") from err


def _gone(call: Callable[[], Any], what: str) -> None:
    try:
        call()
    except (errors.KubeError, client.ApiException) as err:  # kube's calls, or raw ones
        if errors.is_not_found(err):
            return
        raise
    raise NotYet(f"{what} still there")


def test_the_running_controller_follows_events_not_its_resync(
        apis: tuple[client.ApiClient, client.ApiClient, Path]) -> None:
    api, own, _ = apis
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    apps: Any = client.AppsV1Api(api)
    ctl = Controller(own, Config(NAMES, NAMESPACE, "img:1", resync_s=RESYNC_S))
    core.create_namespace({"metadata": {"name": "watch"}})
    with running(ctl):
        # Created after the first pass: only the domain's watch event can bring it.
        cd = custom.create_namespaced_custom_object(NAMES.group, VERSION, "watch", PLURAL, {
            "apiVersion": NAMES.api_version, "kind": "ComputeDomain",
            "metadata": {"name": "w"},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "w-ch"}}}})
        uid = cd["metadata"]["uid"]

        def template() -> Any:
            return _found(lambda: custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", "watch", "resourceclaimtemplates", "w-ch"),
                "channel template")

        def daemonset() -> Any:
            return _found(lambda: apps.read_namespaced_daemon_set(daemonset_name(uid),
                                                                  NAMESPACE), "DaemonSet")

        first_template = wait_for(template, what="the channel template", timeout=WAIT_S,
                                  interval=0.2)
        assert first_template["metadata"]["labels"][NAMES.label_key] == uid
        first_ds = wait_for(daemonset, what="the IMEX DaemonSet", timeout=WAIT_S,
                            interval=0.2)

        # Owned objects deleted by hand come back, each from its own watch.
        apps.delete_namespaced_daemon_set(daemonset_name(uid), NAMESPACE)
        wait_for(lambda: daemonset().metadata.uid != first_ds.metadata.uid or _not_yet(
            "the old DaemonSet"), what="the DaemonSet recreated", timeout=WAIT_S,
            interval=0.2)
        custom.delete_namespaced_custom_object("resource.k8s.io", "v1", "watch",
                                               "resourceclaimtemplates", "w-ch")
        wait_for(lambda: template()["metadata"]["uid"] != first_template["metadata"]["uid"]
                 or _not_yet("the old template"), what="the channel template recreated",
                 timeout=WAIT_S, interval=0.2)

        # A daemon's entry (a status write, as the IMEX daemon makes it): status follows.
        core.create_namespaced_pod(NAMESPACE, {
            "metadata": {"name": "imex-watch", "labels": {NAMES.label_key: uid}},
            "spec": {"nodeName": "n-watch-gone", "serviceAccountName": "fakegpu",
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "img:1"}]}})
        kube.update_status(api, NAMES, "watch", "w", _ready_entry("n-watch-gone"))

        def ready() -> None:
            status = (kube.get_domain(api, NAMES, "watch", "w").get("status") or {})
            if status.get("status") != "Ready":
                raise NotYet(f"status {status}")

        wait_for(ready, what="the domain Ready", timeout=WAIT_S, interval=0.2)

        # Deletion: finalized from the events (the pod's node does not exist: force-deleted).
        custom.delete_namespaced_custom_object(NAMES.group, VERSION, "watch", PLURAL, "w")
        wait_for(lambda: _gone(lambda: kube.get_domain(api, NAMES, "watch", "w"), "domain"),
                 what="the domain finalized", timeout=WAIT_S, interval=0.2)
        assert not apps.list_namespaced_daemon_set(
            NAMESPACE, label_selector=f"{NAMES.label_key}={uid}").items
        assert not custom.list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceclaimtemplates",
            label_selector=f"{NAMES.label_key}={uid}")["items"]
        assert not core.list_namespaced_pod(
            NAMESPACE, label_selector=f"{NAMES.label_key}={uid}").items


def test_the_controller_process_stops_cleanly_on_sigterm(
        apis: tuple[client.ApiClient, client.ApiClient, Path], tmp_path: Path) -> None:
    api, _, kubeconfig = apis
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": "sig"}})
    log = tmp_path / "controller.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fakegpu", "computedomain", "controller",
             "--domain", NAMES.domain, "--namespace", NAMESPACE, "--daemon-image", "img:1",
             "--kubeconfig", str(kubeconfig), "--resync", str(RESYNC_S)],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        custom.create_namespaced_custom_object(NAMES.group, VERSION, "sig", PLURAL, {
            "apiVersion": NAMES.api_version, "kind": "ComputeDomain",
            "metadata": {"name": "s"},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "s-ch"}}}})
        wait_for(lambda: _found(lambda: custom.get_namespaced_custom_object(
            "resource.k8s.io", "v1", "sig", "resourceclaimtemplates", "s-ch"), "template"),
            what="the process's channel template", timeout=WAIT_S, interval=0.2)
        # Running (it made the template), watches open: SIGTERM ends it with status 0.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "controller stopped" in text, text
    assert "Traceback" not in text, text
    assert not [line for line in text.splitlines() if "WARNING" in line], text


@pytest.mark.parametrize("step", KILL_STEPS)
def test_a_controller_killed_at_any_step_converges_when_started_again(
        apis: tuple[client.ApiClient, client.ApiClient, Path], tmp_path: Path,
        step: str) -> None:
    api, _, kubeconfig = apis
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    apps: Any = client.AppsV1Api(api)
    ns = f"ck-{step}"
    core.create_namespace({"metadata": {"name": ns}})
    cd = custom.create_namespaced_custom_object(NAMES.group, VERSION, ns, PLURAL, {
        "apiVersion": NAMES.api_version, "kind": "ComputeDomain", "metadata": {"name": "k"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "k-ch"}}}})
    uid = cd["metadata"]["uid"]
    argv = [sys.executable, "-m", "fakegpu", "computedomain", "controller",
            "--domain", NAMES.domain, "--namespace", NAMESPACE, "--daemon-image", "img:1",
            "--kubeconfig", str(kubeconfig), "--resync", str(RESYNC_S)]
    log = tmp_path / "controller.log"
    # Only this domain has anything left to create: the step is reached on it.
    with log.open("w") as out:
        killed = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=WAIT_S * 4,
                                env={**os.environ, killpoint.ENV: step})
    assert killed.returncode == -signal.SIGKILL, log.read_text()
    with log.open("a") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        def converged() -> None:
            now = kube.get_domain(api, NAMES, ns, "k")
            selector = f"{NAMES.label_key}={uid}"
            templates = custom.list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceclaimtemplates",
                label_selector=selector)["items"]
            sets = apps.list_namespaced_daemon_set(NAMESPACE, label_selector=selector).items
            state = (NAMES.finalizer in (now["metadata"].get("finalizers") or []),
                     (now.get("status") or {}).get("status"), len(templates), len(sets))
            if state != (True, "NotReady", 2, 1):
                raise NotYet(f"finalizer, status, templates, DaemonSets: {state}")

        try:
            # A process start on a loaded host comes on top (still below the resync).
            wait_for(converged, what="the domain's objects after the restart",
                     timeout=WAIT_S * 4, interval=0.2)
        except WaitTimeout as err:
            pytest.fail(f"{err}; the restarted controller: exit {proc.poll()}; the log:\n"
                        f"{log.read_text()}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
