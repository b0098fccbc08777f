"""pytest plugin (entry point ``pytest11``): the ``e2e`` marker, options and cluster fixtures.

Thin on purpose: the work is in ``fakegpu.testkit`` (usable without pytest) and in the cluster
providers. What lives here is pytest policy:

- one cluster per session and topology, brought up only when an e2e test is about to run,
  before the pytest-timeout timer of that test starts (a cold build of the binaries takes many
  minutes); a suite that needs its own hardware names it with ``pytest.mark.topology(FILE)``,
  its tests run after the others of the session, on a cluster of their own (one at a time: the
  previous one goes down first, unless --keep-cluster);
- e2e tests skip only when a host prerequisite is truly missing (``testkit.prereq``), and the
  terminal summary then says in capitals that the suite did not run; any other failure to bring
  the cluster up is an error of every e2e test;
- a failing e2e test gets the cluster's component logs, its namespace's events and pod
  descriptions attached to its report (and written under ``<rootdir>/reports/fakegpu-e2e``).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fakegpu import paths
from fakegpu.testkit import prereq

if TYPE_CHECKING:
    from kubernetes import client as kclient

    from fakegpu.cluster.provider import ClusterInfo, Clusters
    from fakegpu.testkit.dra import ResourceApi
    from fakegpu.topology.model import Topology

E2E_MARKER = "e2e"
MARKER_HELP = "e2e: end-to-end tests against a real Kubernetes cluster (fakegpu cluster)"
TOPOLOGY_MARKER = "topology"
TOPOLOGY_MARKER_HELP = ("topology(file): the e2e suite (module) needs a cluster of this topology "
                        "(path relative to the rootdir) instead of --topology's")
DEFAULT_CLUSTER_NAME = "fakegpu-e2e"
REPORTS_SUBDIR = Path("reports") / "fakegpu-e2e"


# --- options --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    provider: str
    k8s_version: str | None  # as given (None: the provider's default); validated
    topology: Path
    keep_cluster: bool
    cluster_name: str
    reports_dir: Path
    driver: str = "fakegpu"  # fakegpu.cluster.DRIVERS: who the plugins of the cluster are
    image_aliases: tuple[str, ...] = ()  # normalized names the workload image also gets

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        """Read and validate the fakegpu options; a bad value raises pytest.UsageError."""
        provider = str(config.getoption("fakegpu_provider"))
        version = config.getoption("k8s_version")
        if version is not None:
            from fakegpu.cluster.artifacts import binaries
            from fakegpu.errors import FakegpuError

            try:
                binaries.resolve_version(str(version))
            except FakegpuError as err:
                raise pytest.UsageError(f"--k8s-version: {err}") from err
        given = config.getoption("fakegpu_topology")
        if given is None:
            # The default is checked when a cluster is needed, not here: a run without e2e
            # tests (or an installed fakegpu without the source tree) must not fail over it.
            topology = paths.default_topology()
        else:
            topology = (config.invocation_params.dir / str(given)).resolve()
            if not topology.is_file():
                raise pytest.UsageError(f"--topology: {given}: no such file")
        name = str(config.getoption("cluster_name"))
        from fakegpu.cluster.names import RULE, validate_name
        from fakegpu.errors import InvalidInput

        try:
            validate_name(name)  # the providers' own rule: a name they refuse fails here
        except InvalidInput:
            raise pytest.UsageError(f"--cluster-name: {name!r} must be {RULE}") from None
        from fakegpu.cluster import imagealiases

        try:
            aliases = tuple(imagealiases.normalize_all(
                config.getoption("fakegpu_image_alias") or ()))
        except InvalidInput as err:
            raise pytest.UsageError(f"--fakegpu-image-alias: {err}") from None
        return cls(provider=provider, k8s_version=None if version is None else str(version),
                   topology=topology, keep_cluster=bool(config.getoption("keep_cluster")),
                   cluster_name=name, reports_dir=config.rootpath / REPORTS_SUBDIR,
                   driver=str(config.getoption("fakegpu_driver")), image_aliases=aliases)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakegpu", "fakegpu end-to-end cluster")
    group.addoption("--fakegpu-provider", dest="fakegpu_provider", choices=prereq.PROVIDERS,
                    default="embedded",
                    help="cluster provider for e2e tests (default: embedded)")
    group.addoption("--k8s-version", dest="k8s_version", default=None, metavar="VERSION",
                    help="Kubernetes release, e.g. 1.34 or 1.37.2 (default: newest supported)")
    group.addoption("--topology", dest="fakegpu_topology", default=None, metavar="FILE",
                    help="topology YAML of the e2e cluster "
                         f"(default: fixtures/{paths.DEFAULT_TOPOLOGY})")
    group.addoption("--keep-cluster", dest="keep_cluster", action="store_true", default=False,
                    help="leave the e2e cluster running after the session, and reuse a running "
                         "healthy cluster of the same name")
    group.addoption("--fakegpu-driver", dest="fakegpu_driver", choices=("fakegpu", "nvidia"),
                    default="fakegpu",
                    help="fakegpu: the plugin as gpu.fakegpu.dev; nvidia: NVIDIA-compatible "
                         "(gpu.nvidia.com, NVIDIA's DeviceClasses) (default: fakegpu)")
    group.addoption("--fakegpu-image-alias", dest="fakegpu_image_alias", action="append",
                    default=[], metavar="NAME:TAG",
                    help="also name the workload image NAME:TAG on the cluster's nodes "
                         "(repeatable; e.g. ubuntu:22.04 for manifests written for real "
                         "clusters, e2e/nvidia/)")
    group.addoption("--nvidia-plugin-bin", dest="nvidia_plugin_bin", default=None,
                    metavar="PATH",
                    help="NVIDIA's gpu-kubelet-plugin, built from NVIDIA/k8s-dra-driver-gpu: "
                         "e2e/test_nvidia_driver.py runs it on a cluster of its own "
                         "(skipped without it; docs/nvidia-driver.md)")
    group.addoption("--cluster-name", dest="cluster_name", default=DEFAULT_CLUSTER_NAME,
                    metavar="NAME",
                    help=f"name of the e2e cluster (default: {DEFAULT_CLUSTER_NAME})")
    # The conformance suite (fakegpu.conformance): here, because pytest reads options only
    # from plugins and the rootdir's conftest, and the suite runs from an installed package.
    conf = parser.getgroup("fakegpu-conformance", "fakegpu DRA driver conformance")
    conf.addoption("--conformance-kubeconfig", dest="conformance_kubeconfig", default=None,
                   metavar="FILE", help="run fakegpu.conformance against this cluster (default: "
                   "the fakegpu e2e session's cluster and fakegpu's plugin)")
    conf.addoption("--conformance-driver", dest="conformance_driver", default=None,
                   metavar="NAME", help="the DRA driver under test (with --conformance-kubeconfig)")
    conf.addoption("--conformance-device-class", dest="conformance_device_class", default=None,
                   metavar="CLASS", help="a DeviceClass of the driver's devices")
    conf.addoption("--conformance-capabilities", dest="conformance_capabilities", default=None,
                   metavar="FILE", help="what the driver declares it supports (YAML)")
    conf.addoption("--conformance-image", dest="conformance_image", default=None,
                   metavar="IMAGE", help="workload image with sh, env and sleep (default: "
                   "busybox, or the fakegpu cluster's own)")
    conf.addoption("--conformance-report", dest="conformance_report", default=None,
                   metavar="DIR", help="write the markdown report (conformance.md) here")


PROVIDER_MARKER_HELP = ("provider(name): an e2e test of what only that cluster provider installs; "
                        "deselected (not skipped) when the session runs another provider")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.addinivalue_line("markers", PROVIDER_MARKER_HELP)
    config.addinivalue_line("markers", TOPOLOGY_MARKER_HELP)
    session = E2ESession(config, Options.from_config(config))
    config.stash[_SESSION] = session
    config.pluginmanager.register(session, "fakegpu-e2e-session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect provider-specific tests of another provider: they are run by that provider's
    pass (``make test`` runs both), so reporting them as skipped here would only be noise."""
    provider = str(config.getoption("fakegpu_provider"))
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("provider")
        (drop if marker is not None and provider not in marker.args else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # Tests of one topology run together (the session's own first), so each cluster comes up
    # once; the sort is stable, so the order within a topology is the collection order.
    default = _session(config).options.topology
    first_seen: dict[Path, int] = {}
    for item in items:
        topology = item_topology(config, item)
        first_seen.setdefault(topology, 0 if topology == default else len(first_seen) + 1)
    if len(first_seen) > 1:
        items.sort(key=lambda item: first_seen[item_topology(config, item)])


# --- the cluster of the session ----------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What bringing up the session's cluster gave: a cluster, a skip, or an error."""

    info: ClusterInfo | None = None
    skip: str | None = None
    error: str | None = None
    reused: bool = False


class E2ESession:
    """Per-pytest-session state: the options, the cluster, and the hooks that use them."""

    def __init__(self, config: pytest.Config, options: Options) -> None:
        self.config = config
        self.options = options
        # One outcome per topology, in the order they were brought up; `current` is the one
        # whose cluster may be running now (only one at a time: a 2-core host holds one).
        self.outcomes: dict[Path, Outcome] = {}
        self.current: Path | None = None
        self.provider: Clusters | None = None
        self.e2e_collected: dict[Path, int] = {}
        self.teardown_errors: list[str] = []

    @property
    def outcome(self) -> Outcome | None:
        """The outcome of the session's own topology (--topology), if it was needed."""
        return self.outcomes.get(self.options.topology)

    @property
    def teardown_error(self) -> str | None:
        return "; ".join(self.teardown_errors) or None

    def cluster_name(self, topology: Path) -> str:
        """--cluster-name for the session's topology; for a suite's own one, that name plus the
        file's stem, cut to the providers' length limit."""
        base = self.options.cluster_name
        if topology == self.options.topology:
            return base
        from fakegpu.cluster.names import MAX_LENGTH

        stem = re.sub(r"[^a-z0-9-]+", "-", topology.stem.lower())
        return f"{base}-{stem}"[:MAX_LENGTH].strip("-")

    # -- bringing up and down --

    def ensure(self, topology: Path | None = None) -> Outcome:
        """Bring up the cluster of ``topology`` (default: --topology's) on first use, after
        bringing down the one of another topology; later calls return the same outcome."""
        topology = self.options.topology if topology is None else topology
        outcome = self.outcomes.get(topology)
        if outcome is None or (outcome.info is not None and self.current != topology):
            capman = self.config.pluginmanager.getplugin("capturemanager")
            # Live output: a cold build of the binaries takes many minutes and must show progress.
            if capman is not None:
                with capman.global_and_fixture_disabled():
                    outcome = self._switch_to(topology)
            else:
                outcome = self._switch_to(topology)
        return outcome

    def _switch_to(self, topology: Path) -> Outcome:
        if self.current is not None and self.current != topology:
            self._down(self.current)
        outcome = self._bring_up(topology)
        self.outcomes[topology] = outcome
        self.current = topology if outcome.info is not None else None
        return outcome

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(line, bold=True)

    def _bring_up(self, topology: Path) -> Outcome:
        opts = self.options
        name = self.cluster_name(topology)
        try:
            facts = prereq.probe_host(opts.provider, opts.k8s_version)
            missing = prereq.missing_prerequisites(opts.provider, facts)
        except Exception as err:  # a probe that breaks is a bug to see, not a reason to skip
            return Outcome(error=f"checking the host prerequisites failed: {_describe(err)}")
        if missing:
            return Outcome(skip=f"MISSING PREREQUISITE for the fakegpu e2e suite "
                                f"(provider {opts.provider}): " + "; ".join(missing))
        from fakegpu import cluster

        try:
            provider = cluster.get_provider(opts.provider)
            self.provider = provider
            if opts.keep_cluster:
                running = provider.status(name)
                if running is not None:
                    problems = reuse_problems(running, opts, topology)
                    if problems:
                        return Outcome(error=(
                            f"cluster {name} is running but cannot be reused: "
                            + "; ".join(problems)
                            + f" (remove it with `{provider.down_command(name)}`)"))
                    self._say(f"fakegpu: reusing running cluster {name} "
                              f"(--keep-cluster)")
                    provider.tag_images(name, opts.image_aliases)
                    return Outcome(info=running, reused=True)
            if not topology.is_file():
                return Outcome(error=f"topology {topology} does not exist")
            self._say(f"fakegpu: bringing up cluster {name} ({opts.provider}, "
                      f"topology {topology.name}, Kubernetes "
                      f"{opts.k8s_version or 'newest supported'}); the first run builds the "
                      "binaries, which takes a long time")
            info = provider.up(name, topology, opts.k8s_version, driver=opts.driver,
                               image_aliases=opts.image_aliases)
        except Exception as err:  # every failure to come up is an error of the e2e tests
            return Outcome(error=f"bringing up cluster {name} failed: "
                                 f"{_describe(err)}")
        self._say(f"fakegpu: cluster {info.name} is up (Kubernetes {info.k8s_version}, "
                  f"{len(info.nodes)} nodes, driver {info.driver_name})")
        return Outcome(info=info)

    def finish(self) -> None:
        """Down the cluster this session brought up, unless told to keep it."""
        if self.current is not None:
            self._down(self.current)

    def _down(self, topology: Path) -> None:
        self.current = None
        outcome = self.outcomes.get(topology)
        if outcome is None or outcome.info is None or self.provider is None:
            return
        if self.options.keep_cluster:
            return
        try:
            self.provider.down(outcome.info.name)
        except Exception as err:
            self.teardown_errors.append(f"bringing down cluster {outcome.info.name} failed: "
                                        + _describe(err))

    # -- hooks --

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After deselection (-m, -k): count only what will run.
        self.e2e_collected = {}
        for item in session.items:
            if _wants_cluster(item):
                topology = item_topology(self.config, item)
                self.e2e_collected[topology] = self.e2e_collected.get(topology, 0) + 1

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, object, object]:
        # Outside the test's own protocol, so pytest-timeout's per-test timer (which wraps the
        # same hook, inside this wrapper) does not count the cluster's bring-up.
        if _wants_cluster(item):
            self.ensure(item_topology(self.config, item))
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.failed and _wants_cluster(item):
            outcome = self.outcomes.get(item_topology(self.config, item))
            if outcome is not None and outcome.info is not None:
                try:
                    self._attach_diagnostics(item, report, outcome.info)
                except Exception as err:  # diagnostics must never hide the test's own failure
                    report.sections.append(("fakegpu diagnostics",
                                            f"gathering diagnostics failed: {_describe(err)}"))
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish()
        if self.teardown_error is not None:
            # A cluster left behind breaks the next run: the session must not pass.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for topology, outcome in self.outcomes.items():
            self._summarise(terminalreporter, outcome, self.e2e_collected.get(topology, 0))
        if self.teardown_error is not None:
            terminalreporter.write_sep("!", "FAKEGPU CLUSTER TEARDOWN FAILED", red=True,
                                       bold=True)
            terminalreporter.write_line(self.teardown_error, red=True)

    def _summarise(self, tr: Any, outcome: Outcome, collected: int) -> None:
        if collected and outcome.skip is not None:
            tr.write_sep("!", "THE FAKEGPU E2E SUITE DID NOT RUN", red=True, bold=True)
            tr.write_line(f"{collected} E2E TEST(S) SKIPPED. {outcome.skip}",
                          red=True, bold=True)
        elif collected and outcome.error is not None:
            tr.write_sep("!", "THE FAKEGPU E2E SUITE DID NOT RUN: NO CLUSTER", red=True,
                         bold=True)
            tr.write_line(outcome.error, red=True)
        elif outcome.info is not None:
            info = outcome.info
            how = "reused" if outcome.reused else "brought up"
            tr.write_sep("-", f"fakegpu e2e: cluster {info.name} {how} ({info.provider}, "
                              f"Kubernetes {info.k8s_version}, {len(info.nodes)} nodes)")
            if self.options.keep_cluster:
                from fakegpu.cluster.names import down_command

                tr.write_line(f"cluster {info.name} left running (--keep-cluster); remove it "
                              f"with `{down_command(info.name, info.provider)}`")

    # -- diagnostics --

    def _attach_diagnostics(self, item: pytest.Item, report: pytest.TestReport,
                            info: ClusterInfo) -> None:
        from kubernetes import client as kclient

        from fakegpu.testkit import k8s

        out = self.options.reports_dir / _safe_name(item.nodeid) / report.when
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        assert self.provider is not None
        files = self.provider.logs(info.name, out / "logs")
        listing = "\n".join(f"  {f}" for f in files)
        report.sections.append(("fakegpu: component logs",
                                f"{len(files)} log file(s) of cluster {info.name} in "
                                f"{out / 'logs'}:\n{listing}"))
        ns = item.stash.get(_NAMESPACE, None)
        if ns is not None:
            api = k8s.new_api_client(info.kubeconfig)
            try:
                core = kclient.CoreV1Api(api)
                events = k8s.describe_events(core, ns)
                pods = k8s.describe_pods(core, ns)
            finally:
                api.close()
            (out / "events.txt").write_text(events + "\n")
            (out / "pods.txt").write_text(pods + "\n")
            report.sections.append((f"fakegpu: events in namespace {ns}", events))
            report.sections.append((f"fakegpu: pods in namespace {ns}", pods))
        item.user_properties.append(("fakegpu_diagnostics", str(out)))


