"""The fakegpu pytest plugin, run for real with pytester.

Runs that need a cluster use a tiny fake provider installed by the inner run's conftest
(monkeypatching ``fakegpu.cluster.get_provider``, through which the plugin resolves providers)
and a fake apiserver over HTTP, so the plugin's real code paths run: the kubernetes client,
namespace creation and deletion, event and pod gathering. The conftest also states the host
prerequisites as present, so these runs behave the same on any host; the prerequisite decision
itself is tested in tests/testkit/test_testkit_prereq.py, and the one skip path below runs
against a prerequisite that is truly absent.
"""

from __future__ import annotations

import json
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

# --- a fake apiserver: the handful of endpoints the plugin uses ---------------------------------


class FakeApiserver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.namespaces: set[str] = set()
        self.deleted: list[str] = []
        self.nodes: list[str] = ["node-0", "node-1"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeApiserver

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "reason": "NotFound", "code": 404, "message": f"{self.path} not found"})

    def do_POST(self) -> None:
        if self.path.split("?")[0] == "/api/v1/namespaces":
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.server.namespaces.add(body["metadata"]["name"])
            self._send(201, body)
        else:
            self._not_found()

    def do_DELETE(self) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4:
            self.server.namespaces.discard(parts[3])
            self.server.deleted.append(parts[3])
            self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        else:
            self._not_found()

    def do_GET(self) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts == ["api", "v1", "nodes"]:
            self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": [
                {"metadata": {"name": n},
                 "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
                for n in self.server.nodes]})
        elif parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 4:
            if parts[3] in self.server.namespaces:
                self._send(200, {"kind": "Namespace", "apiVersion": "v1",
                                 "metadata": {"name": parts[3]}, "status": {"phase": "Active"}})
            else:
                self._not_found()
        elif parts[:3] == ["api", "v1", "namespaces"] and parts[4:] == ["events"]:
            ns = parts[3]
            self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": [{
                "metadata": {"name": "ev1", "namespace": ns},
                "involvedObject": {"kind": "Pod", "name": "greedy", "namespace": ns},
                "reason": "FailedScheduling", "type": "Warning", "count": 3,
                "message": "0/2 nodes are available: 2 cannot allocate all claims.",
                "lastTimestamp": "2025-01-01T00:00:00Z"}]})
        elif parts[:3] == ["api", "v1", "namespaces"] and parts[4:] == ["pods"]:
            ns = parts[3]
            self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [{
                "metadata": {"name": "greedy", "namespace": ns},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
                "status": {"phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "cannot allocate all claims"}]}}]})
        else:
            self._not_found()


@pytest.fixture
def apiserver() -> Iterator[FakeApiserver]:
    server = FakeApiserver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# --- the inner run's conftest: a fake provider -------------------------------------------------

FAKE_PROVIDER_CONFTEST = '''
import json
import time
from pathlib import Path

import pytest

import fakegpu.cluster
from fakegpu.cluster.provider import ClusterInfo, NodeInfo
from fakegpu.errors import FakegpuError
from fakegpu.cluster import prereq

HERE = Path(__file__).parent
CALLS = HERE / "calls.jsonl"
SETTINGS = json.loads((HERE / "fake.json").read_text())


def record(*call):
    with CALLS.open("a") as f:
        f.write(json.dumps(list(call)) + "\\n")


def calls():
    if not CALLS.exists():
        return []
    return [json.loads(line) for line in CALLS.read_text().splitlines()]


def info(name, topology, version):
    kubeconfig = HERE / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\\nkind: Config\\ncurrent-context: c\\n"
        f"clusters: [{{name: c, cluster: {{server: '{SETTINGS['url']}'}}}}]\\n"
        "users: [{name: u, user: {}}]\\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\\n")
    nodes = tuple(NodeInfo(n, "worker", None, None, None, None) for n in ("node-0", "node-1"))
    return ClusterInfo(name=name, provider="embedded", k8s_version=version or "1.37.2",
                       kubeconfig=kubeconfig, topology=Path(topology),
                       driver_name="gpu.fakegpu.dev", workload_image="busybox:local", nodes=nodes)


class FakeProvider:
    name = "embedded"

    def up(self, name, topology, k8s_version, *, driver="fakegpu", image_aliases=(),
           nic_driver="fakegpu"):
        record("up", name, str(topology), k8s_version)
        time.sleep(SETTINGS.get("up_seconds", 0))
        if SETTINGS.get("fail_up"):
            err = FakegpuError("kube-apiserver exited 1: boom")
            err.add_note("last lines of output: etcd unreachable")
            raise err
        return info(name, topology, k8s_version)

    def down(self, name):
        record("down", name)

    def down_command(self, name):
        return f"fakegpu cluster down --cluster {name}"

    def tag_images(self, name, names):
        if names:
            record("tag_images", name, list(names))

    def status(self, name):
        record("status", name)
        running = SETTINGS.get("running")
        if running:
            return info(name, running, None)
        # Like a real provider: a cluster that one process brought up is running for all.
        ups = [c for c in calls() if c[1] == name and c[0] in ("up", "down")]
        return info(name, ups[-1][2], ups[-1][3]) if ups and ups[-1][0] == "up" else None

    def logs(self, name, out):
        record("logs", name)
        out.mkdir(parents=True, exist_ok=True)
        files = []
        for component in ("kube-apiserver", "kubelet-node-0"):
            f = out / f"{component}.log"
            f.write_text(f"{component} log line\\n")
            files.append(f)
        return files

    def stop_node(self, name, node):
        raise NotImplementedError

    def start_node(self, name, node):
        raise NotImplementedError


_patches = pytest.MonkeyPatch()


def pytest_configure(config):
    _patches.setattr(fakegpu.cluster, "get_provider", lambda name: FakeProvider(),
                     raising=False)
    # These runs test the plugin, not the host: state the prerequisites as present.
    _patches.setattr(prereq, "probe_host", lambda provider, version: prereq.HostFacts(
        is_root=True, go="/usr/bin/go", binaries_cached=True, docker=None))


def pytest_unconfigure(config):
    _patches.undo()
'''

E2E_TESTS = '''
import pytest

pytestmark = pytest.mark.fakegpu


def test_fails(fakegpu_namespace, fakegpu_cluster):
    assert fakegpu_namespace.startswith("e2e-test-fails-")
    assert fakegpu_cluster.driver_name == "gpu.fakegpu.dev"
    assert False, "deliberate failure"


def test_passes(fakegpu_namespace, fakegpu_core_v1):
    assert fakegpu_core_v1.read_namespace(fakegpu_namespace).metadata.name == fakegpu_namespace
'''

UNIT_TEST = '''
def test_unit():
    assert True
'''


def _fake_setup(pytester: pytest.Pytester, apiserver: FakeApiserver, **settings: Any) -> Path:
    pytester.makeconftest(FAKE_PROVIDER_CONFTEST)
    (pytester.path / "fake.json").write_text(json.dumps({"url": apiserver.url, **settings}))
    topology = pytester.path / "topo.yaml"
    topology.write_text("name: fake\n")
    return topology


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # In a subprocess, as CI runs pytest: an in-process run would drop the kubernetes client's
    # modules imported during the run (pytester restores sys.modules), and its pydantic models
    # then no longer match their own classes in the next run.
    return pytester.runpytest_subprocess(*args)


def _calls(pytester: pytest.Pytester) -> list[list[Any]]:
    path = pytester.path / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- options ------------------------------------------------------------------------------------


def test_options_are_in_one_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["fakegpu end-to-end cluster:", "*--fakegpu-provider=*",
                                 "*--fakegpu-k8s-version=VERSION*",
                                 "*--fakegpu-topology=NAME|FILE*",
                                 "*--fakegpu-keep-cluster*", "*--fakegpu-cluster-name=NAME*"])


def test_unsupported_k8s_version_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fakegpu-k8s-version", "1.20")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--fakegpu-k8s-version:*'1.20' is not supported; supported: 1.34*"])


