"""Fixtures and hooks of the conformance suite (options: ``fakegpu.pytest_plugin``).

With ``--fakegpu-conformance-kubeconfig`` the suite runs against that cluster and driver;
without it, inside fakegpu's own pytest session: every check becomes a ``fakegpu`` (and this
repository's ``e2e``) test on the session's cluster (one cluster per provider and topology,
shared with e2e/), against fakegpu's plugin and the capabilities it ships (``capabilities/``).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as kclient

from fakegpu.testkit import k8s
from fakegpu.testkit.dra import ResourceApi

from . import capabilities as caps
from . import report as reporting
from .cluster import read_facts
from .target import DEFAULT_IMAGE, Target

HERE = Path(__file__).resolve().parent
_TARGET = pytest.StashKey[Target]()
_OUTCOMES = pytest.StashKey[dict[str, reporting.Outcome]]()
_ITEMS = pytest.StashKey[set[str]]()


def _external(config: pytest.Config) -> bool:
    return config.getoption("fakegpu_conformance_kubeconfig", None) is not None


def _ours(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().parent == HERE


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Before -m deselects: in fakegpu's own session the checks are fakegpu tests (the
    # session's cluster comes up for them) and this repository's e2e tests (`-m "not e2e"`
    # leaves them out).
    mine = {item.nodeid for item in items if _ours(item)}
    config.stash[_ITEMS] = mine
    config.stash[_OUTCOMES] = {}
    if not _external(config):
        for item in items:
            if item.nodeid in mine:
                item.add_marker(pytest.mark.fakegpu)
                item.add_marker(pytest.mark.e2e)


def _target(request: pytest.FixtureRequest) -> Target:
    config = request.config
    found = config.stash.get(_TARGET, None)
    if found is not None:
        return found
    opt = config.getoption
    given = opt("fakegpu_conformance_capabilities")
    if _external(config):
        kubeconfig = Path(str(opt("fakegpu_conformance_kubeconfig")))
        declared = caps.load(Path(str(given))) if given else caps.default()
        driver = opt("fakegpu_conformance_driver") or declared.driver
        if not driver:
            pytest.fail("--fakegpu-conformance-driver is required with "
                        "--fakegpu-conformance-kubeconfig", pytrace=False)
        if declared.driver and declared.driver != driver:
            pytest.fail(f"{declared.source}: driver {declared.driver} is not "
                        f"--fakegpu-conformance-driver {driver}", pytrace=False)
        device_class = opt("fakegpu_conformance_device_class") or declared.device_class or driver
        image = opt("fakegpu_conformance_image") or DEFAULT_IMAGE
        own = False
    else:
        cluster: Any = request.getfixturevalue("fakegpu_cluster")
        kubeconfig = Path(cluster.kubeconfig)
        driver = str(cluster.driver_name)
        declared = caps.load(Path(str(given))) if given else caps.packaged(driver)
        device_class = opt("fakegpu_conformance_device_class") or declared.device_class or driver
        image = opt("fakegpu_conformance_image") or str(cluster.workload_image)
        own = True
    api = k8s.new_api_client(kubeconfig)
    try:
        facts = read_facts(api)
    finally:
        api.close()
    target = Target(kubeconfig=kubeconfig, driver=str(driver), device_class=str(device_class),
                    image=image, capabilities=declared, facts=facts, own=own)
    config.stash[_TARGET] = target
    return target


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest) -> Target:
    return _target(request)


# In fakegpu's own session the checks use the pytest plugin's fixtures (the session cluster's
# client, a namespace per test that failure diagnostics know); against another cluster, the
# same from the test kit for --fakegpu-conformance-kubeconfig.


@pytest.fixture(scope="module")
def kube(request: pytest.FixtureRequest, target: Target) -> Iterator[Any]:
    if target.own:
        yield request.getfixturevalue("fakegpu_k8s_client")
        return
    api = k8s.new_api_client(target.kubeconfig)
    yield api
    api.close()


@pytest.fixture(scope="module")
def core(kube: Any) -> kclient.CoreV1Api:
    return kclient.CoreV1Api(kube)


@pytest.fixture(scope="module")
def rapi(kube: Any, target: Target) -> ResourceApi:
    return ResourceApi(kube, target.facts.resource_api)


@pytest.fixture
def ns(request: pytest.FixtureRequest, target: Target, core: kclient.CoreV1Api
       ) -> Iterator[str]:
    """A fresh namespace per check, deleted afterwards (the next starts once its pods and claims
    are gone)."""
    if target.own:
        yield request.getfixturevalue("fakegpu_namespace")
        return
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:36].strip("-")
    name = k8s.create_namespace(core, prefix=f"conf-{base}",
                                labels={"fakegpu.dev/test": "conformance"})
    yield name
    k8s.delete_namespace(core, name)


@pytest.fixture(autouse=True)
def _declared_and_gated(request: pytest.FixtureRequest) -> None:
    """Not declared and not applicable are decided before a check touches the cluster."""
    if not isinstance(request.node, pytest.Item) or not _ours(request.node):
        return
    check = reporting.check_of(request.node.name)
    if check is None:
        return
    target = _target(request)
    if not target.capabilities.declared(check.capability):
        pytest.skip(f"{reporting.NOT_DECLARED}: {target.capabilities.source} does not declare "
                    f"{check.capability}")
    if check.gate is not None and target.facts.gate(check.gate) is False:
        pytest.skip(f"{reporting.NOT_APPLICABLE}: feature gate {check.gate} is off on "
                    f"{target.facts.version}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    config = item.config
    check = _check(item.nodeid) if item.nodeid in config.stash.get(_ITEMS, set()) else None
    if check is not None and (rep.when == "call" or rep.outcome != "passed"):
        got = reporting.classify(rep.outcome, rep.when, _reason(rep))
        outcomes = config.stash[_OUTCOMES]
        if check not in outcomes or outcomes[check].result != "failed":  # a failure sticks
            outcomes[check] = got
    return rep


def _check(nodeid: str) -> str | None:
    found = reporting.check_of(nodeid.rsplit("::", 1)[-1])
    return None if found is None else found.id


def _reason(rep: pytest.TestReport) -> str:
    if rep.skipped and isinstance(rep.longrepr, tuple):
        return str(rep.longrepr[2]).removeprefix("Skipped: ")
    return str(rep.longreprtext or "")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    outcomes = config.stash.get(_OUTCOMES, {})
    target = config.stash.get(_TARGET, None)
    if not outcomes and target is None:
        return  # no check began: nothing of this suite ran in the session
    out = config.getoption("fakegpu_conformance_report")
    if out is None and target is not None and target.own:
        out = config.rootpath / "reports" / "conformance" / target.driver
    if out is None:
        return
    stopped = exitstatus == pytest.ExitCode.INTERRUPTED or bool(session.shouldstop)
    path = reporting.write(Path(str(out)), reporting.render(target, outcomes, stopped=stopped))
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"fakegpu conformance report: {path}")