_SESSION = pytest.StashKey[E2ESession]()
_NAMESPACE = pytest.StashKey[str]()


def reuse_problems(info: ClusterInfo, opts: Options, topology: Path | None = None) -> list[str]:
    """Why a running cluster is not the one this session asks for (empty: reuse it)."""
    topology = opts.topology if topology is None else topology
    problems = []
    if info.provider != opts.provider:
        problems.append(f"it runs on provider {info.provider}, not {opts.provider}")
    from fakegpu.cluster import driver_name

    if info.driver_name != driver_name(opts.driver):
        problems.append(f"its driver is {info.driver_name}, not {driver_name(opts.driver)}")
    if Path(info.topology).resolve() != topology.resolve():
        problems.append(f"its topology is {info.topology}, not {topology}")
    if opts.k8s_version is not None:
        from fakegpu.cluster.artifacts import binaries

        wanted = binaries.resolve_version(opts.k8s_version)
        if info.k8s_version.removeprefix("v") != wanted:
            problems.append(f"it runs Kubernetes {info.k8s_version}, not {wanted}")
    stopped = [n.name for n in info.nodes if not n.running]
    if stopped:
        problems.append(f"node(s) {', '.join(stopped)} are stopped")
    if not problems:
        problems.extend(_api_problems(info))
    return problems


