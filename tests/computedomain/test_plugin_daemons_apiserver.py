"""The compute-domain plugin's IMEX daemons against a real kube-apiserver: a plugin killed
with SIGKILL at every step of a daemon claim's prepare and of the daemon's start
(``killpoint.ENV``), then started again, leaves exactly one daemon for the claim, and
unprepare leaves none and no status entry of the node; a plugin that ends does not take its
daemons along (the next adopts them); a daemon whose claim record is gone ends by itself; a
daemon claim outside the driver's namespace (a user's copy of the controller's) starts none.

The plugin here is its driver in a process of its own (what the kubelet's gRPC calls reach in
``fakegpu computedomain plugin``), so the kill -9 lands where the real one would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fakegpu.computedomain import killpoint, kube
from fakegpu.computedomain.names import DAEMON, DAEMON_CONFIG_KIND, PLURAL, VERSION
from fakegpu.computedomain.plugin import KILL_STEPS, ComputeDomainDriver, Config
from fakegpu.deploy.manifests import NAMESPACE
from fakegpu.kubeletplugin.claims import ClaimRef
from fakegpu.wait import NotYet, wait_for

from .conftest import NAMES

pytestmark = pytest.mark.integration
NODE = "n0"
WAIT_S = 30.0

# One plugin lifetime: start (adopt or restart the recorded daemons), then one kubelet call.
PLUGIN = """
import json, sys
from pathlib import Path
from fakegpu.computedomain import kube
from fakegpu.computedomain.connect import connect
from fakegpu.computedomain.names import for_cd_driver
from fakegpu.computedomain.plugin import ComputeDomainDriver, Config
from fakegpu.deploy.manifests import NAMESPACE
from fakegpu.kubeletplugin.claims import ClaimRef
driver, node, kubeconfig, root, action, ns, name, uid = sys.argv[1:]
root = Path(root)
api = connect(Path(kubeconfig))
d = ComputeDomainDriver(Config(for_cd_driver(driver), node, Path(kubeconfig), root / "kubelet",
                               root / "cdi", root / "state", NAMESPACE), api,
                        kube.resource_version(api))
d.restart_daemons()
ref = ClaimRef(ns, name, uid)
if action == "prepare":
    print(json.dumps(d.prepare([ref])[uid].error))
elif action == "unprepare":
    print(json.dumps(d.unprepare([ref])[uid]))
else:  # "start": no call, the plugin ends
    print(json.dumps(""))
