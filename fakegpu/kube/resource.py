"""The one rule for the ``resource.k8s.io`` version fakegpu speaks. Pure: no client import.

The API moved v1beta1 -> v1beta2 -> v1 (1.34 serves v1). Everything that reads or writes DRA
objects (cluster bring-up, the plugin, the test kit) speaks the newest version the apiserver
serves among those fakegpu knows, so one answer holds for the whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterable

from fakegpu.errors import FakegpuError

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # newest first


class NoResourceApi(FakegpuError):
    """The apiserver serves none of the resource.k8s.io versions fakegpu speaks."""


def newest_served(served: Iterable[str]) -> str:
    """The newest of :data:`VERSIONS` in ``served`` (the versions the apiserver lists)."""
    have = set(served)
    for version in VERSIONS:
        if version in have:
            return version
    raise NoResourceApi(f"the apiserver serves no usable {GROUP} version (served: "
                        f"{', '.join(sorted(have)) or 'none'}; need one of {', '.join(VERSIONS)})")
