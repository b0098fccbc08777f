"""The kind upgrade's pure parts: when a DaemonSet rollout is done, and the version stamp."""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.cluster.kind.upgrade import not_ready, rollout_state, selector, stamp
from fakegpu.cluster.upgrade import check_target
from fakegpu.errors import InvalidInput


def ds(generation: int = 2, observed: int = 2, desired: int = 4, updated: int = 4,
       available: int = 4, current: int = 4, unavailable: int = 0) -> dict[str, Any]:
    return {"metadata": {"generation": generation},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated, "numberAvailable": available,
                       "currentNumberScheduled": current, "numberUnavailable": unavailable}}


def test_done_only_when_every_node_runs_an_updated_available_pod() -> None:
    assert rollout_state(ds())[0]
    assert not rollout_state(ds(observed=1))[0]  # the controller has not seen the new spec
    assert not rollout_state(ds(updated=3))[0]
    assert not rollout_state(ds(available=3, unavailable=1))[0]
    assert not rollout_state(ds(current=5))[0]  # a surge pod beside an old one
    assert not rollout_state({"metadata": {}, "status": {}})[0]


def test_progress_moves_with_updated_and_available_pods() -> None:
    assert rollout_state(ds(updated=1, available=3))[1] < rollout_state(ds(updated=2,
                                                                          available=3))[1]


def test_a_broken_target_is_stamped_broken_once() -> None:
    assert stamp(check_target("3.0.0", broken=True)) == "3.0.0-broken"
    assert stamp(check_target("3.0.0-broken", broken=True)) == "3.0.0-broken"
    assert stamp(check_target("3.0.0")) == "3.0.0"


@pytest.mark.parametrize(("args", "kwargs", "what"), [
    (("a b",), {}, "plugin version"),
    (("1.0",), {"strategy": "fast"}, "--strategy"),
    (("1.0",), {"strategy": "sequential", "kill_old": True}, "--kill-old"),
])
def test_bad_targets_are_bad_input(args: tuple[str], kwargs: dict[str, Any], what: str) -> None:
    with pytest.raises(InvalidInput, match=what):
        check_target(*args, **kwargs)


def test_a_stall_names_the_pods_that_are_not_ready() -> None:
    def pod(name: str, node: str | None, ready: str, reason: str | None = None) -> dict[str, Any]:
        cond = {"type": "Ready", "status": ready, **({"reason": reason} if reason else {})}
        return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {},
                "status": {"phase": "Running", "conditions": [cond]}}

    pods = [pod("fakegpu-a", "n0", "True"), pod("fakegpu-b", "n1", "False", "ContainersNotReady"),
            pod("fakegpu-c", None, "False")]
    assert not_ready(pods) == ["pod fakegpu-b on node n1: not Ready (ContainersNotReady)",
                               "pod fakegpu-c on node (unscheduled): not Ready (Running)"]
    daemonset = {"spec": {"selector": {"matchLabels": {"b": "2", "app.kubernetes.io/name": "x"}}}}
    assert selector(daemonset) == "app.kubernetes.io/name=x,b=2"
