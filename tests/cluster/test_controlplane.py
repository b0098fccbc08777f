"""A real etcd + kube-apiserver from the binaries cache (skips loudly without it)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cluster.embedded.controlplane import ControlPlane
from fakegpu.cluster.process import ComponentError, WaitPolicy, is_alive, pids_matching

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bins() -> Any:
    from fakegpu.cluster.artifacts import binaries

    found = binaries.cached()
    if found is None:
        pytest.skip("SKIPPED LOUDLY: Kubernetes binaries are not cached: run "
                    "`fakegpu cluster binaries` first")
    return found


def test_apiserver_serves_every_dra_version(bins: Any, tmp_path: Path) -> None:
    with ControlPlane(tmp_path / "cp", bins, controllers=False,
                      policy=WaitPolicy(timeout=180)) as cp:
        groups = cp.get_json("/apis")["groups"]
        (resource,) = [g for g in groups if g["name"] == "resource.k8s.io"]
        served = {v["version"] for v in resource["versions"]}
        assert {"v1", "v1beta1", "v1beta2", "v1alpha3"} <= served
        out = subprocess.run([str(bins.kubectl), f"--kubeconfig={cp.kubeconfig}", "get", "ns",
                              "default", "-o", "name"], capture_output=True, text=True,
                             check=True).stdout
        assert out.strip() == "namespace/default"
        procs = list(cp.processes)
        assert [p.name for p in procs] == ["etcd", "kube-apiserver"]
    assert not any(is_alive(p) for p in procs)


def test_failing_apiserver_reports_its_log_and_stops_etcd(bins: Any, tmp_path: Path) -> None:
    cp = ControlPlane(tmp_path / "cp", bins, controllers=False, policy=WaitPolicy(timeout=120),
                      gates={"NoSuchGateAnywhere": True})
    with pytest.raises(ComponentError) as info:
        cp.start()
    msg = str(info.value)
    assert "kube-apiserver exited" in msg
    assert "NoSuchGateAnywhere" in msg  # from the apiserver's own log tail
    assert cp.processes == []
    assert "starting etcd" in (tmp_path / "cp" / "logs" / "etcd.log").read_text()
    # etcd was started, then stopped by the failed start: nothing runs from this dir.
    assert pids_matching(lambda argv: any(str(tmp_path) in a for a in argv)) == []


def test_kube_api_writes_against_a_real_apiserver(bins: Any, tmp_path: Path) -> None:
    """What the providers write through fakegpu.kube: server-side apply and a scale (kind's
    CoreDNS), as a real apiserver accepts them."""
    from fakegpu.kube import api as kubeapi

    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "dns", "namespace": "default"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "dns"}},
                 "template": {"metadata": {"labels": {"app": "dns"}},
                              "spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    with ControlPlane(tmp_path / "cp", bins, controllers=False,
                      policy=WaitPolicy(timeout=180)) as cp, \
            kubeapi.session(cp.kubeconfig) as api:
        assert kubeapi.resource_version(api) == "v1"
        kubeapi.apply(api, [deployment])
        kubeapi.apply(api, [deployment])  # idempotent
        kubeapi.scale_deployment(api, "default", "dns", 0)
        got = kubeapi.get_json(api, "/apis/apps/v1/namespaces/default/deployments/dns")
        assert got["spec"]["replicas"] == 0
