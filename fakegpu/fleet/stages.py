"""The KWOK Stage objects fakegpu runs KWOK with (KWOK 0.8 needs its stages given).

Written for fakegpu, in KWOK's Stage API (kwok.x-k8s.io/v1alpha1): a managed node becomes
Ready and stays Ready (its Lease, renewed by KWOK, is the heartbeat); a pod bound to one
becomes Running at once, and a deleted one goes away. Nothing more: no images, no containers,
no completion of Jobs: a simulated node is for the scheduler and controllers, the real nodes
of the fleet run workloads.
"""

from __future__ import annotations

import json
from typing import Any

from .nodes import CAPACITY

API_VERSION = "kwok.x-k8s.io/v1alpha1"
# Selector expressions are jq paths over the object (KWOK's syntax).
_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'

_NODE_READY = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
addresses:
{{ with NodeIP }}
- type: InternalIP
  address: {{ . | Quote }}
{{ end }}
- type: Hostname
  address: {{ .metadata.name | Quote }}
allocatable:
{{ with .status.allocatable }}{{ YAML . 1 }}{{ else }}  {DEFAULTS}{{ end }}
capacity:
{{ with .status.capacity }}{{ YAML . 1 }}{{ else }}  {DEFAULTS}{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
  kernelVersion: ""
  kubeProxyVersion: ""
  osImage: "fakegpu simulated node"
  machineID: ""
  systemUUID: ""
  bootID: ""
phase: Running
"""

# What a node offers when its Node object says nothing (nodes.py sets it at creation).
_NODE_READY = _NODE_READY.replace(
    "{DEFAULTS}", "{" + ", ".join(f"{k}: {v!r}" for k, v in CAPACITY.items()) + "}")

_POD_RUNNING = """\
{{ $now := Now }}
conditions:
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
hostIPs: [{ip: {{ . | Quote }}}]
{{ end }}
{{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ . | Quote }}
podIPs: [{ip: {{ . | Quote }}}]
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _stage(name: str, kind: str, exprs: list[dict[str, Any]], nxt: dict[str, Any],
           delay_ms: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceRef": {"apiGroup": "v1", "kind": kind},
                            "selector": {"matchExpressions": exprs}, "next": nxt}
    if delay_ms:
        spec["delay"] = {"durationMilliseconds": delay_ms, "jitterDurationMilliseconds": delay_ms}
    return {"apiVersion": API_VERSION, "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def stages() -> list[dict[str, Any]]:
    """fakegpu's stages: node ready, node refresh, pod running, pod gone."""
    return [
        _stage("fakegpu-node-ready", "Node",
               [{"key": _READY, "operator": "NotIn", "values": ["True"]}],
               {"statusTemplate": _NODE_READY}),
        # The Lease is the heartbeat the node controller watches; the conditions' own
        # heartbeat is refreshed seldom, as a kubelet does with leases on.
        _stage("fakegpu-node-refresh", "Node",
               [{"key": _READY, "operator": "In", "values": ["True"]}],
               {"statusTemplate": _NODE_READY}, delay_ms=300_000),
        _stage("fakegpu-pod-running", "Pod",
               [{"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]}],
               {"statusTemplate": _POD_RUNNING}),
        _stage("fakegpu-pod-gone", "Pod",
               [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
               {"delete": True}),
    ]


def config_text() -> str:
    """The stages as a KWOK --config file: YAML documents (JSON is YAML)."""
    return "\n---\n".join(json.dumps(s, indent=2) for s in stages()) + "\n"