def _api_problems(info: ClusterInfo) -> list[str]:
    """Ask the apiserver whether every node is registered and Ready."""
    from kubernetes import client as kclient

    from fakegpu.testkit import k8s

    try:
        api = k8s.new_api_client(info.kubeconfig)
        try:
            nodes: list[Any] = kclient.CoreV1Api(api).list_node(_request_timeout=20).items
        finally:
            api.close()
    except Exception as err:
        return [f"its apiserver does not answer: {_describe(err)}"]
    ready = {n.metadata.name for n in nodes
             if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or ())}
    expected = {n.name for n in info.nodes}
    not_ready = sorted(expected - ready)
    return [f"node(s) {', '.join(not_ready)} are not Ready"] if not_ready else []


def item_topology(config: pytest.Config, item: pytest.Item) -> Path:
    """The topology whose cluster ``item`` runs on: its module's ``topology`` marker, else
    --topology's. The marker belongs on the module (``pytestmark``): the cluster fixtures are
    module-scoped, so a test cannot have another topology than its module."""
    module = item.getparent(pytest.Module)
    marker = (module or item).get_closest_marker(TOPOLOGY_MARKER)
    own = item.get_closest_marker(TOPOLOGY_MARKER)
    if own is not None and own is not marker and own.args != getattr(marker, "args", None):
        raise pytest.UsageError(f"{item.nodeid}: put the topology marker on the module "
                                "(pytestmark), not on a test or class")
    if marker is None:
        return _session(config).options.topology
    if len(marker.args) != 1 or not isinstance(marker.args[0], str | Path):
        raise pytest.UsageError(f"{item.nodeid}: topology marker: expected one file path, "
                                f"got {marker.args!r}")
    return (config.rootpath / marker.args[0]).resolve()