def test_supported_k8s_version_forms_are_accepted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(UNIT_TEST)
    for version in ("1.34", "v1.37.2"):
        result = pytester.runpytest("--fakegpu-k8s-version", version)
        result.assert_outcomes(passed=1)


def test_missing_topology_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fakegpu-topology", "nope.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fakegpu-topology: topology 'nope.yaml': no such file*"])


def test_unknown_provider_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fakegpu-provider", "podman")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fakegpu-provider*invalid choice*'podman'*"])


def test_bad_cluster_name_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--fakegpu-cluster-name", "Bad_Name")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--fakegpu-cluster-name: 'Bad_Name' must be*"])


# --- a good neighbour: other plugins' options, another project's e2e tests and fixtures ---------

# What pytest-kind and pytest-kubernetes register (their option names, the plugin's old ones).
OTHER_PLUGIN_CONFTEST = '''
def pytest_addoption(parser):
    parser.addoption("--keep-cluster", action="store_true", default=False)
    parser.addoption("--k8s-version", default=None)
    parser.addoption("--cluster-name", default="kind")
    parser.addoption("--topology", default=None)
'''


def test_options_of_pytest_kind_and_pytest_kubernetes_coexist(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(OTHER_PLUGIN_CONFTEST)
    pytester.makepyfile('''
def test_theirs(pytestconfig):
    assert pytestconfig.getoption("keep_cluster") is True
    assert pytestconfig.getoption("k8s_version") == "1.20"
    assert pytestconfig.getoption("fakegpu_keep_cluster") is False
''')
    result = pytester.runpytest("--keep-cluster", "--k8s-version", "1.20", "--cluster-name", "x")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.assert_outcomes(passed=1)


def test_another_projects_e2e_tests_get_no_cluster(pytester: pytest.Pytester,
                                                   apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makeini("[pytest]\nmarkers =\n    e2e: this project's own end-to-end tests\n")
    pytester.makepyfile('''
import pytest

@pytest.mark.e2e
def test_their_e2e():
    pass
''')
    result = _run(pytester, "--strict-markers", "--fakegpu-topology", str(topology))
    result.assert_outcomes(passed=1)
    assert _calls(pytester) == []
    assert "fakegpu e2e" not in result.stdout.str()


def test_the_projects_own_fixture_names_are_theirs(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('''
import pytest

@pytest.fixture
def namespace():
    return "theirs"

@pytest.fixture
def core_v1():
    return "their client"
''')
    pytester.makepyfile(test_theirs='''
def test_theirs(namespace, core_v1):
    assert (namespace, core_v1) == ("theirs", "their client")
''')
    pytester.makepyfile(test_unknown='''
def test_resource_api(resource_api):
    pass
''')
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, errors=1)
    # The plugin defines no short names: without the project's own, they do not exist.
    result.stdout.fnmatch_lines(["*fixture 'resource_api' not found*"])


# --- marker -------------------------------------------------------------------------------------


def test_fakegpu_marker_is_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mixed=UNIT_TEST + '''
import pytest

@pytest.mark.fakegpu
def test_cluster_thing():
    pass
''')
    result = pytester.runpytest("--strict-markers", "-m", "not fakegpu")
    result.assert_outcomes(passed=1, deselected=1)
    # Deselected e2e tests are not "skipped": no banner, no cluster.
    assert "E2E" not in result.stdout.str()
    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.fakegpu: a test on a fakegpu cluster*"])


def test_other_providers_tests_are_deselected_not_skipped(pytester: pytest.Pytester,
                                                          apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_kind_only=UNIT_TEST + '''
import pytest

@pytest.mark.fakegpu
@pytest.mark.provider("kind")
def test_chart_thing():
    pass
''')
    result = _run(pytester, "--fakegpu-topology", str(topology))
    result.assert_outcomes(passed=1, deselected=1)
    assert _calls(pytester) == []  # nothing e2e left: no cluster either


# --- cluster lifecycle --------------------------------------------------------------------------


def test_no_cluster_without_e2e_tests(pytester: pytest.Pytester,
                                      apiserver: FakeApiserver) -> None:
    _fake_setup(pytester, apiserver)
    pytester.makepyfile(UNIT_TEST)
    result = _run(pytester)
    result.assert_outcomes(passed=1)
    assert _calls(pytester) == []
    assert "fakegpu e2e" not in result.stdout.str()


def test_deselected_e2e_tests_bring_up_nothing(pytester: pytest.Pytester,
                                               apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_e2e=E2E_TESTS, test_unit=UNIT_TEST)
    result = _run(pytester, "--fakegpu-topology", str(topology), "-m", "not fakegpu")
    result.assert_outcomes(passed=1, deselected=2)
    assert _calls(pytester) == []


@pytest.mark.parametrize("xdist", [(), ("-n", "0")], ids=["plain", "n0"])
def test_one_cluster_per_session_and_down_at_the_end(pytester: pytest.Pytester,
                                                     apiserver: FakeApiserver,
                                                     xdist: tuple[str, ...]) -> None:
    # `-n 0` (pytest-xdist installed, no workers) is the same run as without xdist.
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_e2e=E2E_TESTS)
    result = _run(pytester, *xdist, "--fakegpu-topology", str(topology), "--fakegpu-k8s-version",
                  "1.35",
                  "--fakegpu-cluster-name", "ci-1")
    result.assert_outcomes(failed=1, passed=1)
    assert _calls(pytester) == [["up", "ci-1", str(topology), "1.35"], ["logs", "ci-1"],
                                ["down", "ci-1"]]
    # Each test's namespace was created and deleted.
    assert len(apiserver.deleted) == 2 and not apiserver.namespaces
    result.stdout.fnmatch_lines(["*fakegpu e2e: cluster ci-1 brought up (embedded, "
                                 "Kubernetes 1.35, 2 nodes)*"])


