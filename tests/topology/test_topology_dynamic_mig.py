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
