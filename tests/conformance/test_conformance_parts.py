"""The conformance suite's parts that need no cluster: the catalogue, capabilities files,
gates from /metrics, the report, and the command's input checks."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import fakegpu.conformance as conformance
from fakegpu.cli import main
from fakegpu.conformance import capabilities, checks, kubelet, report
from fakegpu.conformance.cluster import ClusterFacts
from fakegpu.conformance.target import Target
from fakegpu.errors import InvalidInput
from fakegpu.kube.api import parse_feature_gates as parse_gates


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
    ({"podSees": {"attribute": "uuid"}}, "podSees: expected either env"),
    ({"podSees": {"attribute": "uuid", "env": "X", "command": ["ls"]}},
     "podSees: expected either env"),
    ({"podSees": {"attribute": "uuid", "env": ""}}, "podSees.env: expected a non-empty string"),
    ({"podSees": {"attribute": "uuid", "command": "nvidia-smi -L"}},
     "podSees.command: expected a list of 1 to 32 non-empty strings"),
    ({"podSees": {"attribute": "uuid", "command": []}}, "podSees.command: expected a list"),
    ({"podSees": {"env": "X"}}, "podSees.attribute: expected a non-empty string"),
    ({"podSees": {"env": "X", "attribute": "uuid", "shell": "sh"}},
     "podSees: unknown field 'shell'"),
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


def test_pod_sees_by_a_command_takes_its_output_lines() -> None:
    declared = capabilities.parse({"podSees": {
        "command": ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
        "attribute": "uuid"}}, "c")
    how = declared.pod_sees
    assert how is not None and how.command[0] == "nvidia-smi" and not how.env
    assert how.output_devices("GPU-1\n\n  GPU-2  \n") == ["GPU-1", "GPU-2"]


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


def test_a_failure_keeps_its_reason() -> None:
    # pytest's failure text ends with the location; the reason is on its E lines.
    longrepr = ("    def test_template_claim_prepared():\n"
                ">       assert pod.phase == 'Running', 'pod stuck in Pending: no devices'\n"
                "E       AssertionError: pod stuck in Pending: no devices\n"
                "E       assert 'Pending' == 'Running'\n\n"
                "fakegpu/conformance/test_prepare.py:42: AssertionError")
    got = report.classify("failed", "call", longrepr)
    assert got.detail == ("failed: AssertionError: pod stuck in Pending: no devices "
                          "assert 'Pending' == 'Running'")
    assert report.classify("failed", "setup", "RuntimeError: boom").detail == \
        "error in setup: RuntimeError: boom"


@pytest.mark.parametrize(("content", "expected"), [
    ("supports: {1: true, slices: true}\n", "key 1 is not a string"),  # mixed key types
    ("supports: !!python/object:os.system {}\n", "YAML tag"),
    (b"supports:\n  slices: \xff\n", "not UTF-8"),
    ("a: " + "[" * 200 + "]" * 200 + "\n", "deeper than"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n", "alias bomb"),
])
def test_hostile_capabilities_files_are_one_line(tmp_path: Path, content: str | bytes,
                                                 expected: str) -> None:
    path = tmp_path / "caps.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(InvalidInput) as err:
        capabilities.load(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and expected in message and "\n" not in message


def test_capabilities_from_a_device_or_fifo_are_refused_without_reading(tmp_path: Path) -> None:
    # /dev/zero was read until memory ran out; a FIFO without a writer hung the open.
    import os

    fifo = tmp_path / "caps.fifo"
    os.mkfifo(fifo)
    for path in (Path("/dev/zero"), fifo, tmp_path):
        with pytest.raises(InvalidInput, match="not a regular file"):
            capabilities.load(path)
    big = tmp_path / "big.yaml"
    big.write_text("# x\n" * 20_000)
    with pytest.raises(InvalidInput, match="larger than"):
        capabilities.load(big)


def test_the_command_refuses_a_bad_k_expression_and_a_report_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    base = ["conformance", "--kubeconfig", str(kubeconfig), "--driver", "d"]
    assert main([*base, "-k", "((("]) == 2  # was pytest's usage error, exit 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fakegpu: -k: '(((': ")
    report_file = tmp_path / "report"
    report_file.write_text("")
    assert main([*base, "--report", str(report_file)]) == 2  # was FileExistsError
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--report" in err[0] and "not a directory" in err[0]


# --- kubelet registration and unprepare events: the checks' decisions -------------------------

# The plugin manager's lines of a kubelet's /metrics, as the live 1.37.2 and 1.38.0-beta.0 kubelets
# of embedded clusters printed them (2026-12-04; a gauge per socket and state, the path shortened);
# the second socket is another plugin on the same node.
_REG = "/var/lib/kubelet/plugins_registry"
_KUBELET_METRICS = f"""\
# HELP plugin_manager_total_plugins [ALPHA] Number of plugins in Plugin Manager
# TYPE plugin_manager_total_plugins gauge
plugin_manager_total_plugins{{socket_path="{_REG}/gpu.fakegpu.dev-reg.sock",state="actual_state_of_world"}} 1
plugin_manager_total_plugins{{socket_path="{_REG}/gpu.fakegpu.dev-reg.sock",state="desired_state_of_world"}} 1
plugin_manager_total_plugins{{socket_path="{_REG}/other.example.com-reg.sock",state="actual_state_of_world"}} 1
plugin_manager_total_plugins{{socket_path="{_REG}/other.example.com-reg.sock",state="desired_state_of_world"}} 1
"""  # noqa: E501


def test_a_driver_the_kubelet_registered_passes() -> None:
    assert kubelet.registration_problem("gpu.fakegpu.dev", "n1", _KUBELET_METRICS) is None
    assert kubelet.registered_sockets(_KUBELET_METRICS) == [
        f"{_REG}/gpu.fakegpu.dev-reg.sock", f"{_REG}/other.example.com-reg.sock"]


def test_a_driver_only_found_not_registered_fails_naming_node_and_sockets() -> None:
    # Found by the plugin watcher (desired state) but never registered (no actual state).
    text = "\n".join(line for line in _KUBELET_METRICS.splitlines()
                     if not ("gpu.fakegpu.dev" in line and "actual_state" in line))
    problem = kubelet.registration_problem("gpu.fakegpu.dev", "n1", text)
    assert problem is not None and "\n" not in problem
    assert problem.startswith("node n1: the kubelet has not registered driver gpu.fakegpu.dev")
    assert f"registered: {_REG}/other.example.com-reg.sock" in problem


@pytest.mark.parametrize("driver", ["gpu.fakegpu", "fakegpu.dev", "gpu.example.com"])
def test_another_drivers_socket_does_not_count(driver: str) -> None:
    # A name that is only part of a registered socket's name is not that driver.
    assert kubelet.registration_problem(driver, "n1", _KUBELET_METRICS) is not None


def test_a_zero_count_does_not_count() -> None:
    text = _KUBELET_METRICS.replace('actual_state_of_world"} 1', 'actual_state_of_world"} 0')
    assert kubelet.registered_sockets(text) == []
    assert "registered: none" in str(kubelet.registration_problem("gpu.fakegpu.dev", "n", text))


def test_a_kubelet_without_plugins_says_so() -> None:
    problem = kubelet.registration_problem("gpu.fakegpu.dev", "n2", "kubelet_running_pods 3\n")
    assert problem == ("node n2: the kubelet's /metrics has no plugin_manager_total_plugins: "
                       "no plugin is registered with it, gpu.fakegpu.dev included")


def _event(reason: str, pod: str, message: str, count: int | None = 1) -> SimpleNamespace:
    return SimpleNamespace(reason=reason, message=message, count=count,
                           involved_object=SimpleNamespace(kind="Pod", name=pod),
                           source=SimpleNamespace(host="n1"))


def test_failed_unprepare_events_are_reported_and_others_ignored() -> None:
    events = [
        _event("Scheduled", "p", "Successfully assigned"),
        _event("FailedUnprepareDynamicResources", "from-claim",
               "Failed to unprepare dynamic resources: NodeUnprepareResources: boom", 3),
        _event("Killing", "p", "Stopping container main"),
    ]
    assert kubelet.failed_unprepares(events) == [
        "Pod from-claim on node n1: Failed to unprepare dynamic resources: "
        "NodeUnprepareResources: boom (x3)"]
    assert kubelet.failed_unprepares(events[:1] + events[2:]) == []


_METHOD = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"


def _dra_counts(ok: int, unavailable: int, op_errors: int) -> str:
    """A kubelet's DRA histogram counts, with the metric and label names the live 1.37.2 and
    1.38.0-beta.0 kubelets printed (2026-12-04)."""
    g = "dra_grpc_operations_duration_seconds_count"
    o = "dra_operations_duration_seconds_count"
    lines = [
        f'{g}{{driver_name="gpu.fakegpu.dev",grpc_status_code="OK",method_name="{_METHOD}"}} {ok}',
        f'{g}{{driver_name="other.example.com",grpc_status_code="Unavailable",'
        f'method_name="{_METHOD}"}} 7',
        f'{o}{{is_error="false",operation_name="UnprepareResources"}} {ok}',
        f'{o}{{is_error="true",operation_name="PrepareResources"}} 5',
    ]
    if unavailable:
        lines.append(f'{g}{{driver_name="gpu.fakegpu.dev",grpc_status_code="Unavailable",'
                     f'method_name="{_METHOD}"}} {unavailable}')
    if op_errors:
        lines.append(f'{o}{{is_error="true",operation_name="UnprepareResources"}} {op_errors}')
    return "\n".join(lines) + "\n"


def test_successful_unprepares_count_nothing() -> None:
    before = kubelet.unprepare_errors("gpu.fakegpu.dev", _dra_counts(2, 0, 0))
    after = kubelet.unprepare_errors("gpu.fakegpu.dev", _dra_counts(4, 0, 0))
    assert before == after == {}
    assert kubelet.grown("n1", before, after) == []


def test_a_failed_unprepare_call_of_the_driver_is_caught_even_if_a_retry_succeeded() -> None:
    before = kubelet.unprepare_errors("gpu.fakegpu.dev", _dra_counts(2, 0, 0))
    after = kubelet.unprepare_errors("gpu.fakegpu.dev", _dra_counts(4, 1, 1))
    assert kubelet.grown("n1", before, after) == [
        "node n1: NodeUnprepareResources calls to gpu.fakegpu.dev ending Unavailable: 0 -> 1",
        "node n1: UnprepareResources operations ending in error (any driver): 0 -> 1"]


def test_old_failures_and_other_drivers_failures_are_not_this_runs() -> None:
    # Counters that did not grow during the check are earlier history, not this check's pods.
    before = kubelet.unprepare_errors("gpu.fakegpu.dev", _dra_counts(2, 3, 3))
    after = kubelet.unprepare_errors("gpu.fakegpu.dev", _dra_counts(4, 3, 3))
    assert kubelet.grown("n1", before, after) == []


def _old_kubelet_counts(ok: int, failed: int) -> str:
    """The same counts as a 1.34/1.35 kubelet labels them: is_error inverted (its
    DRAOperationsDuration got strconv.FormatBool(err == nil); seen live on 1.35.4)."""
    o = "dra_operations_duration_seconds_count"
    return (f'{o}{{is_error="true",operation_name="UnprepareResources"}} {ok}\n'
            f'{o}{{is_error="false",operation_name="UnprepareResources"}} {failed}\n')


def test_an_old_kubelets_successful_unprepares_are_not_failures() -> None:
    before = kubelet.unprepare_errors("gpu.fakegpu.dev", _old_kubelet_counts(0, 0), 35)
    after = kubelet.unprepare_errors("gpu.fakegpu.dev", _old_kubelet_counts(2, 0), 35)
    assert kubelet.grown("n1", before, after) == []
    failed = kubelet.unprepare_errors("gpu.fakegpu.dev", _old_kubelet_counts(2, 1), 35)
    assert kubelet.grown("n1", before, failed) == [
        "node n1: UnprepareResources operations ending in error (any driver): 0 -> 1"]
    # A 1.36+ kubelet's "true" is a failure.
    assert kubelet.unprepare_errors("gpu.fakegpu.dev", _old_kubelet_counts(2, 1), 36) == {
        "UnprepareResources operations ending in error (any driver)": 2.0}
