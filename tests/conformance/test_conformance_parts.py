"""The conformance suite's parts that need no cluster: the catalogue, capabilities files,
gates from /metrics, the report, and the command's input checks."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import fakegpu.conformance as conformance
from fakegpu.cli import main
from fakegpu.conformance import capabilities, checks, report
from fakegpu.conformance.cluster import ClusterFacts, parse_gates
from fakegpu.conformance.target import Target
from fakegpu.errors import InvalidInput


def _check_functions() -> set[str]:
    names: set[str] = set()
    for mod in pkgutil.iter_modules(conformance.__path__):
        if mod.name.startswith("test_"):
            module = importlib.import_module(f"fakegpu.conformance.{mod.name}")
            names |= {n.removeprefix("test_") for n, f in inspect.getmembers(module)
                      if n.startswith("test_") and inspect.isfunction(f)}
    return names


def test_every_check_is_in_the_catalogue_and_back() -> None:
    assert _check_functions() == {c.id for c in checks.CHECKS}


@pytest.mark.parametrize("driver", ["gpu.fakegpu.dev", "gpu.nvidia.com"])
def test_fakegpu_declares_every_capability_in_both_modes(driver: str) -> None:
    # `make test` requires all passed or not applicable: nothing may be "not declared".
    declared = capabilities.packaged(driver)
    assert [c for c in checks.CAPABILITIES if not declared.declared(c)] == []
    assert declared.driver == driver and declared.device_class == driver
    assert declared.pod_sees is not None and declared.pod_sees.attribute == "uuid"


def test_without_a_file_only_the_core_is_declared() -> None:
    declared = capabilities.default()
    assert {c for c in checks.CAPABILITIES if declared.declared(c)} == {
        "slices", "prepare", "sharedClaims"}


@pytest.mark.parametrize(("doc", "field"), [
    ({"driverName": "x"}, "unknown field 'driverName'"),
    ({"supports": {"teleport": True}}, "supports.teleport: unknown capability"),
    ({"supports": {"prepare": "yes"}}, "supports.prepare: expected true, false or a mapping"),
    ({"supports": {"sliceWriteScope": True}}, "supports.sliceWriteScope: expected"),
    ({"supports": {"sliceWriteScope": {"serviceAccount": "sa"}}},
     "sliceWriteScope.serviceAccount: expected NAMESPACE/NAME"),
    ({"podSees": {"attribute": "uuid"}}, "podSees.env: expected a non-empty string"),
    ({"driver": 3}, "driver: expected a string"),
    (["prepare"], "expected a mapping"),
])
def test_a_bad_capabilities_file_names_its_field(doc: object, field: str) -> None:
    with pytest.raises(InvalidInput, match=field.replace(".", r"\.").replace("(", r"\(")):
        capabilities.parse(doc, "caps.yaml")


def test_declared_false_is_not_declared_and_pod_sees_splits() -> None:
    declared = capabilities.parse({"supports": {"prepare": True, "adminAccess": False},
                                   "podSees": {"env": "GPUS", "attribute": "index",
                                               "separator": ":"}}, "c")
    assert declared.declared("prepare") and not declared.declared("adminAccess")
    assert declared.pod_sees is not None
    assert declared.pod_sees.devices({"GPUS": "0:3"}) == ["0", "3"]
    assert declared.pod_sees.devices({}) is None


def test_gates_from_the_apiservers_metrics() -> None:
    text = ('# HELP kubernetes_feature_enabled ...\n'
            'kubernetes_feature_enabled{name="DRAAdminAccess",stage="BETA"} 1\n'
            'kubernetes_feature_enabled{name="DRADeviceTaintRules",stage="ALPHA"} 0\n'
            'kubernetes_feature_enabled{name="DynamicResourceAllocation",stage=""} 1\n'
            'apiserver_request_total{code="200"} 5\n')
    assert parse_gates(text) == {"DRAAdminAccess": True, "DRADeviceTaintRules": False,
                                 "DynamicResourceAllocation": True}
    facts = ClusterFacts("v1.35.0", "v1", parse_gates(text))
    assert facts.gate("DRADeviceTaintRules") is False and facts.gate("Unknown") is None
    assert ClusterFacts("v1.35.0", "v1").gate("DRAAdminAccess") is None  # unknown: runs


@pytest.mark.parametrize(("outcome", "when", "reason", "result"), [
    ("passed", "call", "", "passed"),
    ("failed", "call", "AssertionError: x\nassert 1 == 2", "failed"),
    ("failed", "setup", "boom", "failed"),
    ("skipped", "setup", "not applicable: feature gate X is off on v1.35.0", "not applicable"),
    ("skipped", "setup", "not declared: c.yaml does not declare adminAccess", "not declared"),
    ("skipped", "setup", "MISSING PREREQUISITE ...", "skipped"),
])
def test_outcomes(outcome: str, when: str, reason: str, result: str) -> None:
    assert report.classify(outcome, when, reason).result == result


def test_the_report_table_has_every_check_and_the_gates() -> None:
    facts = ClusterFacts("v1.37.2", "v1", {"DRAAdminAccess": True, "DRAPrioritizedList": False})
    target = Target(Path("k"), "gpu.example.com", "gpu.example.com", "img",
                    capabilities.default(), facts, own=False)
    text = report.render(target, {
        "template_claim_prepared": report.Outcome("passed"),
        "prioritized_alternative_allocated": report.Outcome(
            "not applicable", "feature gate DRAPrioritizedList is off on v1.37.2")})
    assert "Kubernetes v1.37.2" in text and "DRAAdminAccess=on" in text
    assert "DRAPrioritizedList=off" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(checks.CHECKS)
    assert "**passed**" in rows[[c.id for c in checks.CHECKS].index("template_claim_prepared")]
    assert "**not run**" in rows[0]


def test_the_command_refuses_bad_input_with_one_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    bad = tmp_path / "caps.yaml"
    bad.write_text("supports: {teleport: true}\n")
    code = main(["conformance", "--kubeconfig", str(kubeconfig), "--driver", "d",
                 "--capabilities", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "supports.teleport" in err[0]
    assert main(["conformance", "--kubeconfig", str(tmp_path / "none"), "--driver", "d"]) == 2
