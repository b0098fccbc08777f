"""NVIDIA's quickstart demos on a cluster (e2e/nvidia/manifests): apply one into a namespace
and read what its containers' `nvidia-smi -L` printed, to compare with the claim's allocation
and the ResourceSlice devices it names, as a user would. Used by e2e/nvidia (fakegpu's plugin
as NVIDIA's driver) and e2e/test_nvidia_driver.py (NVIDIA's own plugin)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as kclient

from fakegpu import drivers
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit import k8s
from fakegpu.testkit.dra import (
    ResourceApi,
    allocation_results,
    attribute_value,
    in_nvml_order,
    pod_claim_name,
    published_device,
)
from fakegpu.testkit.wait import NotYet, wait_for

DRIVER = drivers.NVIDIA
_GPU_LINE = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[^)]+)\)$")
_MIG_LINE = re.compile(r"^  MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)$")


@dataclass(frozen=True)
class Listed:
    """One line of `nvidia-smi -L`: a GPU (kind "GPU", number, name, UUID) or one of its MIG
    devices (kind "MIG", number, profile, UUID)."""

    kind: str
    number: int
    name: str
    uuid: str


def parse_listing(text: str) -> list[Listed]:
    out = []
    for line in text.splitlines():
        if m := _GPU_LINE.match(line):
            out.append(Listed("GPU", int(m[1]), m[2], m[3]))
        elif m := _MIG_LINE.match(line):
            out.append(Listed("MIG", int(m[2]), m[1], m[3]))
        else:
            raise AssertionError(f"not a line of nvidia-smi -L: {line!r} (in {text!r})")
    return out


class Quickstart:
    """Apply a demo into the test's namespace and read what its containers printed."""

    def __init__(self, cluster: ClusterInfo, core: kclient.CoreV1Api, api: ResourceApi,
                 client: Any, namespace: str, manifests: Path) -> None:
        self.cluster, self.core, self.api = cluster, core, api
        self.client, self.namespace, self.manifests = client, namespace, manifests

    def apply(self, demo: str) -> None:
        k8s.apply_manifests(self.client, self.manifests / f"{demo}.yaml",
                            namespace=self.namespace)

    def running(self, name: str) -> Any:
        return k8s.wait_pod_running(self.core, self.namespace, name)

    def running_replicas(self, label: str, count: int) -> list[Any]:
        """The ``count`` pods labelled ``label`` (app=...), once all run."""
        def all_running() -> list[Any]:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=label).items
            if len(pods) != count:
                raise NotYet(f"{len(pods)} pods")
            return [self.running(str(p.metadata.name)) for p in pods]  # type: ignore[union-attr]

        return wait_for(all_running, what=f"{count} pods {label} to run", timeout=180.0)

    def listing(self, pod: str, container: str | None = None) -> list[Listed]:
        """What the container's `nvidia-smi -L` printed (its log, once written)."""
        def printed() -> str:
            text = k8s.pod_log(self.core, self.namespace, pod, container)
            if not text.strip():
                raise NotYet("no output yet")
            return text

        return parse_listing(wait_for(printed, what=f"nvidia-smi -L in {pod}/{container}",
                                      timeout=60.0))

    @staticmethod
    def gpu_lines(devices: list[dict[str, Any]]) -> list[Listed]:
        """What `nvidia-smi -L` lists for whole GPUs: in the node's order, numbered from 0."""
        ordered = in_nvml_order(devices)
        return [Listed("GPU", i, str(attribute_value(d, "productName")),
                       str(attribute_value(d, "uuid"))) for i, d in enumerate(ordered)]

    @staticmethod
    def mig_lines(device: dict[str, Any]) -> list[tuple[str, int, str]]:
        """What `nvidia-smi -L` lists for one MIG device, as (kind, number, UUID or profile):
        its parent GPU, then itself alone, numbered from 0 (names left out)."""
        return [("GPU", 0, str(attribute_value(device, "parentUUID"))),
                ("MIG", 0, str(attribute_value(device, "uuid"))),
                ("profile", 0, str(attribute_value(device, "profile")))]

    @staticmethod
    def mig_seen(listing: list[Listed]) -> list[tuple[str, int, str]]:
        """``listing`` in ``mig_lines``' terms."""
        out = []
        for line in listing:
            out.append((line.kind, line.number, line.uuid))
            if line.kind == "MIG":
                out.append(("profile", line.number, line.name))
        return out

    def devices(self, pod: Any, pod_claim: str, request: str | None = None
                ) -> list[dict[str, Any]]:
        """The ResourceSlice devices the pod's claim got (for ``request`` only, if given)."""
        claim = self.api.claim(self.namespace, pod_claim_name(pod, pod_claim))
        return [published_device(self.api, DRIVER, r["pool"], r["device"])
                for r in allocation_results(claim, DRIVER)
                if request is None or r["request"] == request]

    def check_time_sliced_and_mps(self) -> None:
        """gpu-test5: one claim's two GPUs, one time-sliced and one under MPS, two containers on
        each; every container lists exactly the GPU of the request it names."""
        self.apply("gpu-test5")
        pod = self.running("pod0")
        uuids = set()
        for request in ("ts-gpu", "mps-gpu"):
            (device,) = self.devices(pod, "shared-gpus", request)
            uuids.add(attribute_value(device, "uuid"))
            prefix = request.split("-")[0]
            for container in (f"{prefix}-ctr0", f"{prefix}-ctr1"):
                assert self.listing("pod0", container) == self.gpu_lines([device]), container
        assert len(uuids) == 2, "both requests got the same GPU"
