"""The e2e session's clusters: pytest policy of the fakegpu plugin (``fakegpu.pytest_plugin``).

- one cluster per session and topology, brought up only when an e2e test is about to run,
  before the pytest-timeout timer of that test starts (a cold build of the binaries takes many
  minutes); tests run sorted by topology, the session's own first, and a cluster goes down
  when no test of its topology is left (unless --fakegpu-keep-cluster);
- with pytest-xdist, one cluster per topology however many workers: the first worker that needs
  it brings it up under a file lock, the others use it (``testkit.workers``); a cluster goes
  down once every worker is past its topology, and the controller downs what is left and prints
  the summaries from what the workers sent back (``workeroutput``);
- ``serial`` tests run alone on their cluster (an exclusive lock the parallel tests share);
- e2e tests skip only when a host prerequisite is truly missing (``cluster.prereq``), and the
  terminal summary then says in capitals that the suite did not run; any other failure to bring
  the cluster up is an error of every e2e test;
- a failing e2e test gets the cluster's component logs, its namespace's events and pod
  descriptions attached to its report (and written under ``<rootdir>/reports/fakegpu-e2e``).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fakegpu.cluster import prereq
from fakegpu.testkit.costs import BRINGUP_PROPERTY
from fakegpu.testkit.workers import FINISHED, Coordination, SharedOutcome

if TYPE_CHECKING:
    from fakegpu.cluster.provider import ClusterInfo, Clusters
    from fakegpu.testkit.options import Options

# The one marker the plugin claims: a project's own `e2e` marker is its own business (this
# repository maps its `e2e` to this one in its conftest).
FAKEGPU_MARKER = "fakegpu"
SERIAL_MARKER = "serial"
NAMESPACE = pytest.StashKey[str]()  # the test's namespace (fixture ``fakegpu_namespace``)


@dataclass(frozen=True)
class Outcome:
    """What bringing up a cluster gave: a cluster, a skip, or an error."""

    info: ClusterInfo | None = None
    skip: str | None = None
    error: str | None = None
    reused: bool = False
    seconds: float | None = None  # how long this process took to bring it up


@dataclass(frozen=True)
class Summary:
    """One topology's end-of-session line, as a worker sends it to the controller."""

    skip: str | None = None
    error: str | None = None
    name: str = ""
    provider: str = ""
    k8s_version: str = ""
    nodes: int = 0
    reused: bool = False

    @classmethod
    def of(cls, outcome: Outcome) -> Summary:
        info = outcome.info
        if info is None:
            return cls(skip=outcome.skip, error=outcome.error)
        return cls(name=info.name, provider=info.provider, k8s_version=info.k8s_version,
                   nodes=len(info.nodes), reused=outcome.reused)


