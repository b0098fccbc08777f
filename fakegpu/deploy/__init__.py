"""What fakegpu installs on a cluster, for Python.

``chart/`` is the Helm chart ``deploy/helm/fakegpu`` (a link in the source tree, real files in a
wheel), so the kind provider installs it from an installed fakegpu too (``chart_dir()``). Its
``files/`` are the objects every cluster gets besides the plugin (service account, RBAC,
admission policy, DeviceClasses): the chart includes them, and :mod:`fakegpu.deploy.manifests`
renders the same files for the embedded provider and ``fakegpu plugin deviceclass``.
"""

from __future__ import annotations

from pathlib import Path


def chart_dir() -> Path:
    """The chart's directory (a real directory: Helm reads it)."""
    return Path(__file__).resolve().parent / "chart"