def _wants_cluster(item: pytest.Item) -> bool:
    if item.get_closest_marker("skip") is not None:
        return False  # skipped before any fixture: no cluster is brought up for it
    return item.get_closest_marker(E2E_MARKER) is not None or "fakegpu_cluster" in getattr(
        item, "fixturenames", ())


def _describe(err: BaseException) -> str:
    """One error with its notes (a build error's output tail lives there)."""
    text = f"{type(err).__name__}: {err}"
    notes = getattr(err, "__notes__", None)
    if notes:
        text += "\n" + "\n".join(str(n) for n in notes)
    return text


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]


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
    return (request.config.rootpath / str(marker.args[0])).resolve()


@pytest.fixture(scope="module")
def fakegpu_cluster(request: pytest.FixtureRequest) -> ClusterInfo:
    """The cluster of the module's topology (brought up on first use, down when another
    topology's tests start or at the end, unless --keep-cluster)."""
    outcome = _session(request.config).ensure(_node_topology(request))
    if outcome.skip is not None:
        pytest.skip(outcome.skip)
    if outcome.error is not None:
        pytest.fail(outcome.error, pytrace=False)
    assert outcome.info is not None
    return outcome.info


@pytest.fixture(autouse=True)
def _fakegpu_e2e_requires_cluster(request: pytest.FixtureRequest) -> None:
    # Every e2e test gets the cluster (and so its skip or error), even one that asks only
    # for, say, `core_v1`: no e2e test runs against nothing.
    if request.node.get_closest_marker(E2E_MARKER) is not None:
        request.getfixturevalue("fakegpu_cluster")


