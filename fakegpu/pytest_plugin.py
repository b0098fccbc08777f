"""pytest plugin (entry point ``pytest11``): the ``e2e`` marker, options and cluster fixtures.

Thin on purpose: the work is in ``fakegpu.testkit`` (usable without pytest) and in the cluster
providers. What lives here is pytest policy:

- one cluster per session, brought up only when an e2e test is about to run, before the
  pytest-timeout timer of that test starts (a cold build of the binaries takes many minutes);
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

    @classmethod
    def from_config(cls, config: pytest.Config) -> Options:
        """Read and validate the fakegpu options; a bad value raises pytest.UsageError."""
        provider = str(config.getoption("fakegpu_provider"))
        version = config.getoption("k8s_version")
        if version is not None:
            from fakegpu.cluster import binaries
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
        return cls(provider=provider, k8s_version=None if version is None else str(version),
                   topology=topology, keep_cluster=bool(config.getoption("keep_cluster")),
                   cluster_name=name, reports_dir=config.rootpath / REPORTS_SUBDIR)


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
    group.addoption("--cluster-name", dest="cluster_name", default=DEFAULT_CLUSTER_NAME,
                    metavar="NAME",
                    help=f"name of the e2e cluster (default: {DEFAULT_CLUSTER_NAME})")


PROVIDER_MARKER_HELP = ("provider(name): an e2e test of what only that cluster provider installs; "
                        "deselected (not skipped) when the session runs another provider")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.addinivalue_line("markers", PROVIDER_MARKER_HELP)
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
        self.outcome: Outcome | None = None
        self.provider: Clusters | None = None
        self.e2e_collected = 0
        self.teardown_error: str | None = None

    # -- bringing up and down --

    def ensure(self) -> Outcome:
        """Bring the cluster up on first use; later calls return the same outcome."""
        if self.outcome is None:
            capman = self.config.pluginmanager.getplugin("capturemanager")
            # Live output: a cold build of the binaries takes many minutes and must show progress.
            if capman is not None:
                with capman.global_and_fixture_disabled():
                    self.outcome = self._bring_up()
            else:
                self.outcome = self._bring_up()
        return self.outcome

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(line, bold=True)

    def _bring_up(self) -> Outcome:
        opts = self.options
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
                running = provider.status(opts.cluster_name)
                if running is not None:
                    problems = reuse_problems(running, opts)
                    if problems:
                        return Outcome(error=(
                            f"cluster {opts.cluster_name} is running but cannot be reused: "
                            + "; ".join(problems)
                            + " (remove it with `fakegpu cluster down --name "
                            + f"{opts.cluster_name}`)"))
                    self._say(f"fakegpu: reusing running cluster {opts.cluster_name} "
                              f"(--keep-cluster)")
                    return Outcome(info=running, reused=True)
            if not opts.topology.is_file():
                return Outcome(error=f"topology {opts.topology} does not exist")
            self._say(f"fakegpu: bringing up cluster {opts.cluster_name} ({opts.provider}, "
                      f"topology {opts.topology.name}, Kubernetes "
                      f"{opts.k8s_version or 'newest supported'}); the first run builds the "
                      "binaries, which takes a long time")
            info = provider.up(opts.cluster_name, opts.topology, opts.k8s_version)
        except Exception as err:  # every failure to come up is an error of the e2e tests
            return Outcome(error=f"bringing up cluster {opts.cluster_name} failed: "
                                 f"{_describe(err)}")
        self._say(f"fakegpu: cluster {info.name} is up (Kubernetes {info.k8s_version}, "
                  f"{len(info.nodes)} nodes, driver {info.driver_name})")
        return Outcome(info=info)

    def finish(self) -> None:
        """Down the cluster this session brought up, unless told to keep it."""
        outcome = self.outcome
        if outcome is None or outcome.info is None or self.provider is None:
            return
        if self.options.keep_cluster:
            return
        try:
            self.provider.down(outcome.info.name)
        except Exception as err:
            self.teardown_error = f"bringing down cluster {outcome.info.name} failed: " + \
                _describe(err)

    # -- hooks --

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After deselection (-m, -k): count only what will run.
        self.e2e_collected = sum(1 for item in session.items if _wants_cluster(item))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, object, object]:
        # Outside the test's own protocol, so pytest-timeout's per-test timer (which wraps the
        # same hook, inside this wrapper) does not count the cluster's bring-up.
        if _wants_cluster(item):
            self.ensure()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.failed and _wants_cluster(item):
            outcome = self.outcome
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
        tr = terminalreporter
        outcome = self.outcome
        if self.e2e_collected and outcome is not None and outcome.skip is not None:
            tr.write_sep("!", "THE FAKEGPU E2E SUITE DID NOT RUN", red=True, bold=True)
            tr.write_line(f"{self.e2e_collected} E2E TEST(S) SKIPPED. {outcome.skip}",
                          red=True, bold=True)
        elif self.e2e_collected and outcome is not None and outcome.error is not None:
            tr.write_sep("!", "THE FAKEGPU E2E SUITE DID NOT RUN: NO CLUSTER", red=True,
                         bold=True)
            tr.write_line(outcome.error, red=True)
        elif outcome is not None and outcome.info is not None:
            info = outcome.info
            how = "reused" if outcome.reused else "brought up"
            tr.write_sep("-", f"fakegpu e2e: cluster {info.name} {how} ({info.provider}, "
                              f"Kubernetes {info.k8s_version}, {len(info.nodes)} nodes)")
            if self.options.keep_cluster:
                tr.write_line(f"cluster {info.name} left running (--keep-cluster); remove it "
                              f"with `fakegpu cluster down --name {info.name}`")
        if self.teardown_error is not None:
            tr.write_sep("!", "FAKEGPU CLUSTER TEARDOWN FAILED", red=True, bold=True)
            tr.write_line(self.teardown_error, red=True)

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


def reuse_problems(info: ClusterInfo, opts: Options) -> list[str]:
    """Why a running cluster is not the one this session asks for (empty: reuse it)."""
    problems = []
    if info.provider != opts.provider:
        problems.append(f"it runs on provider {info.provider}, not {opts.provider}")
    if Path(info.topology).resolve() != opts.topology.resolve():
        problems.append(f"its topology is {info.topology}, not {opts.topology}")
    if opts.k8s_version is not None:
        from fakegpu.cluster import binaries

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


def _wants_cluster(item: pytest.Item) -> bool:
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


@pytest.fixture(scope="session")
def fakegpu_cluster(request: pytest.FixtureRequest) -> ClusterInfo:
    """The session's cluster (brought up on first use, down at the end unless --keep-cluster)."""
    outcome = _session(request.config).ensure()
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


