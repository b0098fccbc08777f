"""resource.k8s.io for suites: the served version, generic access, and manifest builders.

The API moved from v1beta1 (flat requests) to v1beta2/v1 (requests under ``exactly``); the
builders take the served version so one suite runs on every supported Kubernetes release.
Objects stay plain dicts: the shape the apiserver returns, with no generated model in between
that lags behind new fields.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as kclient

from fakegpu import drivers
from fakegpu.cluster import featuregates
from fakegpu.errors import FakegpuError
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors, pods
from fakegpu.kube.resource import GROUP

from .k8s import (
    POLL_S,
    create_pod,
    wait_pod_running,
)
from .wait import NotYet, wait_for


def _where(namespace: str | None, name: object) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    return f"{namespace}/{name}" if namespace else str(name)


def dropped(sent: Any, stored: Any, path: str = "") -> list[str]:
    """The fields of ``sent`` (an object as created) that ``stored`` (what the apiserver
    returned) lacks, as paths (``spec.devices.requests[0].firstAvailable``): an apiserver drops
    a field of a feature gate that is off, or one it does not know, without an error. Empty,
    zero and false values are not counted (the apiserver omits them), nor metadata and status."""
    if isinstance(sent, Mapping):
        if not isinstance(stored, Mapping):
            return []
        out: list[str] = []
        for key, value in sent.items():
            if not path and key in ("apiVersion", "kind", "metadata", "status"):
                continue
            at = f"{path}.{key}" if path else key
            if key in stored:
                out += dropped(value, stored[key], at)
            elif value not in (None, "", [], {}, 0):  # 0 is also False
                out.append(at)
        return out
    if isinstance(sent, list) and isinstance(stored, list):
        return [p for i, (a, b) in enumerate(zip(sent, stored, strict=False))
                for p in dropped(a, b, f"{path}[{i}]")]
    return []


class ResourceApi:
    """CRUD on resource.k8s.io objects at the version the apiserver prefers; a failed call
    raises in ``fakegpu.kube.errors``' vocabulary (NotFound, Forbidden, Invalid, ...)."""

    def __init__(self, api: Any, version: str | None = None) -> None:
        self.version = version or kubeapi.resource_version(api)
        self._api = api
        self._objects = kclient.CustomObjectsApi(api)

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    def create(self, plural: str, body: Mapping[str, Any], namespace: str | None = None
               ) -> dict[str, Any]:
        body = {"apiVersion": self.api_version, **body}
        what = f"cannot create {plural} {_where(namespace, body['metadata'].get('name'))}"
        if namespace is None:
            out: Any = errors.call(what, lambda: self._objects.create_cluster_custom_object(
                GROUP, self.version, plural, body))
        else:
            out = errors.call(what, lambda: self._objects.create_namespaced_custom_object(
                GROUP, self.version, namespace, plural, body))
        lost = dropped(body, out)
        if lost:
            # Stored without a feature it asked for, it would mislead the test: take it back.
            self.delete(plural, body["metadata"]["name"], namespace)
            more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
            raise errors.Invalid(f"{what}: the apiserver dropped {lost[0]}{more}: "
                                 f"{featuregates.dropped_field(lost[0], self._server_minor())}")
        return dict(out)

    def _server_minor(self) -> int:
        info = errors.call("cannot read the apiserver's version",
                           lambda: kclient.VersionApi(self._api).get_code())
        return int(str(info.minor).rstrip("+"))

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        what = f"cannot read {plural} {_where(namespace, name)}"
        if namespace is None:
            out: Any = errors.call(what, lambda: self._objects.get_cluster_custom_object(
                GROUP, self.version, plural, name))
        else:
            out = errors.call(what, lambda: self._objects.get_namespaced_custom_object(
                GROUP, self.version, namespace, plural, name))
        return dict(out)

    def items(self, plural: str, namespace: str | None = None, **kwargs: Any
             ) -> list[dict[str, Any]]:
        what = f"cannot list {plural}{f' in {namespace}' if namespace else ''}"
        if namespace is None:
            out: Any = errors.call(what, lambda: self._objects.list_cluster_custom_object(
                GROUP, self.version, plural, **kwargs))
        else:
            out = errors.call(what, lambda: self._objects.list_namespaced_custom_object(
                GROUP, self.version, namespace, plural, **kwargs))
        return [dict(item) for item in out.get("items", [])]

    def delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        """Delete the object; one already gone is fine."""
        with contextlib.suppress(errors.NotFound):
            errors.call(f"cannot delete {plural} {_where(namespace, name)}", lambda: (
                self._objects.delete_cluster_custom_object(GROUP, self.version, plural, name)
                if namespace is None else self._objects.delete_namespaced_custom_object(
                    GROUP, self.version, namespace, plural, name)))

    # --- conveniences ---------------------------------------------------------------------------

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get("resourceclaims", name, namespace)

    def slices(self, driver: str | None = None, node: str | None = None) -> list[dict[str, Any]]:
        selectors = []
        if driver:
            selectors.append(f"spec.driver={driver}")
        if node:
            selectors.append(f"spec.nodeName={node}")
        kwargs = {"field_selector": ",".join(selectors)} if selectors else {}
        return self.items("resourceslices", **kwargs)

    def device_classes(self) -> list[str]:
        return [c["metadata"]["name"] for c in self.items("deviceclasses")]

    def wait_allocated(self, namespace: str, name: str, *, timeout: float = 120.0
                       ) -> dict[str, Any]:
        """Wait until the claim exists and has ``status.allocation``; return the claim."""

        def allocated() -> dict[str, Any]:
            try:
                claim = self.claim(namespace, name)
            except errors.NotFound as err:
                raise NotYet(f"claim {namespace}/{name} does not exist yet") from err
            if not (claim.get("status") or {}).get("allocation"):
                raise NotYet(f"claim {namespace}/{name} not allocated: {claim.get('status')}")
            return claim

        return pods.poll(allocated, what=f"claim {namespace}/{name} to be allocated",
                         timeout=timeout, interval=POLL_S)

    # --- builders at this API version ----------------------------------------------------------

    def device_request(self, name: str, device_class: str, *, count: int | None = 1,
                       cel: Sequence[str] = (),
                       tolerations: Sequence[Mapping[str, Any]] = (),
                       admin_access: bool = False) -> dict[str, Any]:
        return device_request(self.version, name, device_class, count=count, cel=cel,
                              tolerations=tolerations, admin_access=admin_access)

    def first_available(self, name: str, subrequests: Sequence[Mapping[str, Any]]
                        ) -> dict[str, Any]:
        return first_available(self.version, name, subrequests)

    def claim_template(self, name: str, requests: Sequence[Mapping[str, Any]], *,
                       constraints: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": "ResourceClaimTemplate",
                "metadata": {"name": name},
                "spec": {"spec": {"devices": _devices(requests, constraints)}}}

    def claim_manifest(self, name: str, requests: Sequence[Mapping[str, Any]], *,
                       constraints: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": _devices(requests, constraints)}}


def _devices(requests: Sequence[Mapping[str, Any]], constraints: Sequence[Mapping[str, Any]]
             ) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": [dict(r) for r in requests]}
    if constraints:
        devices["constraints"] = [dict(c) for c in constraints]
    return devices


def match_attribute(attribute: str, requests: Sequence[str] = ()) -> dict[str, Any]:
    """A constraint: every device allocated for ``requests`` (all of the claim's when empty)
    has the same value of ``attribute`` (fully qualified: ``<driver>/parentUUID``). The same
    shape in every served version."""
    out: dict[str, Any] = {"matchAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out


def distinct_attribute(attribute: str, requests: Sequence[str] = ()) -> dict[str, Any]:
    """A constraint: the devices allocated for ``requests`` (all of the claim's when empty)
    each have another value of ``attribute`` (lists: pairwise disjoint)."""
    out: dict[str, Any] = {"distinctAttribute": attribute}
    if requests:
        out["requests"] = list(requests)
    return out


def device_request(version: str, name: str, device_class: str, *, count: int | None = 1,
                   cel: Sequence[str] = (), tolerations: Sequence[Mapping[str, Any]] = (),
                   admin_access: bool = False) -> dict[str, Any]:
    """A request for exactly ``count`` devices of ``device_class`` (None: every matching device
    of one node, ``allocationMode: All``) matching every CEL selector, tolerating
    ``tolerations`` (see ``toleration``), with ``adminAccess`` when asked."""
    spec = _exact(device_class, count, cel, tolerations)
    if admin_access:
        spec["adminAccess"] = True
    if version == "v1beta1" or version.startswith("v1alpha"):
        return {"name": name, **spec}
    return {"name": name, "exactly": spec}


def _exact(device_class: str, count: int | None, cel: Sequence[str],
           tolerations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "All"} \
        if count is None else {"deviceClassName": device_class,
                               "allocationMode": "ExactCount", "count": count}
    if cel:
        spec["selectors"] = [{"cel": {"expression": expr}} for expr in cel]
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return spec


def subrequest(name: str, device_class: str, *, count: int = 1, cel: Sequence[str] = (),
               tolerations: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One alternative of a ``firstAvailable`` request (the same shape in every version)."""
    return {"name": name, **_exact(device_class, count, cel, tolerations)}


def first_available(version: str, name: str, subrequests: Sequence[Mapping[str, Any]]
                    ) -> dict[str, Any]:
    """A request satisfied by the first of ``subrequests`` that can be (DRAPrioritizedList);
    the allocation names the one chosen as ``<request>/<subrequest>``."""
    return {"name": name, "firstAvailable": [dict(s) for s in subrequests]}


def toleration(key: str, effect: str | None = None, *, value: str | None = None
               ) -> dict[str, Any]:
    """A device toleration: ``Exists`` on ``key`` (``Equal`` with ``value``), for one effect
    or, without ``effect``, for all."""
    out: dict[str, Any] = {"key": key, "operator": "Equal" if value is not None else "Exists"}
    if value is not None:
        out["value"] = value
    if effect is not None:
        out["effect"] = effect
    return out


def config_api_version(driver: str) -> str:
    """The apiVersion of the opaque device configs (sharing, GpuConfig) the plugin of ``driver``
    reads: NVIDIA's group with NVIDIA's driver name, else fakegpu's. Stated here, not taken from
    the plugin, so a suite fails if the plugin reads another."""
    return "resource.nvidia.com/v1beta1" if drivers.is_nvidia(driver) \
        else "resource.fakegpu.dev/v1beta1"


def cel_match(driver: str, attribute: str, value: str | int | bool) -> str:
    """CEL: the device's ``<driver>`` attribute ``attribute`` equals ``value``."""
    if isinstance(value, bool):
        literal = "true" if value else "false"
    elif isinstance(value, str):
        literal = cel_string(value)
    else:
        literal = str(value)
    return f"device.attributes[{cel_string(driver)}].{attribute} == {literal}"


def slice_device(slices: Sequence[Mapping[str, Any]], pool: str, device: str
                 ) -> dict[str, Any] | None:
    """The published entry of ``device`` in pool ``pool`` (v1beta1's ``basic`` flattened)."""
    for obj in slices:
        spec = obj.get("spec") or {}
        if (spec.get("pool") or {}).get("name") != pool:
            continue
        for entry in spec.get("devices") or []:
            if entry.get("name") == device:
                return {"name": device, **entry.get("basic", entry)}
    return None


def cel_string(value: str) -> str:
    """A CEL string literal for ``value`` (quotes and backslashes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class PodClaim:
    """One entry of ``pod.spec.resourceClaims``: from a template, or an existing claim."""

    name: str
    template: str | None = None
    claim: str | None = None

    def manifest(self) -> dict[str, str]:
        if (self.template is None) == (self.claim is None):
            raise ValueError("a pod claim names exactly one of template or claim")
        if self.template is not None:
            return {"name": self.name, "resourceClaimTemplateName": self.template}
        return {"name": self.name, "resourceClaimName": str(self.claim)}


def pod_manifest(name: str, image: str, command: Sequence[str], claims: Sequence[PodClaim] = (),
                 *, labels: Mapping[str, str] | None = None, node: str | None = None,
                 containers: Sequence[str] = ("main",)) -> dict[str, Any]:
    """A pod using ``claims``, each of its ``containers`` (by name) running ``command`` with
    every claim; it pulls only what is missing (nothing can be pulled on fakegpu's clusters).
    ``node``: pinned there by node affinity (the scheduler still allocates its claims)."""
    manifest: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "restartPolicy": "Never",
            # A shell or sleep as PID 1 ignores SIGTERM: do not wait out the default 30s.
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [c.manifest() for c in claims],
            "containers": [{
                "name": container, "image": image, "imagePullPolicy": "IfNotPresent",
                "command": list(command),
                "resources": {"claims": [{"name": c.name} for c in claims]},
            } for container in containers],
        },
    }
    if node is not None:
        manifest["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchFields": [{"key": "metadata.name", "operator": "In",
                                 "values": [node]}]}]}}}
    return manifest


IDLE = ("sleep", "3600")


def run_gpu_pod(core: kclient.CoreV1Api, api: ResourceApi, namespace: str, pod: str,
                image: str, device_class: str, *, count: int = 1, cel: Sequence[str] = (),
                template: str = "one", claim: str = "gpu",
                command: Sequence[str] = IDLE) -> Any:
    """The suites' usual start: a ResourceClaimTemplate ``template`` with one request
    ``claim`` for ``count`` devices of ``device_class`` (narrowed by ``cel``), and pod ``pod``
    using it as pod claim ``claim``, running ``command``. Waits until the pod runs; returns it
    (``pod_claim_name(pod, claim)`` names the claim made for it)."""
    request = api.device_request(claim, device_class, count=count, cel=cel)
    api.create("resourceclaimtemplates", api.claim_template(template, [request]), namespace)
    create_pod(core, namespace, pod_manifest(pod, image, command,
                                             [PodClaim(claim, template=template)]))
    return wait_pod_running(core, namespace, pod)


def assert_pending(core: kclient.CoreV1Api, api: ResourceApi, namespace: str, name: str,
                   pod_claim: str, why: str) -> Any:
    """Pod ``name`` is refused by the scheduler for its claims and its claim ``pod_claim``
    stays unallocated; return the pod. ``why``: what the refusal means."""
    from .k8s import wait_unschedulable

    pod: Any = wait_unschedulable(core, namespace, name, what=f"the scheduler to refuse {why}")
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    claim = api.claim(namespace, pod_claim_name(pod, pod_claim))
    assert not (claim.get("status") or {}).get("allocation"), claim.get("status")
    return pod


def wait_claims_released(api: ResourceApi, namespace: str, *, gone: Sequence[str] = (),
                         unreserved: Sequence[str] = (), timeout: float = 120) -> None:
    """Wait until the claims ``gone`` (generated for deleted pods) no longer exist and the claims
    ``unreserved`` are neither reserved nor allocated: only then are their devices free for the
    next claim, which would otherwise wait for a held device, not for what a test checks."""
    def released() -> None:
        claims = {c["metadata"]["name"]: c for c in api.items("resourceclaims", namespace)}
        still = sorted(set(gone) & claims.keys())
        if still:
            raise NotYet(f"claims {still} still exist")
        for name in unreserved:
            status = (claims.get(name) or {}).get("status") or {}
            if status.get("reservedFor") or status.get("allocation"):
                raise NotYet(f"claim {name} still reserved or allocated: {status}")

    names = ", ".join([*gone, *unreserved])
    wait_for(released, what=f"claims {names} in {namespace} to be released", timeout=timeout)


def pod_claim_name(pod: Any, pod_claim: str) -> str:
    """The ResourceClaim a pod's ``resourceClaims[name=pod_claim]`` resolved to."""
    spec_claims = {c.name: c for c in pod.spec.resource_claims or ()}
    direct = spec_claims.get(pod_claim)
    if direct is not None and direct.resource_claim_name:
        return str(direct.resource_claim_name)
    for status in pod.status.resource_claim_statuses or ():
        if status.name == pod_claim and status.resource_claim_name:
            return str(status.resource_claim_name)
    raise FakegpuError(f"pod {pod.metadata.namespace}/{pod.metadata.name} has no claim "
                       f"generated for {pod_claim!r} yet")


def allocation_results(claim: Mapping[str, Any], driver: str | None = None
                       ) -> list[dict[str, Any]]:
    """``status.allocation.devices.results`` of a claim (only ``driver``'s, when given)."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results = [dict(r) for r in (alloc.get("devices") or {}).get("results") or []]
    return [r for r in results if driver is None or r.get("driver") == driver]


def allocated_node(claim: Mapping[str, Any]) -> str | None:
    """The node a claim's allocation is pinned to (from its nodeSelector), if any."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    for term in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return None


def in_nvml_order(devices: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Whole GPUs in the order NVML numbers them on their node (``nvidia-smi -L``): by PCI bus
    ID (``resource.kubernetes.io/pciBusID``), which every driver publishes; NVIDIA's current
    driver has no ``index`` attribute."""
    return sorted(devices,
                  key=lambda d: str(attribute_value(d, "resource.kubernetes.io/pciBusID")))


def attribute_value(device: Mapping[str, Any], name: str) -> Any:
    """The value of a slice device's attribute ``name`` (unqualified or ``<driver>/name``),
    whatever its type (``string``, ``int``, ``bool``, ``version``, or a list of one of them:
    ``strings``, ``ints``, ``bools``, ``versions``, KEP-5491); None when absent. In v1beta1 the
    device's fields sit under ``basic``."""
    fields = device.get("basic") or device
    attributes = fields.get("attributes") or {}
    found = attributes.get(name)
    if found is None and "/" in name:
        found = attributes.get(name.split("/", 1)[1])
    if not found:
        return None
    for kind in ("string", "int", "bool", "version", "strings", "ints", "bools", "versions"):
        if kind in found:
            return found[kind]
    return None


def allocated_devices(api: ResourceApi, driver: str, claim: Mapping[str, Any]
                      ) -> list[dict[str, Any]]:
    """The devices of ``driver`` allocated to ``claim``, as its ResourceSlices publish them,
    each with its ``pool``; the claim must have some."""
    results = allocation_results(claim, driver)
    assert results, (f"claim {claim['metadata']['name']} has no allocation of {driver}: "
                     f"{claim.get('status')}")
    return [{**published_device(api, driver, r["pool"], r["device"]), "pool": r["pool"]}
            for r in results]


def node_devices(api: ResourceApi, driver: str) -> dict[str, list[dict[str, Any]]]:
    """Node -> the devices ``driver`` publishes there (the newest generation of each pool),
    each with its ``pool``. A node without devices is not a key."""
    slices = api.slices(driver)
    newest: dict[str, int] = {}
    for s in slices:
        pool = s["spec"]["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), int(pool["generation"]))
    out: dict[str, list[dict[str, Any]]] = {}
    for s in slices:
        pool = s["spec"]["pool"]
        node = s["spec"].get("nodeName")
        devices = s["spec"].get("devices") or ()
        if node and devices and int(pool["generation"]) == newest[pool["name"]]:
            out.setdefault(node, []).extend({**d, "pool": pool["name"]} for d in devices)
    return out


def publishing_nodes(api: ResourceApi, driver: str) -> list[str]:
    """The nodes where ``driver`` publishes devices, in name order."""
    return sorted(node_devices(api, driver))


def published_device(api: ResourceApi, driver: str, pool: str, device: str
                     ) -> dict[str, Any]:
    """The device ``device`` of ``driver``'s pool ``pool`` as its ResourceSlices publish it
    (the newest generation of the pool); raises when no slice holds it."""
    slices = [s for s in api.slices(driver) if s["spec"]["pool"]["name"] == pool]
    newest = max((s["spec"]["pool"]["generation"] for s in slices), default=None)
    for s in slices:
        if s["spec"]["pool"]["generation"] != newest:
            continue
        for entry in s["spec"].get("devices") or ():
            if entry.get("name") == device:
                return dict(entry)
    raise FakegpuError(f"no ResourceSlice of driver {driver} publishes device {device} "
                       f"in pool {pool}")
