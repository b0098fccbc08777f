"""The upgrade timeline and the load's per-pod record, without a cluster."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client as kclient

from fakegpu.testkit.load import LoadReport, PodLoad, PodRecord
from fakegpu.testkit.upgrade import Sample, per_second, write_timeline


def test_per_second_counts_each_event_in_its_second() -> None:
    assert per_second([0.1, 0.9, 1.0, 2.5, 99.0], 3) == [2, 1, 2]


def test_timeline_json_and_png(tmp_path: Path) -> None:
    pods = (PodRecord("a", "n0", 0.0, started=1.2, finished=1.5),
            PodRecord("b", "n1", 0.5, started=2.1, failed=2.4, failure="exit 1"))
    report = LoadReport(started_at=0.0, duration_s=3.0, pods=pods)
    samples = [Sample(0.0, {"n0": 4, "n1": 4}, {"n0": 1, "n1": 1}),
               Sample(1.0, {"n0": 4, "n1": 4}, {"n0": 2, "n1": 1})]
    js, png = write_timeline(tmp_path / "t", "title", report, samples, [(0.5, "upgrade")],
                             load_offset=0.5)
    doc = json.loads(js.read_text())
    assert doc["started_per_second"][:3] == [0, 1, 1]  # 1.7 s and 2.6 s on the sampler's clock
    assert doc["failed_per_second"][2] == 1 and len(doc["load"]["pods"]) == 2
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def pod(phase: str, *, exit_code: int | None = None, scheduled: bool = True) -> kclient.V1Pod:
    state = (kclient.V1ContainerState(terminated=kclient.V1ContainerStateTerminated(
        exit_code=exit_code)) if exit_code is not None else
        kclient.V1ContainerState(waiting=kclient.V1ContainerStateWaiting(
            reason="ContainerCreating")))
    return kclient.V1Pod(
        metadata=kclient.V1ObjectMeta(name="p"),
        status=kclient.V1PodStatus(
            phase=phase,
            conditions=[kclient.V1PodCondition(type="PodScheduled",
                                               status="True" if scheduled else "False")],
            resource_claim_statuses=[kclient.V1PodResourceClaimStatus(
                name="gpu", resource_claim_name="p-gpu")],
            container_statuses=[kclient.V1ContainerStatus(
                name="main", image="i", image_id="", ready=False, restart_count=0,
                state=state)]))


def test_a_pod_record_follows_what_the_api_shows() -> None:
    load = PodLoad.__new__(PodLoad)  # only _update and its driver name are used
    load.driver = "gpu.fakegpu.dev"
    rec = PodRecord("p", "n0", 0.0)
    claim = {"status": {"allocation": {"devices": {}}, "reservedFor": [{"name": "p"}],
                        "devices": [{"driver": "gpu.fakegpu.dev",
                                     "data": {"pluginVersion": "2.0.0"}}]}}
    load._update(rec, pod("Pending"), {"p-gpu": claim}, 1.0)
    assert (rec.scheduled, rec.allocated, rec.started, rec.plugin_version) == (
        1.0, 1.0, None, "2.0.0")
    load._update(rec, pod("Succeeded", exit_code=0), {}, 2.0)
    assert (rec.started, rec.finished, rec.failed) == (2.0, 2.0, None)
    bad = PodRecord("p", "n0", 0.0)
    load._update(bad, pod("Failed", exit_code=3), {}, 3.0)
    assert bad.failed == 3.0 and bad.failure.startswith("exit 3")


def test_the_load_keeps_its_rate_when_each_create_is_slow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Open loop: a create that takes six intervals must not pace the next pod (a loaded API
    # server did, and the upgrade suite saw 60 pods in 64 s). Only the create is replaced.
    import fakegpu.testkit.load as load_mod

    def slow_create(core: object, namespace: str, manifest: object) -> None:
        time.sleep(0.3)

    monkeypatch.setattr(load_mod, "create_pod", slow_create)
    load = PodLoad.__new__(PodLoad)
    load.rate, load.nodes = 20.0, ["n0"]
    load.core = kclient.CoreV1Api.__new__(kclient.CoreV1Api)  # never called: create is replaced
    load.namespace, load.image, load.command = "ns", "img", ["true"]
    load.records, load.create_errors, load._creates = {}, [], []
    load._lock, load._stop_creating = threading.Lock(), threading.Event()
    load._in_flight = {"n0": threading.BoundedSemaphore(load_mod.IN_FLIGHT)}
    load._t0 = time.monotonic()
    creator = threading.Thread(target=load._create_loop, args=("n0",))
    creator.start()
    time.sleep(1.0)
    load._stop_creating.set()
    creator.join()
    for t in load._creates:
        t.join()
    # 21 ticks were due; one create after the other would have made 4.
    assert len(load.records) >= 15, (sorted(load.records), load.create_errors[:3])
    assert not load.create_errors