@pytest.fixture(scope="module")
def fakegpu_topology(fakegpu_cluster: ClusterInfo) -> Topology:
    """The cluster's topology model (what the hardware is meant to be)."""
    from fakegpu.topology.load import load_topology

    return load_topology(fakegpu_cluster.topology)


@pytest.fixture(scope="module")
def k8s_client(fakegpu_cluster: ClusterInfo) -> Iterator[Any]:
    """A kubernetes ApiClient for the cluster (from its kubeconfig)."""
    from fakegpu.testkit import k8s

    api = k8s.new_api_client(fakegpu_cluster.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="module")
def core_v1(k8s_client: Any) -> kclient.CoreV1Api:
    from kubernetes import client as kclient

    return kclient.CoreV1Api(k8s_client)


@pytest.fixture(scope="module")
def resource_api(k8s_client: Any) -> ResourceApi:
    """resource.k8s.io at the version the apiserver serves (v1 on 1.34+)."""
    from fakegpu.testkit.dra import ResourceApi

    return ResourceApi(k8s_client)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core_v1: kclient.CoreV1Api) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards; the next test starts once its pods
    and claims are gone (``k8s.delete_namespace``)."""
    from fakegpu.testkit import k8s

    # The test's name in the namespace's makes events and leftovers easy to trace back.
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = k8s.create_namespace(core_v1, prefix=f"e2e-{base}" if base else "e2e",
                                labels={"fakegpu.dev/test": "e2e"})
    request.node.stash[_NAMESPACE] = name
    yield name
    k8s.delete_namespace(core_v1, name)
