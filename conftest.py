"""This repository's own pytest wiring on top of the fakegpu plugin (``fakegpu.pytest_plugin``).

The plugin claims only tests marked ``fakegpu`` and prefixes its fixtures, so that it leaves
other projects alone; here, where every ``e2e`` test is a fakegpu test, the ``e2e`` marker maps
to ``fakegpu`` and the short fixture names the suites were written with stay as thin aliases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kubernetes import client as kclient

    from fakegpu.testkit.dra import ResourceApi


def pytest_itemcollected(item: pytest.Item) -> None:
    # At collection, before any -m selection or the plugin's ordering reads the markers.
    if item.get_closest_marker("e2e") is not None and item.get_closest_marker("fakegpu") is None:
        item.add_marker(pytest.mark.fakegpu)


@pytest.fixture(scope="module")
def k8s_client(fakegpu_k8s_client: Any) -> Any:
    return fakegpu_k8s_client


@pytest.fixture(scope="module")
def core_v1(fakegpu_core_v1: kclient.CoreV1Api) -> kclient.CoreV1Api:
    return fakegpu_core_v1


@pytest.fixture(scope="module")
def resource_api(fakegpu_resource_api: ResourceApi) -> ResourceApi:
    return fakegpu_resource_api


@pytest.fixture
def namespace(fakegpu_namespace: str) -> str:
    return fakegpu_namespace