"""


@dataclass(frozen=True)
class Setup:
    api: client.ApiClient
    kubeconfig: Path
    root: Path
    domain: str  # namespace/name
    ref: ClaimRef

    def config(self) -> Config:
        r = self.root
        return Config(NAMES, NODE, self.kubeconfig, r / "kubelet", r / "cdi", r / "state",
                      NAMESPACE)

    def plugin(self, action: str, kill_at: str = "") -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != killpoint.ENV}
        if kill_at:
            env[killpoint.ENV] = kill_at
        return subprocess.run(
            [sys.executable, "-c", PLUGIN, NAMES.driver, NODE, str(self.kubeconfig),
             str(self.root), action, self.ref.namespace, self.ref.name, self.ref.uid],
            capture_output=True, text=True, env=env, timeout=120)

    def daemons(self) -> list[int]:
        return ComputeDomainDriver(self.config(), self.api, "v1")._daemon_pids(self.ref.uid)

    def domain_uid(self) -> str:
        ns, name = self.domain.split("/")
        return str(kube.get_domain(self.api, NAMES, ns, name)["metadata"]["uid"])

    def entries(self) -> list[str]:
        ns, name = self.domain.split("/")
        cd = kube.get_domain(self.api, NAMES, ns, name)
        return [n["name"] for n in (cd.get("status") or {}).get("nodes") or []]


@pytest.fixture
def setup(control_plane: tuple[client.ApiClient, Any], tmp_path: Path) -> Iterator[Setup]:
    """A domain, its daemon pod on NODE (no kubelet runs it) and the pod's daemon claim,
    allocated and reserved as the scheduler would."""
    api, cp = control_plane
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    ns = f"kill-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": ns}})
    cd = custom.create_namespaced_custom_object(NAMES.group, VERSION, ns, PLURAL, {
        "apiVersion": NAMES.api_version, "kind": "ComputeDomain", "metadata": {"name": "d"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "ch"}}}})
    uid = cd["metadata"]["uid"]
    pod, ref = _daemon_pod_and_claim(api, NAMESPACE, f"imex-{ns}", uid)
    s = Setup(api, Path(cp.kubeconfig), tmp_path, f"{ns}/d", ref)
    yield s
    for pid in s.daemons():  # a failed test's daemons do not outlive it
        os.kill(pid, signal.SIGKILL)
    core.delete_namespaced_pod(pod, NAMESPACE, grace_period_seconds=0)
    core.delete_namespace(ns)


def _daemon_pod_and_claim(api: client.ApiClient, namespace: str, pod_name: str,
                          domain_uid: str, sa: str = "fakegpu") -> tuple[str, ClaimRef]:
    """A daemon pod on NODE (no kubelet runs it) and its daemon claim for domain
    ``domain_uid``, allocated and reserved as the scheduler would, in ``namespace``."""
    core: Any = client.CoreV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    pod = core.create_namespaced_pod(namespace, {
        "metadata": {"name": pod_name, "labels": {NAMES.label_key: domain_uid}},
        # (a service account that exists there: no controller makes "default" here)
        "spec": {"nodeName": NODE, "serviceAccountName": sa,
                 "automountServiceAccountToken": False,
                 "containers": [{"name": "c", "image": "img:1"}]}})
    claim = custom.create_namespaced_custom_object("resource.k8s.io", "v1", namespace,
                                                   "resourceclaims", {
        "metadata": {"name": f"daemon-{pod_name}"},
        "spec": {"devices": {"requests": [{"name": DAEMON, "exactly": {
            "deviceClassName": NAMES.daemon_class}}]}}})
    claim["status"] = {"allocation": {"devices": {
        "results": [{"driver": NAMES.driver, "pool": NODE, "device": "daemon-0",
                     "request": DAEMON}],
        "config": [{"source": "FromClaim", "requests": [DAEMON], "opaque": {
            "driver": NAMES.driver, "parameters": {
                "apiVersion": NAMES.api_version, "kind": DAEMON_CONFIG_KIND,
                "domainID": domain_uid}}}]}},
        "reservedFor": [{"resource": "pods", "name": pod.metadata.name,
                         "uid": pod.metadata.uid}]}
    claim = custom.replace_namespaced_custom_object_status(
        "resource.k8s.io", "v1", namespace, "resourceclaims", claim["metadata"]["name"], claim)
    return pod.metadata.name, ClaimRef(namespace, claim["metadata"]["name"],
                                       claim["metadata"]["uid"])


def _entry_written(s: Setup) -> None:
    if NODE not in s.entries():
        raise NotYet(f"no entry of {NODE} in the domain's status yet")


def _ok(out: subprocess.CompletedProcess[str]) -> None:
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == "", out.stdout


@pytest.mark.parametrize("step", KILL_STEPS)
def test_a_plugin_killed_at_any_step_of_a_daemon_start_leaves_one_daemon(
        setup: Setup, step: str) -> None:
    killed = setup.plugin("prepare", kill_at=step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # the step was reached
    # The next plugin (the kubelet asks again): exactly one daemon, however far the first got.
    _ok(setup.plugin("prepare"))
    assert len(setup.daemons()) == 1
    _ok(setup.plugin("prepare"))  # and again: idempotent, still one
    assert len(setup.daemons()) == 1
    wait_for(lambda: _entry_written(setup), what="the daemon's status entry", timeout=WAIT_S,
             interval=0.2)
    # Unprepare: no daemon left, and none of them left an entry behind.
    _ok(setup.plugin("unprepare"))
    assert setup.daemons() == []
    assert NODE not in setup.entries()


def test_daemons_outlive_the_plugin_and_end_with_their_claim_record(setup: Setup) -> None:
    _ok(setup.plugin("prepare"))
    [pid] = setup.daemons()
    # The plugin process ended (a restart, an upgrade): its daemon runs on, adopted next time.
    _ok(setup.plugin("start"))
    assert setup.daemons() == [pid]
    wait_for(lambda: _entry_written(setup), what="the daemon's status entry", timeout=WAIT_S,
             interval=0.2)
    # The node's plugin state gone (an embedded cluster taken down): the daemon ends itself
    # and takes its entry out of the domain.
    (setup.root / "state" / "claims" / f"{setup.ref.uid}.json").unlink()

    def ended() -> None:
        if setup.daemons():
            raise NotYet("the daemon still runs")

    wait_for(ended, what="the daemon to end", timeout=WAIT_S, interval=0.2)
    assert NODE not in setup.entries()


def test_a_daemon_claim_outside_the_drivers_namespace_starts_no_daemon(setup: Setup) -> None:
    """A user copies the controller's daemon claim (the domain's UID in its config) into a
    namespace of their own: refused with the reason, no daemon, no record, no CDI spec."""
    ns = setup.domain.split("/")[0]  # the domain's own namespace: its owner is no exception
    core: Any = client.CoreV1Api(setup.api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "intruder"}})
    _pod, ref = _daemon_pod_and_claim(setup.api, ns, "intruder", setup.domain_uid(),
                                      sa="intruder")
    driver = ComputeDomainDriver(setup.config(), setup.api, "v1")
    try:
        error = driver.prepare([ref])[ref.uid].error
    finally:  # a daemon started by mistake does not outlive the test
        started = driver._daemon_pids(ref.uid)
        for pid in started:
            os.kill(pid, signal.SIGKILL)
    assert started == []
    assert error == (f"ResourceClaim {ns}/{ref.name} is a {DAEMON_CONFIG_KIND} claim: a "
                     f"daemon claim must be in the driver's namespace ({NAMESPACE}), where the "
                     "ComputeDomain controller makes them")
    assert not (setup.root / "state" / "claims" / f"{ref.uid}.json").exists()
    assert list((setup.root / "cdi").iterdir()) == []
    # The controller's claim in the driver's namespace still starts its daemon.
    assert driver.prepare([setup.ref])[setup.ref.uid].error == ""
    assert len(setup.daemons()) == 1
    assert driver.unprepare([setup.ref])[setup.ref.uid] == ""
