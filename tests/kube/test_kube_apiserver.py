"""fakegpu.kube's namespaces, pods and events against a real kube-apiserver (no kubelet, no
scheduler: pods stay Pending, which is all these calls need), and the error vocabulary as the
apiserver really answers. Exec needs a kubelet: the e2e suites run it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors, events, namespaces, pods

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(bare_control_plane: Any) -> Iterator[client.ApiClient]:
    with bare_control_plane() as cp:
        c = kubeapi.connect(Path(cp.kubeconfig))
        yield c
        c.close()  # type: ignore[no-untyped-call]


def _namespace(api: client.ApiClient, name: str) -> None:
    """A namespace pods can be created in: with no controllers, its ``default`` service
    account (which the admission of every pod looks up) is made here."""
    namespaces.create(api, name)
    client.CoreV1Api(api).create_namespaced_service_account(
        name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default")))


def _pod(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox:local"}]}}


def test_a_namespace_is_created_once_and_deleted(api: client.ApiClient) -> None:
    namespaces.create(api, "kube-ns-a", {"team": "x"})
    with pytest.raises(errors.Conflict, match=r"^cannot create namespace kube-ns-a: HTTP 409 "):
        namespaces.create(api, "kube-ns-a")
    ns = namespaces.read(api, "kube-ns-a")
    assert ns is not None and ns.metadata.labels["team"] == "x"
    assert namespaces.delete(api, "kube-ns-a") is True
    assert namespaces.read(api, "never-made") is None
    assert namespaces.delete(api, "never-made") is False


def test_pods_are_created_read_and_deleted(api: client.ApiClient) -> None:
    _namespace(api, "kube-pods")
    made = pods.create(api, "kube-pods", _pod("p1"))
    assert made.metadata.name == "p1"
    assert pods.read(api, "kube-pods", "p1").status.phase == "Pending"  # no scheduler here
    assert pods.read_json(api, "kube-pods", "p1")["spec"]["containers"][0]["name"] == "c"
    assert [p.metadata.name for p in pods.list_in(api, "kube-pods")] == ["p1"]
    assert pods.summary(pods.read(api, "kube-pods", "p1")).startswith("phase=Pending")
    pods.delete_all(api, "kube-pods")
    # Never bound to a node, the pod goes at once; the wait sees it gone.
    pods.wait_gone(api, "kube-pods", "p1", timeout=60)
    with pytest.raises(errors.NotFound, match=r"^cannot read pod kube-pods/p1: HTTP 404 "):
        pods.read(api, "kube-pods", "p1")
    pods.delete_all(api, "no-such-namespace")  # nothing to delete is not an error


def test_a_refused_object_is_invalid_with_the_apiservers_reason(api: client.ApiClient) -> None:
    _namespace(api, "kube-bad")
    bad = _pod("Not_A_Name")
    with pytest.raises(errors.Invalid, match=r"HTTP 422 .*Not_A_Name") as got:
        pods.create(api, "kube-bad", bad)
    assert got.value.status == 422 and not got.value.transient


def test_an_event_is_recorded_and_described(api: client.ApiClient) -> None:
    _namespace(api, "kube-events")
    pod = pods.read_json(api, "kube-events", pods.create(
        api, "kube-events", _pod("p")).metadata.name)
    events.record(api, pod, "Checked", "looked at it", warning=True, component="tests")
    listed = events.list_in(api, "kube-events")
    found = events.find(listed, "Checked", involved="p")
    assert found is not None and found.type == "Warning" and found.source.component == "tests"
    assert events.find(listed, "Checked", involved="other") is None
    assert "Warning Checked Pod/p (x1): looked at it" in events.describe(api, "kube-events")
    assert events.describe(api, "kube-empty") == "(no events in namespace kube-empty)"


def test_a_refusal_by_admission_is_forbidden_with_its_reason(api: client.ApiClient) -> None:
    namespaces.create(api, "kube-no-sa")  # no controllers: no service account in it
    with pytest.raises(errors.Forbidden, match=r"^cannot create pod kube-no-sa/p: HTTP 403 "
                                               r"Forbidden: .*serviceaccount \"default\" "
                                               r"not found$"):
        pods.create(api, "kube-no-sa", _pod("p"))


def test_a_wait_for_a_pod_whose_image_cannot_be_had_fails_at_once(api: client.ApiClient) -> None:
    """The kubelet's report (set here through the status subresource, as a kubelet writes it):
    an image that cannot be pulled ends the wait at once, naming the image and the reason,
    instead of holding it for its timeout (an offline cluster and a default image)."""
    _namespace(api, "kube-stuck")
    pods.create(api, "kube-stuck", _pod("p"))
    status = {"status": {"phase": "Pending", "containerStatuses": [{
        "name": "c", "image": "busybox:local", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"waiting": {"reason": "ErrImagePull", "message": "dial tcp: no route"}}}]}}
    core = client.CoreV1Api(api)
    core.patch_namespaced_pod_status("p", "kube-stuck", status)
    # A first pull error may be a hiccup: the wait goes on (here: to its short timeout).
    with pytest.raises(Exception, match="ErrImagePull") as first:
        pods.wait_running(api, "kube-stuck", "p", timeout=1.0, interval=0.2)
    assert not isinstance(first.value, pods.PodFailed)
    status["status"]["containerStatuses"][0]["state"] = {"waiting": {  # type: ignore[index]
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "busybox:local"'}}
    core.patch_namespaced_pod_status("p", "kube-stuck", status)
    with pytest.raises(pods.PodFailed, match=r"^pod kube-stuck/p cannot run: container c "
                                             r"\(image busybox:local\): ImagePullBackOff: "):
        pods.wait_running(api, "kube-stuck", "p", timeout=30.0, interval=0.2)
    pods.delete_all(api, "kube-stuck")


def test_the_version_serving_a_kind_is_read_from_discovery(api: client.ApiClient) -> None:
    # Claims are served in the newest version the group has; a name no version lists is None.
    assert kubeapi.version_serving(api, "resourceclaims") == kubeapi.resource_version(api)
    assert kubeapi.version_serving(api, "resourceclaims", ("v1alpha0",)) is None
    assert kubeapi.version_serving(api, "nosuchthings") is None
