"""Cluster providers: real Kubernetes clusters for the DRA test kit.

``get_provider(name)`` gives a provider with the one create/delete flow above it
(``lifecycle.Lifecycle``): what the CLI, ``fakegpu demo`` and the pytest plugin use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakegpu import drivers
from fakegpu.cluster.provider import ClusterInfo, Clusters, NodeInfo, Provider
from fakegpu.errors import InvalidInput

if TYPE_CHECKING:
    from rich.console import Console

    from fakegpu.cluster.lifecycle import Lifecycle

PROVIDERS = ("embedded", "kind")
# `--driver`: the plugin's identity. nvidia: NVIDIA's driver name (gpu.nvidia.com), DeviceClasses
# gpu.nvidia.com / mig.nvidia.com and extended resource nvidia.com/gpu, so NVIDIA's manifests
# run unchanged; the plugin then acts as NVIDIA's does (docs/plugin.md).
DRIVERS = drivers.CHOICES


def driver_name(driver: str) -> str:
    """``fakegpu`` or ``nvidia`` -> the DRA driver name the plugins register as."""
    try:
        return DRIVERS[driver]
    except KeyError:
        raise InvalidInput(f"unknown driver {driver!r} (known: {', '.join(DRIVERS)})") from None


def get_provider(name: str = "embedded", *, console: Console | None = None,
                 timeout: float | None = None, retain: bool = False) -> Lifecycle:
    """The provider called ``name`` under the lifecycle; its module is imported only when
    asked for. ``timeout`` limits each readiness wait (kind waits at least 300 s: its nodes
    pull nothing but start systemd); ``retain`` keeps a cluster whose bring-up failed. What
    a new cluster is (driver, another vendor's plugin, image aliases) is said to ``up``."""
    from fakegpu.cluster.lifecycle import Lifecycle
    from fakegpu.cluster.process import WaitPolicy

    provider: Provider
    if name == "embedded":
        from fakegpu.cluster.embedded.provider import EmbeddedProvider

        policy = WaitPolicy(timeout=timeout) if timeout is not None else None
        provider = EmbeddedProvider(console, policy=policy)
    elif name == "kind":
        from fakegpu.cluster.kind.provider import KindProvider

        policy = WaitPolicy(timeout=max(timeout, 300.0)) if timeout is not None else None
        provider = KindProvider(console, policy=policy)
    else:
        raise InvalidInput(f"unknown cluster provider {name!r} (known: {', '.join(PROVIDERS)})")
    return Lifecycle(provider, console, retain=retain)


__all__ = ["DRIVERS", "ClusterInfo", "Clusters", "NodeInfo", "Provider", "driver_name",
           "get_provider"]