class E2ESession:
    """Per-process state: the options, the clusters, and the hooks that use them.

    ``coordination`` is None without xdist (``-n 0``: this process is the whole session); a
    worker has one; the controller has one too but runs no test (``controller=True``).
    """

    def __init__(self, config: pytest.Config, options: Options,
                 coordination: Coordination | None = None, controller: bool = False) -> None:
        self.config = config
        self.options = options
        self.coordination = coordination
        self.controller = controller
        # One outcome per topology, in the order they were brought up; `current` is the one
        # whose cluster this process may have running now.
        self.outcomes: dict[Path, Outcome] = {}
        self.current: Path | None = None
        self._provider: Clusters | None = None
        self.ranks: dict[Path, int] = {}  # topology -> its place in the session's order
        self.rank = -1  # the topology rank of this process's latest test
        self.e2e_collected: dict[Path, int] = {}
        self.teardown_errors: list[str] = []
        # On the controller: what the workers sent back (topology as text).
        self.worker_summaries: dict[str, Summary] = {}
        self.worker_collected: dict[str, int] = {}

    @property
    def outcome(self) -> Outcome | None:
        """The outcome of the session's own topology (--fakegpu-topology), if it was needed."""
        return self.outcomes.get(self.options.topology)

    @property
    def teardown_error(self) -> str | None:
        return "; ".join(self.teardown_errors) or None

    def provider(self) -> Clusters:
        if self._provider is None:
            from fakegpu import cluster

            self._provider = cluster.get_provider(self.options.provider)
        return self._provider

    def cluster_name(self, topology: Path) -> str:
        """--fakegpu-cluster-name for the session's topology; for a suite's own one, that name plus
        the file's stem, cut to the providers' length limit."""
        base = self.options.cluster_name
        if topology == self.options.topology:
            return base
        from fakegpu.cluster.names import MAX_LENGTH

        stem = re.sub(r"[^a-z0-9-]+", "-", topology.stem.lower())
        return f"{base}-{stem}"[:MAX_LENGTH].strip("-")

    # -- bringing up and down --

    def ensure(self, topology: Path | None = None) -> Outcome:
        """Bring up the cluster of ``topology`` (default: --fakegpu-topology's) on first use, after
        bringing down the one of another topology; later calls return the same outcome."""
        topology = self.options.topology if topology is None else topology
        outcome = self.outcomes.get(topology)
        if outcome is None or (outcome.info is not None and self.current != topology):
            capman = self.config.pluginmanager.getplugin("capturemanager")
            # Live output: a cold build of the binaries takes many minutes and must show progress.
            with capman.global_and_fixture_disabled() if capman is not None else nullcontext():
                outcome = self._switch_to(topology)
        return outcome

    def _switch_to(self, topology: Path) -> Outcome:
        if self.current is not None and self.current != topology:
            self._leave(self.current)
        if self.coordination is None:
            outcome = self._bring_up(topology)
        else:
            outcome = self._shared_bring_up(self.coordination, topology)
        self.outcomes[topology] = outcome
        self.current = topology if outcome.info is not None else None
        return outcome

    def _shared_bring_up(self, coord: Coordination, topology: Path) -> Outcome:
        """The first worker brings the cluster up; the others find its outcome recorded."""
        name = self.cluster_name(topology)
        with coord.bringup(name):
            shared = coord.outcome(name)
            if shared is None or shared.state == "down":
                outcome = self._bring_up(topology)
                state = ("up" if outcome.info is not None
                         else "skip" if outcome.skip is not None else "error")
                coord.record(name, SharedOutcome(state=state,
                                                 message=outcome.skip or outcome.error,
                                                 reused=outcome.reused, by=coord.worker))
                return outcome
        if shared.state == "skip":
            return Outcome(skip=shared.message)
        if shared.state == "error":
            return Outcome(error=shared.message)
        try:
            info = self.provider().status(name)
        except Exception as err:
            return Outcome(error=f"reading cluster {name} that worker {shared.by} brought up "
                                 f"failed: {describe(err)}")
        if info is None:
            return Outcome(error=f"cluster {name} that worker {shared.by} brought up is gone")
        return Outcome(info=info, reused=shared.reused)

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
            return Outcome(error=f"checking the host prerequisites failed: {describe(err)}")
        if missing:
            return Outcome(skip=f"MISSING PREREQUISITE for the fakegpu e2e suite "
                                f"(provider {opts.provider}): " + "; ".join(missing))
        try:
            provider = self.provider()
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
                              f"(--fakegpu-keep-cluster)")
                    provider.tag_images(name, opts.image_aliases)
                    return Outcome(info=running, reused=True)
            if not topology.is_file():
                return Outcome(error=f"topology {topology} does not exist")
            self._say(f"fakegpu: bringing up cluster {name} ({opts.provider}, "
                      f"topology {topology.name}, Kubernetes "
                      f"{opts.k8s_version or 'newest supported'}); the first run builds the "
                      "binaries, which takes a long time")
            started = time.monotonic()
            info = provider.up(name, topology, opts.k8s_version, driver=opts.driver,
                               image_aliases=opts.image_aliases, nic_driver=opts.nic_driver)
            seconds = time.monotonic() - started
        except Exception as err:  # every failure to come up is an error of the e2e tests
            return Outcome(error=f"bringing up cluster {name} failed: "
                                 f"{describe(err)}")
        self._say(f"fakegpu: cluster {info.name} is up (Kubernetes {info.k8s_version}, "
                  f"{len(info.nodes)} nodes, driver {info.driver_name})")
        return Outcome(info=info, seconds=seconds)

    def advance(self, topology: Path) -> None:
        """A test of ``topology`` is next: tell the other workers how far this one is, and
        down the clusters every worker is past (tests are sorted by topology)."""
        rank = self.ranks.get(topology, 0)
        if self.coordination is None or rank == self.rank:
            return
        self.rank = rank
        self.coordination.set_rank(rank)
        self._down_passed()

    def finish(self) -> None:
        """Down the clusters this process may down, unless told to keep them."""
        if self.coordination is None:
            if self.current is not None:
                self._leave(self.current)
            return
        if not self.controller:
            self.coordination.set_rank(FINISHED)
        self._down_passed(everything=self.controller)

    def _leave(self, topology: Path) -> None:
        """Done with ``topology`` here: down its cluster (without xdist; a worker leaves that
        to whoever is last past it, ``_down_passed``)."""
        self.current = None
        outcome = self.outcomes.get(topology)
        if self.coordination is None and outcome is not None and outcome.info is not None:
            self._down(outcome.info.name)

    def _down_passed(self, everything: bool = False) -> None:
        """Down each recorded cluster no worker needs any more (``everything``: the controller
        at the end, after every worker stopped, for a worker that died before it could)."""
        assert self.coordination is not None
        coord = self.coordination
        by_name = {self.cluster_name(t): rank for t, rank in self.ranks.items()}
        for name, shared in coord.clusters().items():
            if shared.state != "up" or not (everything or coord.all_past(by_name.get(name, 0))):
                continue
            with coord.bringup(name):
                current = coord.outcome(name)
                if current is None or current.state != "up":
                    continue  # another worker got there first
                self._down(name)
                coord.record(name, SharedOutcome(state="down", by=coord.worker))

    def _down(self, name: str) -> None:
        if self.options.keep_cluster:
            return
        try:
            self.provider().down(name)
        except Exception as err:
            self.teardown_errors.append(f"bringing down cluster {name} failed: "
                                        + describe(err))

    @contextmanager
    def test_lock(self, topology: Path, serial: bool) -> Iterator[None]:
        """Across workers: a serial test alone on its cluster, the others side by side."""
        if self.coordination is None:
            yield
            return
        name = self.cluster_name(topology)
        with (self.coordination.exclusive(name) if serial
              else self.coordination.shared(name)):
            yield

    # -- what the workers tell the controller --

    def worker_output(self) -> dict[str, Any]:
        return {"summaries": {str(t): asdict(Summary.of(o)) for t, o in self.outcomes.items()},
                "collected": {str(t): n for t, n in self.e2e_collected.items()},
                "teardown_errors": list(self.teardown_errors)}

    def merge_worker_output(self, output: dict[str, Any]) -> None:
        for topology, summary in output.get("summaries", {}).items():
            self.worker_summaries.setdefault(topology, Summary(**summary))
        for topology, count in output.get("collected", {}).items():
            self.worker_collected[topology] = max(count, self.worker_collected.get(topology, 0))
        self.teardown_errors.extend(output.get("teardown_errors", ()))

    # -- the end of the session --

    def terminal_summary(self, tr: Any) -> None:
        if self.controller:
            for key, summary in self.worker_summaries.items():
                self._summarise(tr, summary, self.worker_collected.get(key, 0))
        else:
            for path, outcome in self.outcomes.items():
                self._summarise(tr, Summary.of(outcome), self.e2e_collected.get(path, 0))
        if self.teardown_error is not None:
            tr.write_sep("!", "FAKEGPU CLUSTER TEARDOWN FAILED", red=True, bold=True)
            tr.write_line(self.teardown_error, red=True)

    def _summarise(self, tr: Any, summary: Summary, collected: int) -> None:
        if collected and summary.skip is not None:
            tr.write_sep("!", "THE FAKEGPU E2E SUITE DID NOT RUN", red=True, bold=True)
            tr.write_line(f"{collected} E2E TEST(S) SKIPPED. {summary.skip}",
                          red=True, bold=True)
        elif collected and summary.error is not None:
            tr.write_sep("!", "THE FAKEGPU E2E SUITE DID NOT RUN: NO CLUSTER", red=True,
                         bold=True)
            tr.write_line(summary.error, red=True)
        elif summary.name:
            how = "reused" if summary.reused else "brought up"
            tr.write_sep("-", f"fakegpu e2e: cluster {summary.name} {how} ({summary.provider}, "
                              f"Kubernetes {summary.k8s_version}, {summary.nodes} nodes)")
            if self.options.keep_cluster:
                from fakegpu.cluster.names import down_command

                tr.write_line(f"cluster {summary.name} left running (--fakegpu-keep-cluster); "
                              f"remove it with `{down_command(summary.name, summary.provider)}`")

    # -- diagnostics --

    def attach_diagnostics(self, item: pytest.Item, report: pytest.TestReport,
                           topology: Path) -> None:
        outcome = self.outcomes.get(topology)
        if outcome is None or outcome.info is None:
            return
        try:
            self._attach_diagnostics(item, report, outcome.info)
        except Exception as err:  # diagnostics must never hide the test's own failure
            report.sections.append(("fakegpu diagnostics",
                                    f"gathering diagnostics failed: {describe(err)}"))

    def _attach_diagnostics(self, item: pytest.Item, report: pytest.TestReport,
                            info: ClusterInfo) -> None:
        from kubernetes import client as kclient

        from fakegpu.testkit import k8s

        out = self.options.reports_dir / _safe_name(item.nodeid) / report.when
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        files = self.provider().logs(info.name, out / "logs")
        listing = "\n".join(f"  {f}" for f in files)
        report.sections.append(("fakegpu: component logs",
                                f"{len(files)} log file(s) of cluster {info.name} in "
                                f"{out / 'logs'}:\n{listing}"))
        ns = item.stash.get(NAMESPACE, None)
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


