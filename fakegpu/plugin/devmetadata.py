"""Device metadata files in containers (KEP-5304): each container of a claim reads, at a
well-known path, the devices its request got with their attributes.

The file is what Kubernetes' kubelet-plugin helper writes for Go drivers that enable it
(k8s.io/dynamic-resource-allocation: ``api/metadata`` for the format and paths,
``kubeletplugin`` for the writer); there is no feature gate, a driver opts in. Per claim and
request, a JSON ``DeviceMetadata`` object (``metadata.resource.k8s.io/v1beta1``) with the
claim's name, namespace, UID and a generation, the pod's claim name for a claim made from a
template, and the request's devices: driver, pool, name and the attributes their ResourceSlice
publishes. The plugin keeps it under its state directory and the claim's CDI spec bind-mounts
it read-only at ``CONTAINER_DIR/`` and::

    resourceclaims/<claim>/<request>/<driver>-metadata.json
    resourceclaimtemplates/<pod claim>/<request>/<driver>-metadata.json

(the second for a claim from a ResourceClaimTemplate, named by the pod's claim, which the
pod knows, rather than by the generated claim name, which it does not).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fakegpu import fsutil

API_VERSION = "metadata.resource.k8s.io/v1beta1"
KIND = "DeviceMetadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
CLAIMS_SUBDIR = "resourceclaims"
TEMPLATES_SUBDIR = "resourceclaimtemplates"
# The annotation Kubernetes puts on a claim generated for a pod: the pod's claim name.
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
FILE_NAME = "metadata.json"  # on the host, one per request


def base_request(request: str) -> str:
    """``gpu/h100`` (a prioritized list's subrequest) -> ``gpu``: files are per request."""
    return request.split("/", 1)[0]


def container_path(driver: str, claim: str, pod_claim: str, request: str) -> str:
    if pod_claim:
        return f"{CONTAINER_DIR}/{TEMPLATES_SUBDIR}/{pod_claim}/{request}/{driver}-metadata.json"
    return f"{CONTAINER_DIR}/{CLAIMS_SUBDIR}/{claim}/{request}/{driver}-metadata.json"


def document(driver: str, pool: str, namespace: str, claim: str, uid: str, pod_claim: str,
             request: str, devices: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One request's DeviceMetadata; ``devices``: (device name, published attributes). Pure."""
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": claim, "namespace": namespace, "uid": uid, "generation": 1},
    }
    if pod_claim:
        doc["podClaimName"] = pod_claim
    doc["requests"] = [{"name": request, "devices": [
        {"driver": driver, "pool": pool, "name": name, "attributes": dict(attributes)}
        for name, attributes in devices]}]
    return doc


def write(root: Path, request: str, doc: Mapping[str, Any]) -> Path:
    """``root/<request>/metadata.json`` (atomically, world-readable: containers read it)."""
    path = root / request / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(path, json.dumps(doc, indent=1) + "\n", mode=0o644)
    return path

