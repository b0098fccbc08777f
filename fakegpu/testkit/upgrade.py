"""Upgrade a cluster's plugin from a test, on any provider, and watch what the cluster shows.

``upgrade_plugin(cluster, version=...)`` is the one provider-neutral entry: the embedded
provider rolls its plugin processes node by node, kind upgrades the Helm release (both as a
DaemonSet with maxSurge 1 would, ``fakegpu.cluster.upgrade``). ``Background`` runs it in
a thread so a load (``testkit.load``) runs meanwhile; ``Sampler`` records, every half second,
each node's published device count (ResourceSlices, from the API) and its live plugin
instances (the provider's status); ``write_timeline`` turns a run into JSON and a PNG.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.cluster import get_provider
from fakegpu.cluster.provider import ClusterInfo
from fakegpu.cluster.upgrade import UpgradeStalled, check_target

from .dra import ResourceApi
from .load import LoadReport

__all__ = ["Background", "Sampler", "UpgradeStalled", "upgrade_plugin", "write_timeline"]


def upgrade_plugin(cluster: ClusterInfo, *, version: str, broken: bool = False,
                   strategy: str = "surge", kill_old: bool = False,
                   prepare_delay_s: float = 0.0, nodes: tuple[str, ...] = (),
                   timeout: float = 120.0) -> list[str]:
    """Roll ``cluster``'s plugin to ``version``; the nodes changed. UpgradeStalled when a new
    instance never becomes ready (the previous version keeps serving)."""
    target = check_target(version, broken, strategy, kill_old=kill_old,
                          prepare_delay_s=prepare_delay_s, nodes=nodes,
                          ready_timeout_s=timeout)
    return get_provider(cluster.provider, timeout=timeout).upgrade_plugin(cluster.name, target)


# Roles of an instance that serves: registered by the kubelet (embedded), Ready (kind).
SERVING = ("plugin", "ready")


def plugin_instances(cluster: ClusterInfo) -> dict[str, list[dict[str, str]]]:
    """Node -> the plugin instances alive there now, as the cluster's provider sees them:
    on kind the DaemonSet's pods that are not gone yet, on the embedded provider its
    processes."""
    return get_provider(cluster.provider).plugin_instances(cluster.name)


class Background:
    """``upgrade_plugin`` in a thread: ``join()`` returns its nodes or raises its error."""

    def __init__(self, cluster: ClusterInfo, **kwargs: Any) -> None:
        self.began = time.monotonic()
        self.ended: float | None = None
        self._result: list[str] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cluster,), kwargs=kwargs,
                                        name="upgrade", daemon=True)
        self._thread.start()

    def _run(self, cluster: ClusterInfo, **kwargs: Any) -> None:
        try:
            self._result = upgrade_plugin(cluster, **kwargs)
        except BaseException as err:  # handed to join(), in the test's thread
            self._error = err
        finally:
            self.ended = time.monotonic()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> list[str]:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the upgrade is still running after {timeout}s")
        if self._error is not None:
            raise self._error
        return self._result


@dataclass
class Sample:
    t: float  # seconds since the sampler started
    devices: dict[str, int]  # node -> devices in its published slices
    instances: dict[str, int]  # node -> plugin instances alive
    serving: dict[str, int] = field(default_factory=dict)  # of those, registered / Ready


@dataclass
class Sampler:
    """Samples slices and plugin instances every ``interval`` s until ``stop()``."""

    cluster: ClusterInfo
    resources: ResourceApi
    interval: float = 0.5
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def at(self, monotonic: float) -> float:
        return monotonic - self._t0

    def sample(self) -> Sample:
        devices: dict[str, int] = {n.name: 0 for n in self.cluster.nodes}
        for s in self.resources.slices(self.cluster.driver_name):
            node = s["spec"].get("nodeName") or s["spec"].get("pool", {}).get("name", "")
            devices[node] = devices.get(node, 0) + len(s["spec"].get("devices") or [])
        alive = plugin_instances(self.cluster)
        instances = {n: len(v) for n, v in alive.items()}
        serving = {n: sum(1 for i in v if i.get("role") in SERVING) for n, v in alive.items()}
        return Sample(time.monotonic() - self._t0, devices, instances, serving)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.sample())
            except Exception as err:  # an apiserver hiccup is a gap in the picture, not a stop
                self.errors.append(f"{time.monotonic() - self._t0:.1f}s: {err}")
            self._stop.wait(self.interval)


def per_second(times: Sequence[float], seconds: int) -> list[int]:
    counts = [0] * max(seconds, 1)
    for t in times:
        counts[min(int(t), len(counts) - 1)] += 1
    return counts


def write_timeline(path: Path, title: str, load: LoadReport, samples: Sequence[Sample],
                   marks: Sequence[tuple[float, str]] = (), load_offset: float = 0.0
                   ) -> tuple[Path, Path | None]:
    """``path``.json (everything) and ``path``.png (pods started/failed per second, plugin
    instances per node, published devices per node). ``load_offset``: sampler time at which
    the load started. The PNG is skipped (None) where matplotlib is not installed."""
    seconds = int(max([load.duration_s + load_offset, *(s.t for s in samples)], default=1)) + 2
    started = per_second([p.started + load_offset for p in load.pods if p.started is not None],
                         seconds)
    failed = per_second([p.failed + load_offset for p in load.pods if p.failed is not None],
                        seconds)
    doc = {"title": title, "load": load.to_json(), "load_offset_s": load_offset,
           "started_per_second": started, "failed_per_second": failed,
           "samples": [s.__dict__ for s in samples],
           "marks": [{"t": t, "what": what} for t, what in marks]}
    path.parent.mkdir(parents=True, exist_ok=True)
    js = path.with_suffix(".json")
    js.write_text(json.dumps(doc, indent=1))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return js, None
    fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    xs = list(range(seconds))
    axes[0].bar(xs, started, color="tab:green", label="pods started")
    axes[0].bar(xs, failed, bottom=started, color="tab:red", label="pods failed")
    axes[0].set_ylabel("pods / s")
    axes[0].legend(loc="upper right", fontsize=8)
    nodes = sorted({n for s in samples for n in s.instances} | {n for s in samples
                                                              for n in s.devices})
    for i, node in enumerate(nodes):
        ts = [s.t for s in samples]
        # Offset each node's line a little so overlapping lines stay visible.
        axes[1].step(ts, [s.instances.get(node, 0) + i * 0.04 for s in samples], where="post",
                     label=node)
        axes[2].step(ts, [s.devices.get(node, 0) for s in samples], where="post", label=node)
    axes[1].set_ylabel("plugin instances")
    axes[1].set_ylim(-0.2, 2.6)
    axes[1].legend(loc="upper right", fontsize=7, ncol=4)
    axes[2].set_ylabel("published devices")
    axes[2].set_xlabel("seconds")
    axes[2].set_ylim(bottom=0)
    for ax in axes:
        for t, _what in marks:
            ax.axvline(t, color="grey", linestyle=":", linewidth=1)
    for t, what in marks:
        axes[0].annotate(what, (t, axes[0].get_ylim()[1] * 0.9), fontsize=7, rotation=90,
                         va="top", ha="right")
    fig.suptitle(title)
    fig.tight_layout()
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return js, png
