"""pytest plugin (entry point ``pytest11``): markers, options, hooks and cluster fixtures.

Thin on purpose: the session's cluster policy (bring-up, sharing between xdist workers, serial
tests, summaries, diagnostics) is ``fakegpu.testkit.session``; the helpers the tests use are
the rest of ``fakegpu.testkit`` (usable without pytest). What lives here is the wiring: options
with typed parsing, markers, the order of the tests, and the fixtures.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fakegpu import drivers
from fakegpu.cluster import PROVIDERS
from fakegpu.errors import InvalidInput
from fakegpu.testkit.options import Options
from fakegpu.testkit.session import (
    FAKEGPU_MARKER,
    NAMESPACE,
    E2ESession,
    claimed,
    is_serial,
    run_protocol,
    wants_cluster,
)
from fakegpu.testkit.workers import Coordination
from fakegpu.topology import packaged

if TYPE_CHECKING:
    from kubernetes import client as kclient

    from fakegpu.cluster.provider import ClusterInfo
    from fakegpu.testkit.dra import ResourceApi
    from fakegpu.testkit.nvml import FakeNvml
    from fakegpu.topology.model import Topology

MARKER_HELP = (f"{FAKEGPU_MARKER}: a test on a fakegpu cluster (the cluster comes up for it; "
               "the plugin claims no other test)")
TOPOLOGY_MARKER = "topology"
TOPOLOGY_MARKER_HELP = ("topology(name or file): the e2e suite (module) needs a cluster of this "
                        "topology (a packaged name, or a path relative to the rootdir) instead "
                        "of --fakegpu-topology's")
SERIAL_MARKER_HELP = ("serial: an e2e test that must run alone on its cluster (it holds whole "
                      "nodes or GPUs, taints a pool, stops nodes or replaces plugins); with "
                      "pytest-xdist the others wait while it runs (docs/testing.md)")
DEFAULT_CLUSTER_NAME = "fakegpu-e2e"
# xdist: the workerinput key of the directory the workers coordinate in (testkit.workers).
COORDINATION_KEY = "fakegpu_coordination"


# --- options --------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakegpu", "fakegpu end-to-end cluster")
    group.addoption("--fakegpu-provider", dest="fakegpu_provider", choices=PROVIDERS,
                    default="embedded",
                    help="cluster provider for e2e tests (default: embedded)")
    group.addoption("--fakegpu-k8s-version", dest="fakegpu_k8s_version", default=None,
                    metavar="VERSION",
                    help="Kubernetes release, e.g. 1.34 or 1.37.2 (default: newest GA)")
    group.addoption("--fakegpu-topology", dest="fakegpu_topology", default=None,
                    metavar="NAME|FILE",
                    help="the e2e cluster's topology: a packaged name (fakegpu topology list) "
                         f"or a YAML file (default: {packaged.DEFAULT})")
    group.addoption("--fakegpu-keep-cluster", dest="fakegpu_keep_cluster", action="store_true",
                    default=False,
                    help="leave the e2e cluster running after the session, and reuse a running "
                         "healthy cluster of the same name")
    group.addoption("--fakegpu-driver", dest="fakegpu_driver", choices=("fakegpu", "nvidia"),
                    default="fakegpu",
                    help="fakegpu: the plugin as gpu.fakegpu.dev; nvidia: NVIDIA-compatible "
                         "(gpu.nvidia.com, NVIDIA's DeviceClasses) (default: fakegpu)")
    group.addoption("--fakegpu-nic-driver", dest="fakegpu_nic_driver",
                    choices=tuple(drivers.NIC_CHOICES), default=drivers.NIC_DEFAULT_KEY,
                    help=f"the clusters' NIC plugin: fakegpu ({drivers.NIC}); dranet "
                         f"({drivers.DRANET}, DRANET's names and attributes); none (no NIC "
                         "plugin; the NIC suites skip) (default: fakegpu)")
    group.addoption("--fakegpu-image-alias", dest="fakegpu_image_alias", action="append",
                    default=[], metavar="NAME:TAG",
                    help="also name the workload image NAME:TAG on the cluster's nodes "
                         "(repeatable; e.g. ubuntu:22.04 for manifests written for real "
                         "clusters, e2e/nvidia/)")
    group.addoption("--fakegpu-nvidia-plugin-bin", dest="fakegpu_nvidia_plugin_bin",
                    default=None, metavar="PATH",
                    help="NVIDIA's gpu-kubelet-plugin, built from NVIDIA/k8s-dra-driver-gpu: "
                         "e2e/test_nvidia_driver.py runs it on a cluster of its own "
                         "(skipped without it; docs/nvidia-driver.md)")
    group.addoption("--fakegpu-cluster-name", dest="fakegpu_cluster_name",
                    default=DEFAULT_CLUSTER_NAME, metavar="NAME",
                    help=f"name of the e2e cluster (default: {DEFAULT_CLUSTER_NAME})")
    # The conformance suite (fakegpu.conformance): here, because pytest reads options only
    # from plugins and the rootdir's conftest, and the suite runs from an installed package.
    conf = parser.getgroup("fakegpu-conformance", "fakegpu DRA driver conformance")
    for name, metavar, text in CONFORMANCE_OPTIONS:
        conf.addoption(f"--fakegpu-conformance-{name}",
                       dest="fakegpu_conformance_" + name.replace("-", "_"), default=None,
                       metavar=metavar, help=text)


CONFORMANCE_OPTIONS = (
    ("kubeconfig", "FILE", "run fakegpu.conformance against this cluster (default: the fakegpu "
                           "e2e session's cluster and fakegpu's plugin)"),
    ("driver", "NAME", "the DRA driver under test (with --fakegpu-conformance-kubeconfig)"),
    ("device-class", "CLASS", "a DeviceClass of the driver's devices"),
    ("capabilities", "FILE", "what the driver declares it supports (YAML)"),
    ("image", "IMAGE", "workload image with sh, env and sleep (default: busybox, or the fakegpu "
                       "cluster's own)"),
    ("report", "DIR", "write the markdown report (conformance.md) here"),
)


PROVIDER_MARKER_HELP = ("provider(name): an e2e test of what only that cluster provider installs; "
                        "deselected (not skipped) when the session runs another provider")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.addinivalue_line("markers", PROVIDER_MARKER_HELP)
    config.addinivalue_line("markers", TOPOLOGY_MARKER_HELP)
    config.addinivalue_line("markers", SERIAL_MARKER_HELP)
    options = Options.from_config(config)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None and COORDINATION_KEY in workerinput:
        session = E2ESession(config, options, Coordination(
            Path(workerinput[COORDINATION_KEY]), str(workerinput["workerid"]),
            int(workerinput["workercount"])))
    elif workerinput is None and _distributing(config):
        # The xdist controller runs no test: it hands the workers a shared directory, downs
        # what they left up and prints their summaries.
        directory = Path(tempfile.mkdtemp(prefix="fakegpu-xdist-"))
        session = E2ESession(config, options, Coordination(directory, "controller", 0),
                             controller=True)
        config.pluginmanager.register(_Controller(session), "fakegpu-e2e-controller")
    else:
        session = E2ESession(config, options)
    config.stash[_SESSION] = session
    config.pluginmanager.register(_Hooks(session), "fakegpu-e2e-session")


def _distributing(config: pytest.Config) -> bool:
    """xdist's own test: workers will run the tests (``--dist`` alone, or ``-n 0``, starts none)."""
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect provider-specific tests of another provider: they are run by that provider's
    pass (``make test`` runs both), so reporting them as skipped here would only be noise."""
    provider = str(config.getoption("fakegpu_provider"))
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("provider") if claimed(item) else None
        (drop if marker is not None and provider not in marker.args else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # Tests of one topology run together (the session's own first), so each cluster comes up
    # once; the sort is stable, so the order within a topology is the collection order. With
    # xdist the serial tests of a topology go last: the other workers meanwhile run the parallel
    # tests of the next topology instead of waiting for their turn.
    session = _session(config)
    default = session.options.topology
    # Another project's tests keep their place among the default topology's: their markers
    # (``topology``, ``serial``) may mean something else there.
    first_seen: dict[Path, int] = {default: 0}
    ranked: dict[str, tuple[int, bool]] = {}
    workers = session.coordination is not None
    for item in items:
        ours = claimed(item)
        topology = item_topology(config, item) if ours else default
        rank = first_seen.setdefault(topology, len(first_seen))
        ranked[item.nodeid] = (rank, workers and ours and is_serial(item))
    session.ranks = first_seen
    if len(first_seen) > 1 or workers:
        items.sort(key=lambda item: ranked[item.nodeid])


# --- the hooks of the session --------------------------------------------------------------------


class _Hooks:
    """The hooks every process of the session has (the xdist controller's run no test)."""

    def __init__(self, session: E2ESession) -> None:
        self.session = session

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After deselection (-m, -k): count only what will run.
        collected: dict[Path, int] = {}
        for item in session.items:
            if wants_cluster(item):
                topology = item_topology(self.session.config, item)
                collected[topology] = collected.get(topology, 0) + 1
        self.session.e2e_collected = collected

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, object, object]:
        return (yield from run_protocol(self.session, item,
                                        item_topology(self.session.config, item)))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.failed and wants_cluster(item):
            self.session.attach_diagnostics(item, report,
                                            item_topology(self.session.config, item))
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.session.finish()
        workeroutput: dict[str, Any] | None = getattr(self.session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["fakegpu"] = self.session.worker_output()
        if self.session.teardown_error is not None:
            # A cluster left behind breaks the next run: the session must not pass.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.session.terminal_summary(terminalreporter)


class _Controller:
    """xdist's controller: the coordination directory to each worker, their summaries back."""

    def __init__(self, session: E2ESession) -> None:
        self.session = session

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        assert self.session.coordination is not None
        node.workerinput[COORDINATION_KEY] = str(self.session.coordination.dir)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", {}).get("fakegpu")
        if output is not None:
            self.session.merge_worker_output(output)


def item_topology(config: pytest.Config, item: pytest.Item) -> Path:
    """The topology whose cluster ``item`` runs on: its module's ``topology`` marker, else
    --fakegpu-topology's. The marker belongs on the module (``pytestmark``): the cluster fixtures
    are module-scoped, so a test cannot have another topology than its module."""
    module = item.getparent(pytest.Module)
    marker = (module or item).get_closest_marker(TOPOLOGY_MARKER)
    own = item.get_closest_marker(TOPOLOGY_MARKER)
    if own is not None and own is not marker and own.args != getattr(marker, "args", None):
        raise pytest.UsageError(f"{item.nodeid}: put the topology marker on the module "
                                "(pytestmark), not on a test or class")
    if marker is None:
        return _session(config).options.topology
    if len(marker.args) != 1 or not isinstance(marker.args[0], str | Path):
        raise pytest.UsageError(f"{item.nodeid}: topology marker: expected one packaged name "
                                f"or file path, got {marker.args!r}")
    return _marker_topology(config, marker.args[0])


def _marker_topology(config: pytest.Config, given: str | Path) -> Path:
    """A topology marker's argument: a packaged name, or a path relative to the rootdir."""
    try:
        return packaged.resolve_topology(given, base=config.rootpath).resolve()
    except InvalidInput as err:
        raise pytest.UsageError(f"topology marker: {err}") from None


_SESSION = pytest.StashKey[E2ESession]()


def _session(config: pytest.Config) -> E2ESession:
    return config.stash[_SESSION]


# --- fixtures -------------------------------------------------------------------------------


def _node_topology(request: pytest.FixtureRequest) -> Path:
    node = request.node
    if isinstance(node, pytest.Item):
        return item_topology(request.config, node)
    marker = node.get_closest_marker(TOPOLOGY_MARKER)
    if marker is None or not marker.args:
        return _session(request.config).options.topology
    return _marker_topology(request.config, str(marker.args[0]))


@pytest.fixture(scope="module")
def fakegpu_cluster(request: pytest.FixtureRequest) -> ClusterInfo:
    """The cluster of the module's topology (brought up on first use, down when another
    topology's tests start or at the end, unless --fakegpu-keep-cluster)."""
    outcome = _session(request.config).ensure(_node_topology(request))
    if outcome.skip is not None:
        pytest.skip(outcome.skip)
    if outcome.error is not None:
        pytest.fail(outcome.error, pytrace=False)
    assert outcome.info is not None
    return outcome.info


@pytest.fixture(autouse=True)
def _fakegpu_e2e_requires_cluster(request: pytest.FixtureRequest) -> None:
    # Every fakegpu test gets the cluster (and so its skip or error), even one that asks only
    # for, say, `fakegpu_core_v1`: no such test runs against nothing.
    if request.node.get_closest_marker(FAKEGPU_MARKER) is not None:
        request.getfixturevalue("fakegpu_cluster")


@pytest.fixture(scope="module")
def fakegpu_topology(fakegpu_cluster: ClusterInfo) -> Topology:
    """The cluster's topology model (what the hardware is meant to be)."""
    from fakegpu.topology.load import load_topology

    return load_topology(fakegpu_cluster.topology)


@pytest.fixture(scope="module")
def fakegpu_k8s_client(fakegpu_cluster: ClusterInfo) -> Iterator[Any]:
    """A kubernetes ApiClient for the cluster (from its kubeconfig)."""
    from fakegpu.testkit import k8s

    api = k8s.new_api_client(fakegpu_cluster.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="module")
def fakegpu_core_v1(fakegpu_k8s_client: Any) -> kclient.CoreV1Api:
    from kubernetes import client as kclient

    return kclient.CoreV1Api(fakegpu_k8s_client)


@pytest.fixture(scope="module")
def fakegpu_resource_api(fakegpu_k8s_client: Any) -> ResourceApi:
    """resource.k8s.io at the version the apiserver serves (v1 on 1.34+)."""
    from fakegpu.testkit.dra import ResourceApi

    return ResourceApi(fakegpu_k8s_client)


@pytest.fixture
def fakegpu_namespace(request: pytest.FixtureRequest, fakegpu_core_v1: kclient.CoreV1Api
                      ) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards; the next test starts once its pods
    and claims are gone (``k8s.delete_namespace``)."""
    from fakegpu.testkit import k8s

    # The test's name in the namespace's makes events and leftovers easy to trace back.
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = k8s.create_namespace(fakegpu_core_v1, prefix=f"e2e-{base}" if base else "e2e",
                                labels={"fakegpu.dev/test": "e2e"})
    request.node.stash[NAMESPACE] = name
    yield name
    k8s.delete_namespace(fakegpu_core_v1, name)


# --- without a cluster ------------------------------------------------------------------------


@pytest.fixture
def fakegpu_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> Iterator[Callable[..., FakeNvml]]:
    """Fake GPUs for code that calls NVML in this process: ``fakegpu_nvml("dgx-h100")`` (a
    fixture's name or a topology file; ``node=`` for a topology of several nodes) renders the
    node's state into tmp_path, loads the fake library (pynvml then finds it), sets the
    environment the library reads, and returns a ``FakeNvml`` (``.state_dir``, ``.env`` for
    subprocesses, ``.inject(fault, gpu=...)``, ``.clear()``). A second call switches the
    process to that node (call ``nvmlInit`` after it). Afterwards every ``nvmlInit`` the test
    left open is shut down, and the environment restored."""
    from fakegpu.errors import FakegpuError
    from fakegpu.testkit import nvml

    opened: list[FakeNvml] = []

    def make(topology: str | Path, node: str | None = None) -> FakeNvml:
        problem: str | None = None
        try:
            fake = nvml.open_node(topology, node, tmp_path / "fakegpu-nvml" / str(len(opened)))
        except FakegpuError as err:
            problem = str(err)
        if problem is not None:  # outside the except: one line, no chained exception
            pytest.fail(f"fakegpu_nvml: {problem}", pytrace=False)
        opened.append(fake)
        for key, value in fake.env.items():
            monkeypatch.setenv(key, value)
        return fake

    yield make
    nvml.shutdown_all()
