"""What the suite reads about the cluster under test: its release and its feature gates.

Gates come from the apiserver's ``kubernetes_feature_enabled`` metric (every release the
suite supports has it); where /metrics cannot be read, gates are unknown and gated checks run
(what the driver declares decides).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fakegpu.kube import api as kubeapi


@dataclass(frozen=True)
class ClusterFacts:
    version: str  # gitVersion, e.g. v1.35.1
    resource_api: str  # the resource.k8s.io version served, e.g. v1
    gates: dict[str, bool] = field(default_factory=dict)  # empty: unknown
    gates_note: str = ""  # why gates are unknown

    def gate(self, name: str) -> bool | None:
        return self.gates.get(name) if self.gates else None


def read_facts(api: Any) -> ClusterFacts:
    version = str(kubeapi.get_json(api, "/version").get("gitVersion", "unknown"))
    resource_api = kubeapi.resource_version(api)
    try:
        text = kubeapi.get(api, "/metrics", timeout=30).decode(errors="replace")
    except kubeapi.ERRORS as err:
        return ClusterFacts(version, resource_api, {},
                            f"gates unknown: /metrics not readable ({str(err).splitlines()[0]})")
    gates = kubeapi.parse_feature_gates(text)
    note = "" if gates else "gates unknown: /metrics has no kubernetes_feature_enabled"
    return ClusterFacts(version, resource_api, gates, note)