def reuse_problems(info: ClusterInfo, opts: Options,
                   topology: Path | None = None) -> list[str]:
    """Why a running cluster is not the one this session asks for (empty: reuse it)."""
    topology = opts.topology if topology is None else topology
    problems = []
    if info.provider != opts.provider:
        problems.append(f"it runs on provider {info.provider}, not {opts.provider}")
    from fakegpu.cluster import driver_name

    if info.driver_name != driver_name(opts.driver):
        problems.append(f"its driver is {info.driver_name}, not {driver_name(opts.driver)}")
    from fakegpu import drivers

    if info.nic_driver != drivers.nic_by_key(opts.nic_driver):
        problems.append(f"its NIC driver is {info.nic_driver or 'none'}, not "
                        f"{drivers.nic_by_key(opts.nic_driver) or 'none'}")
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
        return [f"its apiserver does not answer: {describe(err)}"]
    ready = {n.metadata.name for n in nodes
             if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or ())}
    expected = {n.name for n in info.nodes}
    not_ready = sorted(expected - ready)
    return [f"node(s) {', '.join(not_ready)} are not Ready"] if not_ready else []


def describe(err: BaseException) -> str:
    """One error with its notes (a build error's output tail lives there)."""
    text = f"{type(err).__name__}: {err}"
    notes = getattr(err, "__notes__", None)
    if notes:
        text += "\n" + "\n".join(str(n) for n in notes)
    return text