def test_keep_cluster_leaves_it_up(pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_e2e=E2E_TESTS)
    result = _run(pytester, "--fakegpu-topology", str(topology), "--fakegpu-keep-cluster", "-k",
                  "passes")
    result.assert_outcomes(passed=1, deselected=1)
    assert _calls(pytester) == [["status", "fakegpu-e2e"],
                                ["up", "fakegpu-e2e", str(topology), None]]
    result.stdout.fnmatch_lines(["*left running (--fakegpu-keep-cluster)*fakegpu cluster down "
                                 "--cluster fakegpu-e2e*"])


def test_keep_cluster_reuses_a_healthy_running_cluster(pytester: pytest.Pytester,
                                                       apiserver: FakeApiserver) -> None:
    topology = pytester.path / "topo.yaml"
    _fake_setup(pytester, apiserver, running=str(topology))
    pytester.makepyfile(test_e2e=E2E_TESTS)
    result = _run(pytester, "--fakegpu-topology", str(topology), "--fakegpu-keep-cluster", "-k",
                  "passes")
    result.assert_outcomes(passed=1, deselected=1)
    assert _calls(pytester) == [["status", "fakegpu-e2e"]]
    result.stdout.fnmatch_lines(["*cluster fakegpu-e2e reused*"])


def test_keep_cluster_refuses_a_running_cluster_that_does_not_match(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver, running="/elsewhere/other.yaml")
    pytester.makepyfile(test_e2e=E2E_TESTS)
    result = _run(pytester, "--fakegpu-topology", str(topology), "--fakegpu-keep-cluster")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*cannot be reused: its topology is /elsewhere/other.yaml*"])
    assert ["up", "fakegpu-e2e", str(topology), None] not in _calls(pytester)


