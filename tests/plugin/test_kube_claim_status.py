"""The plugin's claim status write (fakegpu/plugin/kube.py): only status.devices travels."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiException

from fakegpu.kube.errors import KubeError
from fakegpu.kubeletplugin.kube import Kube


class _Objects:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))


def test_a_merge_patch_of_the_devices_at_the_read_resource_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Never the allocation: re-sent, its opaque config would differ in spacing from the stored
    # bytes and the apiserver would refuse the write as a change to an immutable field.
    kube, objects = Kube(None), _Objects()
    monkeypatch.setattr(kube, "_objects", lambda: objects)
    monkeypatch.setattr(kube, "version", lambda: "v1")
    devices = [{"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0", "data": {}}]
    claim = {"metadata": {"namespace": "ns", "name": "c", "resourceVersion": "42"},
             "spec": {"devices": {"config": [{"opaque": {"parameters": {"a": 1}}}]}},
             "status": {"allocation": {"devices": {"config": [{"opaque": {}}]}},
                        "devices": devices}}
    kube.replace_claim_status(claim)
    ((args, kwargs),) = objects.calls
    assert args[3:5] == ("resourceclaims", "c") and args[2] == "ns"
    assert args[5] == {"metadata": {"resourceVersion": "42"}, "status": {"devices": devices}}
    assert kwargs["_content_type"] == "application/merge-patch+json"


class _RefusingPatch(_Objects):
    """An apiserver that refuses the patch as a change of the allocation (a claim created
    with the Python client's spacing, which the server's compact re-encoding does not match)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__()
        self.status, self.message = status, message
        self.replaced: list[tuple[Any, ...]] = []

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> None:
        super().patch_namespaced_custom_object_status(*args, **kwargs)
        err = ApiException(status=self.status, reason="Unprocessable Entity")
        err.body = json.dumps({"kind": "Status", "message": self.message})
        raise err

    def replace_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> None:
        self.replaced.append(args)


def _claim() -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "c", "resourceVersion": "7"},
            "status": {"allocation": {"devices": {"config": [{"opaque": {"a": 1}}]}},
                       "devices": [{"driver": "d", "pool": "n", "device": "gpu-0"}]}}


def _kube(monkeypatch: pytest.MonkeyPatch, objects: _Objects) -> Kube:
    kube = Kube(None)
    monkeypatch.setattr(kube, "_objects", lambda: objects)
    monkeypatch.setattr(kube, "version", lambda: "v1")
    return kube


def test_a_refused_allocation_falls_back_to_the_replace_as_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    objects = _RefusingPatch(422, 'ResourceClaim "c" is invalid: [status.allocation: Invalid '
                                  "value: null: field cannot be modified once set]")
    claim = _claim()
    _kube(monkeypatch, objects).replace_claim_status(claim)
    assert len(objects.calls) == 1
    ((args),) = objects.replaced
    assert args[3:5] == ("resourceclaims", "c") and args[5] is claim


def test_any_other_refusal_is_the_plugins_error(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = _RefusingPatch(422, 'ResourceClaim "c" is invalid: status.devices[0]: Required')
    with pytest.raises(KubeError, match=r"HTTP 422 .*status.devices\[0\]"):
        _kube(monkeypatch, objects).replace_claim_status(_claim())
    assert objects.replaced == []