def _safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]


def claimed(item: pytest.Item) -> bool:
    """A test of the plugin's: marked ``fakegpu`` or using the cluster fixture. The plugin's
    markers and ordering apply to these only; every other test is left as its project wrote it."""
    return item.get_closest_marker(FAKEGPU_MARKER) is not None or "fakegpu_cluster" in getattr(
        item, "fixturenames", ())


def wants_cluster(item: pytest.Item) -> bool:
    if item.get_closest_marker("skip") is not None:
        return False  # skipped before any fixture: no cluster is brought up for it
    return claimed(item)


def is_serial(item: pytest.Item) -> bool:
    return item.get_closest_marker(SERIAL_MARKER) is not None


def run_protocol(session: E2ESession, item: pytest.Item, topology: Path
                 ) -> Generator[None, object, object]:
    """The body of the plugin's ``pytest_runtest_protocol`` wrapper: outside the test's own
    protocol, so pytest-timeout's per-test timer (which wraps the same hook, inside this
    wrapper) counts neither the cluster's bring-up nor the wait for a serial test's turn."""
    session.advance(topology)
    if not wants_cluster(item):
        return (yield)
    before = session.outcomes.get(topology)
    outcome = session.ensure(topology)
    if outcome is not before and outcome.info is not None and outcome.seconds is not None:
        # In the JUnit XML, so the cost table shows bring-ups (``testkit.costs``).
        item.user_properties.append((BRINGUP_PROPERTY,
                                     f"{outcome.info.name}={outcome.seconds:.1f}"))
    with session.test_lock(topology, is_serial(item)):
        return (yield)
