"""pytest plugin (entry point ``pytest11``): markers, options and cluster fixtures."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end tests against a real Kubernetes cluster")
