"""The driver under test and the cluster it runs on, as the suite's fixtures see them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .capabilities import Capabilities
from .cluster import ClusterFacts

# Upstream's e2e busybox (sh, env, sleep): what a vendor's cluster most likely can pull.
DEFAULT_IMAGE = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"


@dataclass(frozen=True)
class Target:
    kubeconfig: Path
    driver: str
    device_class: str
    image: str
    capabilities: Capabilities
    facts: ClusterFacts
    own: bool  # fakegpu's own plugin on the pytest session's cluster
