"""NVIDIA's quickstart demos, in manifests written here in the same shapes (manifests/), applied
unchanged on an NVIDIA-compatible cluster: `--fakegpu-driver nvidia` (the manifests name
gpu.nvidia.com and mig.nvidia.com) with the image names they use pre-loaded
(`--fakegpu-image-alias ubuntu:22.04 --fakegpu-image-alias
nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04`; `make test-nvidia` passes both).

Each container prints `nvidia-smi -L` at start; the suites read that from its log and compare
it with the claim's allocation and the ResourceSlice devices it names, as a user would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as kclient

from fakegpu import drivers
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.testkit.dra import ResourceApi
from fakegpu.testkit.quickstart import Quickstart

HERE = Path(__file__).resolve().parent
MANIFESTS = HERE / "manifests"


def manifest_images() -> list[str]:
    """Every image name the manifests use (what the cluster must hold under those names)."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "image" and isinstance(value, str):
                    names.add(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted(MANIFESTS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            walk(doc)
    return sorted(names)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Decided before any cluster comes up: these suites need what only the options give.
    from fakegpu.cluster.imagealiases import normalize_all

    missing = []
    if not drivers.is_nvidia_key(config.getoption("fakegpu_driver")):
        missing.append("an NVIDIA-compatible cluster (--fakegpu-driver nvidia)")
    given = set(normalize_all(config.getoption("fakegpu_image_alias") or ()))
    absent = [n for n in manifest_images() if normalize_all([n])[0] not in given]
    if absent:
        missing.append("their images on the nodes ("
                       + " ".join(f"--fakegpu-image-alias {n}" for n in absent) + ")")
    if not missing:
        return
    skip = pytest.mark.skip(reason="MISSING PREREQUISITE: NVIDIA's demo manifests need "
                                   + " and ".join(missing))
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(skip)


@pytest.fixture
def quickstart(fakegpu_cluster: ClusterInfo, core_v1: kclient.CoreV1Api,
               resource_api: ResourceApi, k8s_client: Any, namespace: str
               ) -> Iterator[Quickstart]:
    yield Quickstart(fakegpu_cluster, core_v1, resource_api, k8s_client, namespace, MANIFESTS)