@pytest.fixture(scope="session")
def fakegpu_topology(fakegpu_cluster: ClusterInfo) -> Topology:
    """The cluster's topology model (what the hardware is meant to be)."""
    from fakegpu.topology.load import load_topology

    return load_topology(fakegpu_cluster.topology)


@pytest.fixture(scope="session")
def k8s_client(fakegpu_cluster: ClusterInfo) -> Iterator[Any]:
    """A kubernetes ApiClient for the cluster (from its kubeconfig)."""
    from fakegpu.testkit import k8s

    api = k8s.new_api_client(fakegpu_cluster.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="session")
def core_v1(k8s_client: Any) -> kclient.CoreV1Api:
    from kubernetes import client as kclient

    return kclient.CoreV1Api(k8s_client)


@pytest.fixture(scope="session")
def resource_api(k8s_client: Any) -> ResourceApi:
    """resource.k8s.io at the version the apiserver serves (v1 on 1.34+)."""
    from fakegpu.testkit.dra import ResourceApi

    return ResourceApi(k8s_client)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core_v1: kclient.CoreV1Api) -> Iterator[str]:
    """A fresh namespace for one test, deleted (and waited for) afterwards."""
    from fakegpu.testkit import k8s

    # The test's name in the namespace's makes events and leftovers easy to trace back.
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = k8s.create_namespace(core_v1, prefix=f"e2e-{base}" if base else "e2e",
                                labels={"fakegpu.dev/test": "e2e"})
    request.node.stash[_NAMESPACE] = name
    yield name
    k8s.delete_namespace(core_v1, name)
