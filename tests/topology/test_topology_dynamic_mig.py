"""``mig.dynamic``: the node's plugin mode (NVIDIA's DynamicMIG), checked like every field."""

from __future__ import annotations

import pytest

from fakegpu.topology.errors import TopologyError
from fakegpu.topology.load import parse_topology
from fakegpu.topology.packaged import FIXTURES


def _node(gpus: str) -> str:
    return f"name: t\nnodes:\n  - name: n\n    gpus: {gpus}\n"


def test_a_dynamic_node_runs_its_plugin_with_dynamic_mig() -> None:
    topo = parse_topology(_node("{product: H100-SXM5-80GB, count: 2, "
                                "mig: {enabled: true, dynamic: true}}"), "t.yaml")
    node = topo.node("n")
    assert node.dynamic_mig and all(g.mig.dynamic and g.mig.enabled for g in node.gpus)
    plain = parse_topology(_node("{product: H100-SXM5-80GB, count: 1, mig: {enabled: true}}"),
                           "t.yaml")
    assert not plain.node("n").dynamic_mig


@pytest.mark.parametrize(("gpus", "message"), [
    ("[{product: H100-SXM5-80GB, mig: {dynamic: true}}, {product: H100-SXM5-80GB}]",
     "t.yaml: nodes[0].gpus: mig.dynamic must be the same for every GPU of a node"),
    ("{product: H100-SXM5-80GB, count: 1, mig: {enabled: true, dynamic: true, "
     "instances: [{profile: 1g.10gb}]}}",
     "t.yaml: nodes[0].gpus.mig.instances: a dynamic-MIG GPU starts without instances"),
    ("{product: H100-SXM5-80GB, count: 1, mig: {dynamic: yes-please}}",
     "t.yaml: nodes[0].gpus.mig.dynamic:"),
])
def test_bad_dynamic_mig_is_one_line_naming_the_field(gpus: str, message: str) -> None:
    with pytest.raises(TopologyError) as err:
        parse_topology(_node(gpus), "t.yaml")
    assert message in str(err.value)


def test_shared_gpus_are_listed_for_the_plugin_by_minor() -> None:
    topo = parse_topology(_node("[{product: A100-SXM4-40GB}, "
                                "{product: A100-SXM4-40GB, shared: true}]"), "t.yaml")
    assert topo.node("n").shared_minors == (1,)
    with pytest.raises(TopologyError, match=r"nodes\[0\].gpus.shared: a GPU in MIG mode is "
                                            "shared as its MIG devices"):
        parse_topology(_node("{product: A100-SXM4-40GB, count: 1, shared: true, "
                             "mig: {enabled: true}}"), "t.yaml")


def test_both_providers_give_each_node_its_plugin_flags() -> None:
    # The one rule the embedded provider and the kind image's entrypoint both apply.

    from fakegpu.node.entrypoint import plugin_args
    from fakegpu.topology.load import load_topology

    topo = load_topology(FIXTURES / "partitioning.yaml")
    assert plugin_args(topo.node("a100-mig")) == []
    assert plugin_args(topo.node("h100-dyn")) == ["--dynamic-mig"]
    assert plugin_args(topo.node("a100-shared")) == ["--shared-gpus=0"]


def test_time_sliced_gpus_are_listed_for_the_plugin_and_need_dynamic_mig() -> None:
    from fakegpu.node.entrypoint import plugin_args
    from fakegpu.topology.load import load_topology

    node = load_topology(FIXTURES / "mig-modes.yaml").node("h100-modes")
    assert node.time_sliced == ((0, 4),)
    assert plugin_args(node) == ["--dynamic-mig", "--time-sliced-gpus=0:4"]
    for gpus, why in (("{product: H100-SXM5-80GB, count: 1, time_slices: 2}", "needs mig: "),
                      ("{product: H100-SXM5-80GB, count: 1, time_slices: 1, "
                       "mig: {enabled: true, dynamic: true}}", "is 1, expected 2..8"),
                      ("{product: H100-SXM5-80GB, count: 1, time_slices: 9, "
                       "mig: {enabled: true, dynamic: true}}", "is 9, expected 0..8")):
        with pytest.raises(TopologyError, match=r"nodes\[0\].gpus.time_slices: " + why):
            parse_topology(_node(gpus), "t.yaml")


@pytest.mark.parametrize(("version", "refused"), [("1.36.3", True), ("1.37.2", False)])
def test_time_slices_on_a_minor_without_compatibility_groups_are_refused_naming_it(
        version: str, refused: bool) -> None:
    from fakegpu.cluster import lifecycle
    from fakegpu.errors import InvalidInput

    topology = FIXTURES / "mig-modes.yaml"
    if not refused:
        assert lifecycle.load_spec("t", topology, version).k8s_version == version
        return
    with pytest.raises(InvalidInput) as err:
        lifecycle.load_spec("t", topology, version)
    assert str(err.value) == (
        f"{topology}: node h100-modes: time_slices needs Kubernetes 1.37 or newer "
        "(DRADeviceCompatibilityGroups); this cluster would run 1.36")


@pytest.mark.parametrize(("text", "dynamic", "parsed"), [
    ("", False, ()), ("0:4", True, ((0, 4),)), (" 1:2, 0:8 ", True, ((0, 8), (1, 2)))])
def test_time_sliced_gpus_flag(text: str, dynamic: bool, parsed: tuple[tuple[int, int], ...]
                               ) -> None:
    from fakegpu.cli.plugin import _time_slices

    assert _time_slices(text, dynamic) == parsed


@pytest.mark.parametrize(("text", "dynamic", "message"), [
    ("0", True, "'0' is not MINOR:N"), ("a:2", True, "is not MINOR:N"),
    ("0:1", True, "2..8 shares"), ("0:2,0:4", True, "a GPU minor once"),
    ("-1:2", True, "a GPU minor once"), ("0:4", False, "needs --dynamic-mig")])
def test_time_sliced_gpus_flag_refuses_bad_input_naming_it(text: str, dynamic: bool,
                                                           message: str) -> None:
    from fakegpu.cli.plugin import _time_slices
    from fakegpu.errors import InvalidInput

    with pytest.raises(InvalidInput, match="--time-sliced-gpus: .*" + message):
        _time_slices(text, dynamic)