def test_keep_cluster_refuses_a_running_cluster_of_another_driver(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    # issue 13: --fakegpu-driver nvidia never reuses a cluster whose plugins are fakegpu's.
    topology = pytester.path / "topo.yaml"
    _fake_setup(pytester, apiserver, running=str(topology))
    pytester.makepyfile(test_e2e=E2E_TESTS)
    result = _run(pytester, "--fakegpu-topology", str(topology), "--fakegpu-keep-cluster",
                  "--fakegpu-driver", "nvidia")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*cannot be reused: its driver is gpu.fakegpu.dev, "
                                 "not gpu.nvidia.com*"])


def test_keep_cluster_refuses_a_cluster_with_nodes_not_ready(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = pytester.path / "topo.yaml"
    _fake_setup(pytester, apiserver, running=str(topology))
    apiserver.nodes = ["node-0"]  # node-1 never registered
    pytester.makepyfile(test_e2e=E2E_TESTS)
    result = _run(pytester, "--fakegpu-topology", str(topology), "--fakegpu-keep-cluster")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*node(s) node-1 are not Ready*"])


def test_a_cluster_that_fails_to_come_up_errors_every_e2e_test(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver, fail_up=True)
    pytester.makepyfile(test_e2e=E2E_TESTS, test_unit=UNIT_TEST)
    result = _run(pytester, "--fakegpu-topology", str(topology))
    # An error, not a skip: the unit test still passes, the e2e tests do not pass quietly.
    result.assert_outcomes(passed=1, errors=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert [c[0] for c in _calls(pytester)] == ["up"]  # tried once for the whole session
    result.stdout.fnmatch_lines([
        "*kube-apiserver exited 1: boom*",
        "*last lines of output: etcd unreachable*",
        "*THE FAKEGPU E2E SUITE DID NOT RUN: NO CLUSTER*",
    ])


def test_bring_up_does_not_count_against_the_test_timeout(pytester: pytest.Pytester,
                                                          apiserver: FakeApiserver) -> None:
    # A cold `up` builds binaries for many minutes; pytest-timeout must not kill the first
    # e2e test for it. Here `up` takes 6s and each test may take 4s.
    topology = _fake_setup(pytester, apiserver, up_seconds=6)
    pytester.makepyfile(test_quick='''
import pytest

@pytest.mark.fakegpu
def test_quick(fakegpu_cluster):
    assert fakegpu_cluster.name == "fakegpu-e2e"
''')
    result = _run(pytester, "--fakegpu-topology", str(topology), "--timeout", "4")
    result.assert_outcomes(passed=1)


# --- skipping, only for a missing prerequisite, loudly -------------------------------------------


def test_kind_without_docker_skips_loudly(pytester: pytest.Pytester, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # No fake here: DOCKER_HOST names a socket nothing listens on, so for this run the Docker
    # daemon is truly unreachable (and `docker` may be absent altogether).
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    pytester.makepyfile(test_e2e=E2E_TESTS, test_unit=UNIT_TEST)
    result = _run(pytester, "--fakegpu-provider", "kind", "-ra")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "*!!! THE FAKEGPU E2E SUITE DID NOT RUN !!!*",
        "2 E2E TEST(S) SKIPPED. MISSING PREREQUISITE*the kind provider needs a reachable "
        "Docker daemon*",
        "*short test summary info*",
        "SKIPPED [[]1[]] test_e2e.py:*: MISSING PREREQUISITE for the fakegpu e2e suite "
        "(provider kind):*Docker*",
    ])


# --- diagnostics on failure ---------------------------------------------------------------------


def test_failing_e2e_test_gets_logs_events_and_pods(pytester: pytest.Pytester,
                                                     apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_e2e=E2E_TESTS)
    result = _run(pytester, "--fakegpu-topology", str(topology), "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1, passed=1)
    out = pytester.path / "reports" / "fakegpu-e2e" / "test_e2e.py_test_fails" / "call"
    logs = out / "logs"
    result.stdout.fnmatch_lines([
        "*deliberate failure*",
        "*- fakegpu: component logs -*",
        f"2 log file(s) of cluster fakegpu-e2e in {logs}:",
        f"  {logs / 'kube-apiserver.log'}",
        "*- fakegpu: events in namespace e2e-test-fails-* -*",
        "*Warning FailedScheduling Pod/greedy (x3): 0/2 nodes are available: 2 cannot "
        "allocate all claims.",
        "*- fakegpu: pods in namespace e2e-test-fails-* -*",
        "pod greedy: node=None phase=Pending",
        "  condition PodScheduled=False reason=Unschedulable message=cannot allocate all claims",
    ])
    assert (logs / "kubelet-node-0.log").read_text() == "kubelet-node-0 log line\n"
    assert "FailedScheduling" in (out / "events.txt").read_text()
    assert "pod greedy" in (out / "pods.txt").read_text()
    # Only the failing test gathered anything.
    assert [c[0] for c in _calls(pytester)].count("logs") == 1
    assert sorted(p.name for p in out.parent.parent.iterdir()) == ["test_e2e.py_test_fails"]
    # CI finds the diagnostics through the JUnit report.
    tree = ET.parse(pytester.path / "junit.xml")
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    # The first e2e test of a cluster also carries its bring-up (make test's cost table).
    assert str(props.pop("fakegpu_bringup", "")).startswith("fakegpu-e2e="), props
    assert props == {"fakegpu_diagnostics": str(out)}


def test_cluster_name_the_providers_refuse_is_a_usage_error(pytester: pytest.Pytester) -> None:
    # 21 characters: once accepted here (up to 40) and then refused by every provider at
    # bring-up, failing each e2e test; one rule (fakegpu.cluster.names) now decides both.
    result = pytester.runpytest("--fakegpu-cluster-name", "a" * 21)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--fakegpu-cluster-name: '{'a' * 21}' must be 1-20 lowercase*"])
    pytester.makepyfile(UNIT_TEST)
    ok = pytester.runpytest("--fakegpu-cluster-name", "a" * 20)
    ok.assert_outcomes(passed=1)


# --- suites with a topology of their own ----------------------------------------------------------

OWN_TOPOLOGY_TESTS = '''
import pytest

pytestmark = [pytest.mark.fakegpu, pytest.mark.topology("mig.yaml")]


def test_mig_first(fakegpu_cluster, fakegpu_topology_path):
    assert fakegpu_cluster.topology == fakegpu_topology_path("mig.yaml")
    assert fakegpu_cluster.name == "ci-mig"


def test_mig_second(fakegpu_cluster, fakegpu_core_v1, fakegpu_namespace):
    assert fakegpu_cluster.name == "ci-mig"
'''

DEFAULT_TOPOLOGY_TESTS = '''
import pytest

pytestmark = pytest.mark.fakegpu


def test_default(fakegpu_cluster):
    assert fakegpu_cluster.name == "ci"
'''

TOPOLOGY_PATH_CONFTEST = '''

@pytest.fixture
def fakegpu_topology_path(request):
    return lambda name: (request.config.rootpath / name).resolve()
'''


def test_a_suites_own_topology_gets_its_own_cluster_after_the_others(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    (pytester.path / "conftest.py").write_text(
        (pytester.path / "conftest.py").read_text() + TOPOLOGY_PATH_CONFTEST)
    (pytester.path / "mig.yaml").write_text("name: mig\n")
    # Collected first (a_), but run after the session's own topology's suites.
    pytester.makepyfile(test_a_mig=OWN_TOPOLOGY_TESTS, test_b_default=DEFAULT_TOPOLOGY_TESTS,
                        test_c_unit=UNIT_TEST)
    result = _run(pytester, "--fakegpu-topology", str(topology), "--fakegpu-cluster-name", "ci",
                  "-v")
    result.assert_outcomes(passed=4)
    mig = str((pytester.path / "mig.yaml").resolve())
    # One cluster at a time: the default one goes down before the suite's own comes up.
    assert _calls(pytester) == [["up", "ci", str(topology), None], ["down", "ci"],
                                ["up", "ci-mig", mig, None], ["down", "ci-mig"]]
    result.stdout.fnmatch_lines(["*test_b_default.py::test_default PASSED*",
                                 "*test_a_mig.py::test_mig_first PASSED*",
                                 "*test_a_mig.py::test_mig_second PASSED*"])
    result.stdout.fnmatch_lines(["*cluster ci brought up*", "*cluster ci-mig brought up*"])


def test_a_topology_marker_on_a_single_test_is_a_usage_error(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_e2e='''
import pytest

@pytest.mark.fakegpu
@pytest.mark.topology("other.yaml")
def test_one(fakegpu_cluster):
    pass
''')
    result = _run(pytester, "--fakegpu-topology", str(topology))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_one: put the topology marker on the module*"])
    assert _calls(pytester) == []


# --- pytest-xdist: one cluster per topology for all workers, serial tests alone ----------------

XDIST_E2E_TESTS = '''
import pytest

pytestmark = pytest.mark.fakegpu


@pytest.mark.parametrize("n", range(4))
def test_parallel(fakegpu_cluster, fakegpu_namespace, n):
    assert fakegpu_cluster.name == "ci"
'''


def test_xdist_workers_share_one_bring_up_and_the_controller_summarises(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver, up_seconds=2)
    pytester.makepyfile(test_a=XDIST_E2E_TESTS, test_b=XDIST_E2E_TESTS)
    result = _run(pytester, "-n", "2", "--fakegpu-topology", str(topology),
                  "--fakegpu-cluster-name", "ci")
    result.assert_outcomes(passed=8)
    kinds = [c[0] for c in _calls(pytester)]
    # The first worker brought it up, the other found it running; the last one took it down.
    assert (kinds.count("up"), kinds.count("down")) == (1, 1)
    assert kinds[-1] == "down"
    assert len(apiserver.deleted) == 8 and not apiserver.namespaces
    result.stdout.fnmatch_lines(["*fakegpu e2e: cluster ci brought up (embedded, "
                                 "Kubernetes 1.37.2, 2 nodes)*"])
    assert result.stdout.str().count("fakegpu e2e: cluster ci brought up") == 1


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_cluster_that_fails_to_come_up_did_not_run_with_and_without_xdist(
        pytester: pytest.Pytester, apiserver: FakeApiserver, workers: str) -> None:
    topology = _fake_setup(pytester, apiserver, fail_up=True)
    pytester.makepyfile(test_a=XDIST_E2E_TESTS, test_unit=UNIT_TEST)
    result = _run(pytester, "-n", workers, "--fakegpu-topology", str(topology),
                  "--fakegpu-cluster-name", "ci")
    result.assert_outcomes(passed=1, errors=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert [c[0] for c in _calls(pytester)] == ["up"]  # tried once, whatever the workers
    result.stdout.fnmatch_lines(["*THE FAKEGPU E2E SUITE DID NOT RUN: NO CLUSTER*",
                                 "*kube-apiserver exited 1: boom*"])
    assert result.stdout.str().count("DID NOT RUN") == 1


def test_a_missing_prerequisite_says_did_not_run_on_the_xdist_controller(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    (pytester.path / "conftest.py").write_text(
        (pytester.path / "conftest.py").read_text() + """
def pytest_sessionstart(session):
    _patches.setattr(prereq, "missing_prerequisites", lambda provider, facts: ["no docker"])
""")
    pytester.makepyfile(test_a=XDIST_E2E_TESTS)
    result = _run(pytester, "-n", "2", "--fakegpu-topology", str(topology))
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(["*THE FAKEGPU E2E SUITE DID NOT RUN*",
                                 "*4 E2E TEST(S) SKIPPED. MISSING PREREQUISITE*no docker*"])
    assert _calls(pytester) == []


def test_xdist_keep_cluster_leaves_it_up(pytester: pytest.Pytester,
                                         apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_a=XDIST_E2E_TESTS)
    result = _run(pytester, "-n", "2", "--fakegpu-topology", str(topology),
                  "--fakegpu-cluster-name", "ci",
                  "--fakegpu-keep-cluster")
    result.assert_outcomes(passed=4)
    kinds = [c[0] for c in _calls(pytester)]
    assert kinds.count("up") == 1 and "down" not in kinds
    result.stdout.fnmatch_lines(["*cluster ci left running (--fakegpu-keep-cluster)*"])


SERIAL_TESTS = '''
import os
import time

import pytest

pytestmark = pytest.mark.fakegpu
EVENTS = os.path.join(os.path.dirname(__file__), "events.log")


def note(what):
    with open(EVENTS, "a") as f:  # one short append per line: whole lines, any order
        f.write(what + "\\n")


def hold(name):
    note("start " + name)
    time.sleep(0.3)  # long enough that an unlocked neighbour would overlap
    note("end " + name)


@pytest.mark.serial
def test_serial_first(fakegpu_cluster):
    hold("serial_first")


@pytest.mark.parametrize("n", range(6))
def test_parallel(fakegpu_cluster, n):
    hold(f"parallel{n}")


@pytest.mark.serial
def test_serial_second(fakegpu_cluster):
    hold("serial_second")
'''


def _open_at_each_start(events: list[str]) -> dict[str, set[str]]:
    """For each test, the tests that were running when it started or ran while it did."""
    running: set[str] = set()
    beside: dict[str, set[str]] = {}
    for line in events:
        what, name = line.split()
        if what == "start":
            beside[name] = set(running)
            for other in running:
                beside[other].add(name)
            running.add(name)
        else:
            running.discard(name)
    return beside


def test_serial_tests_run_alone_across_xdist_workers(pytester: pytest.Pytester,
                                                     apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    pytester.makepyfile(test_serial=SERIAL_TESTS)
    result = _run(pytester, "-n", "3", "--strict-markers", "--fakegpu-topology", str(topology))
    result.assert_outcomes(passed=8)
    events = (pytester.path / "events.log").read_text().splitlines()
    assert len(events) == 16
    beside = _open_at_each_start(events)
    assert beside["serial_first"] == set() and beside["serial_second"] == set(), events


def test_serial_marker_is_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest

@pytest.mark.serial
def test_alone():
    pass
''')
    result = pytester.runpytest("--strict-markers")
    result.assert_outcomes(passed=1)
    assert "serial: an e2e test that must run alone" in pytester.runpytest(
        "--markers").stdout.str()


def test_xdist_topologies_each_come_up_once_and_go_down(
        pytester: pytest.Pytester, apiserver: FakeApiserver) -> None:
    topology = _fake_setup(pytester, apiserver)
    (pytester.path / "conftest.py").write_text(
        (pytester.path / "conftest.py").read_text() + TOPOLOGY_PATH_CONFTEST)
    (pytester.path / "mig.yaml").write_text("name: mig\n")
    pytester.makepyfile(test_a_mig=OWN_TOPOLOGY_TESTS, test_b_default=DEFAULT_TOPOLOGY_TESTS,
                        test_c_unit=UNIT_TEST)
    result = _run(pytester, "-n", "2", "--fakegpu-topology", str(topology),
                  "--fakegpu-cluster-name", "ci")
    result.assert_outcomes(passed=4)
    ups = sorted(c[1] for c in _calls(pytester) if c[0] == "up")
    downs = sorted(c[1] for c in _calls(pytester) if c[0] == "down")
    assert ups == downs == ["ci", "ci-mig"]
    result.stdout.fnmatch_lines(["*cluster ci brought up*", "*cluster ci-mig brought up*"])
