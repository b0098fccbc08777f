"""The plugin's claim status write (fakegpu/plugin/kube.py): only status.devices travels."""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.plugin.kube import Kube


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
