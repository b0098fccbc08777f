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

    return Lifecycle(_provider(name, console, timeout), console, retain=retain)


def _provider(name: str, console: Console | None, timeout: float | None) -> Provider:
    from fakegpu.cluster.process import WaitPolicy

    if name == "embedded":
        from fakegpu.cluster.embedded.provider import EmbeddedProvider

        policy = WaitPolicy(timeout=timeout) if timeout is not None else None
        return EmbeddedProvider(console, policy=policy)
    if name == "kind":
        from fakegpu.cluster.kind.provider import KindProvider

        policy = WaitPolicy(timeout=max(timeout, 300.0)) if timeout is not None else None
        return KindProvider(console, policy=policy)
    raise InvalidInput(f"unknown cluster provider {name!r} (known: {', '.join(PROVIDERS)})")


def provider_of(name: str) -> str | None:
    """The provider that has a cluster called ``name`` (a leftover counts), None when none
    has; InvalidInput when more than one has (then ``--provider`` must say which).

    Each provider answers for itself (``Provider.exists``): embedded from its state
    directory, kind from its state or ``kind get clusters`` (asked only when kind and a
    Docker daemon are there: a host without them has no kind cluster)."""
    found = [p for p in PROVIDERS if _provider(p, None, None).exists(name)]
    if len(found) > 1:
        raise InvalidInput(f"cluster {name!r} exists on providers {' and '.join(found)}: "
                           "name one with --provider")
    return found[0] if found else None


__all__ = ["DRIVERS", "ClusterInfo", "Clusters", "NodeInfo", "Provider", "driver_name",
           "get_provider", "provider_of"]
