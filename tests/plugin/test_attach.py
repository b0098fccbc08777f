"""GPUs attached before a pod binds (binding conditions, attach.py): what is published, which
claims wait, and the outcome written on them. The scheduler's side is
e2e/test_binding_conditions.py's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fakegpu.plugin import attach, slices
from fakegpu.topology.errors import TopologyError
from fakegpu.topology.load import parse_topology
from fakegpu.topology.model import ATTACH_MODES

from .helpers import DRIVER, NODE, ClaimStore, claim, inventory


def _marked() -> Any:
    return attach.mark(inventory(4), hotplug=frozenset({1, 2}), broken=frozenset({0}))


def test_the_plugins_modes_are_the_topologys() -> None:
    # The plugin reads no topology: the two must name the same modes.
    assert (attach.ATTACH_HOTPLUG, attach.ATTACH_BROKEN) == ATTACH_MODES


def test_marked_gpus_are_published_with_binding_conditions() -> None:
    inv = _marked()
    assert [d.attach for d in inv.devices] == ["broken", "hotplug", "hotplug", ""]
    [obj] = slices.build_slices(DRIVER, NODE, inv, "v1", 1)
    broken, hotplug, _, plain = obj["spec"]["devices"]
    for entry, mode in ((broken, "broken"), (hotplug, "hotplug")):
        assert entry["bindsToNode"] is True
        assert entry["bindingConditions"] == ["fakegpu.dev/Attached"]
        assert entry["bindingFailureConditions"] == ["fakegpu.dev/AttachFailed"]
        assert entry["attributes"]["fakegpu.dev/attach"] == {"string": mode}
    assert not {"bindsToNode", "bindingConditions"} & set(plain)
    assert "fakegpu.dev/attach" not in plain["attributes"]
    [beta] = slices.build_slices(DRIVER, NODE, inv, "v1beta1", 1)
    assert beta["spec"]["devices"][1]["basic"]["bindingConditions"] == ["fakegpu.dev/Attached"]


def _waiting_claim(name: str, device: str, conditions: bool = True) -> dict[str, Any]:
    obj = claim(name, f"uid-{name}", [device])
    if conditions:  # the scheduler copies the slice's conditions into the allocation
        for r in obj["status"]["allocation"]["devices"]["results"]:
            r["bindingConditions"] = ["fakegpu.dev/Attached"]
            r["bindingFailureConditions"] = ["fakegpu.dev/AttachFailed"]
    return obj


def test_waiting_lists_only_this_nodes_marked_devices_without_an_outcome() -> None:
    modes = {"gpu-0": "broken", "gpu-1": "hotplug"}
    assert attach.waiting(_waiting_claim("a", "gpu-1"), DRIVER, NODE, modes) == ["gpu-1"]
    assert attach.waiting(_waiting_claim("b", "gpu-3"), DRIVER, NODE, modes) == []
    # Allocated before the slice carried conditions: nothing for the scheduler to wait for.
    assert attach.waiting(_waiting_claim("c", "gpu-1", conditions=False), DRIVER, NODE,
                          modes) == []
    other = _waiting_claim("d", "gpu-1")
    other["status"]["allocation"]["devices"]["results"][0]["pool"] = "node-b"
    assert attach.waiting(other, DRIVER, NODE, modes) == []
    done = attach.set_condition(_waiting_claim("e", "gpu-1"), DRIVER, NODE, "gpu-1",
                                "hotplug", "2026-12-05T00:00:00Z")
    assert attach.waiting(done, DRIVER, NODE, modes) == []


def test_the_outcome_is_a_condition_on_the_devices_status_entry() -> None:
    obj = _waiting_claim("a", "gpu-1")
    obj["status"]["devices"] = [{"driver": DRIVER, "pool": NODE, "device": "gpu-1",
                                 "conditions": [{"type": "Ready", "status": "True"}]}]
    attach.set_condition(obj, DRIVER, NODE, "gpu-1", "hotplug", "2026-12-05T00:00:00Z")
    [entry] = obj["status"]["devices"]
    assert [c["type"] for c in entry["conditions"]] == ["Ready", "fakegpu.dev/Attached"]
    assert entry["conditions"][1]["status"] == "True"
    attach.set_condition(obj, DRIVER, NODE, "gpu-0", "broken", "2026-12-05T00:00:00Z")
    failed = obj["status"]["devices"][1]
    assert failed["device"] == "gpu-0"
    assert [(c["type"], c["reason"]) for c in failed["conditions"]] == [
        ("fakegpu.dev/AttachFailed", "AttachFailed")]


def test_the_attacher_waits_its_delay_then_attaches_or_fails_and_taints() -> None:
    store = ClaimStore()
    store.add(_waiting_claim("ok", "gpu-1"))
    store.add(_waiting_claim("bad", "gpu-0"))
    pokes: list[int] = []
    attacher = attach.Attacher(store, DRIVER, NODE, _marked, delay_s=5.0,
                               on_failed=lambda: pokes.append(1))
    assert attacher.sync(now=100.0) == 0  # first seen: the attach takes its time
    assert attacher.sync(now=104.0) == 0
    assert store.status_writes == 0
    assert attacher.sync(now=105.0) == 2
    ok = store.get_claim("default", "ok")["status"]["devices"][0]["conditions"]
    bad = store.get_claim("default", "bad")["status"]["devices"][0]["conditions"]
    assert [c["type"] for c in ok] == ["fakegpu.dev/Attached"]
    assert [c["type"] for c in bad] == ["fakegpu.dev/AttachFailed"]
    assert pokes == [1]
    assert attacher.taints(_marked()) == {"gpu-0": [
        {"key": f"{DRIVER}/attach-failed", "effect": "NoSchedule"}]}
    assert attacher.sync(now=200.0) == 0  # done once


def test_a_node_without_marked_gpus_lists_nothing() -> None:
    class NoList(ClaimStore):
        def list_claims(self) -> list[dict[str, Any]]:
            raise AssertionError("listed claims with no GPU to attach")

    attacher = attach.Attacher(NoList(), DRIVER, NODE, lambda: inventory(2), 0.0, lambda: None)
    assert attacher.sync(now=0.0) == 0


def test_a_mig_or_partition_device_is_never_marked() -> None:
    inv = inventory(2)
    mig = replace(inv.devices[0], name="gpu-0-mig-1g", type="mig")
    marked = attach.mark(replace(inv, devices=(*inv.devices, mig)), frozenset({0}), frozenset())
    assert [d.attach for d in marked.devices] == ["hotplug", "", ""]


def _node(gpus: str) -> str:
    return f"name: t\nnodes:\n  - name: n\n    gpus: {gpus}\n"


def test_the_topology_lists_attached_gpus_for_the_plugin() -> None:
    from fakegpu.node.entrypoint import plugin_args

    topo = parse_topology(_node("[{product: H100-SXM5-80GB, attach: broken}, "
                                "{product: H100-SXM5-80GB, attach: hotplug}, "
                                "{product: H100-SXM5-80GB}]"), "t.yaml")
    assert plugin_args(topo.node("n")) == ["--attach-gpus=1", "--broken-attach-gpus=0"]


@pytest.mark.parametrize(("gpus", "message"), [
    ("{product: H100-SXM5-80GB, count: 1, attach: later}",
     "t.yaml: nodes[0].gpus.attach: is 'later', expected one of hotplug, broken"),
    ("{product: H100-SXM5-80GB, count: 1, attach: yes}",
     "t.yaml: nodes[0].gpus.attach: is a boolean (True), expected text"),
    ("{product: H100-SXM5-80GB, count: 1, attach: hotplug, mig: {enabled: true}}",
     "t.yaml: nodes[0].gpus.attach: only a whole GPU"),
    ("{product: A100-SXM4-40GB, count: 1, attach: hotplug, shared: true}",
     "t.yaml: nodes[0].gpus.attach: only a whole GPU"),
])
def test_a_bad_attach_is_one_line_naming_the_field(gpus: str, message: str) -> None:
    with pytest.raises(TopologyError) as err:
        parse_topology(_node(gpus), "t.yaml")
    assert message in str(err.value)


@pytest.mark.parametrize("flag", ["--attach-gpus", "--broken-attach-gpus"])
def test_the_attach_flags_refuse_what_is_not_minors(flag: str) -> None:
    from fakegpu.cli.plugin import _minors
    from fakegpu.errors import InvalidInput

    assert _minors("0, 2", flag) == {0, 2}
    with pytest.raises(InvalidInput, match=flag):
        _minors("x", flag)
