"""Shared by the cluster tests: a provider whose bring-up fails at a chosen action."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from fakegpu.cluster.provider import Action, ClusterSpec, Provider, Provisioning
from fakegpu.errors import FakegpuError


class InjectedFailure(FakegpuError):
    """The failure a test asked for, at the action it named."""


class FailAt:
    """A provider whose bring-up runs for real up to the action whose title starts with
    ``title``, which then fails (after running, if ``after``: what it made must go too)."""

    def __init__(self, provider: Provider, title: str, *, after: bool = True) -> None:
        self._provider = provider
        self.title = title
        self.after = after
        self.reached = False

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._provider, attr)

    def provision(self, spec: ClusterSpec) -> Provisioning:
        return _Failing(self, self._provider.provision(spec))


class _Failing:
    def __init__(self, owner: FailAt, inner: Provisioning) -> None:
        self.owner = owner
        self.inner = inner

    @property
    def state(self) -> Any:
        return self.inner.state

    def actions(self) -> Sequence[Action]:
        out = []
        for action in self.inner.actions():
            if action.title.startswith(self.owner.title):
                out.append(Action(action.title, self._fail(action)))
            else:
                out.append(action)
        return out

    def _fail(self, action: Action) -> Any:
        def run() -> None:
            self.owner.reached = True
            if self.owner.after:
                action.run()
            raise InjectedFailure(f"injected failure at {action.title!r}")

        return run


@pytest.fixture
def fail_at() -> type[FailAt]:
    return FailAt


@pytest.fixture
def injected_failure() -> type[InjectedFailure]:
    return InjectedFailure
