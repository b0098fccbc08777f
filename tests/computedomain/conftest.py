"""One real kube-apiserver (no kubelets, no controllers) for the apiserver-backed
ComputeDomain tests, with the chart's objects (the CRD, classes, RBAC) applied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from fakegpu.computedomain import kube
from fakegpu.computedomain.names import for_gpu_driver
from fakegpu.deploy.manifests import Install
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors
from fakegpu.wait import NotYet, wait_for

NAMES = for_gpu_driver("gpu.nvidia.com")


@pytest.fixture(scope="session")
def control_plane(bare_control_plane: Any
                  ) -> Iterator[tuple[client.ApiClient, Any]]:
    """(an admin client, the ControlPlane) once the ComputeDomain CRD is served."""
    from fakegpu.cluster.embedded import install
    with bare_control_plane() as cp:
        c = kubeapi.connect(Path(cp.kubeconfig))
        kubeapi.apply(c, install.objects(Install(driver="gpu.nvidia.com")))

        def established() -> None:
            try:
                kube.list_domains(c, NAMES)
            except errors.KubeError as err:
                raise NotYet(str(err)) from err

        wait_for(established, what="the ComputeDomain CRD to be served", timeout=60)
        yield c, cp
        c.close()  # type: ignore[no-untyped-call]
