"""What several test packages share: a real kube-apiserver with etcd and no controllers; a
short temp dir for unix sockets."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

# A context manager factory rather than one shared control plane: each module keeps its own
# apiserver (their objects, nodes and namespaces must not meet), started only when used.
StartControlPlane = Callable[..., AbstractContextManager[Any]]


@pytest.fixture(scope="session")
def bare_control_plane(tmp_path_factory: pytest.TempPathFactory) -> StartControlPlane:
    """``with bare_control_plane() as cp:`` a real etcd + kube-apiserver (``cp.kubeconfig``);
    ``bare_control_plane(controllers=True)`` adds kube-controller-manager and kube-scheduler.
    The binaries are obtained (built from the Go module proxy when missing, as in CI) rather
    than skipped for: only a host that truly cannot have them skips, saying why."""

    @contextmanager
    def start(controllers: bool = False) -> Iterator[Any]:
        from fakegpu.cluster.artifacts import binaries
        from fakegpu.cluster.embedded.controlplane import ControlPlane
        from fakegpu.errors import MissingPrerequisite

        try:
            bins = binaries.ensure()
        except MissingPrerequisite as err:
            pytest.skip(f"no kube-apiserver: cannot obtain the Kubernetes binaries: {err}")
        with ControlPlane(tmp_path_factory.mktemp("cp"), bins, controllers=controllers) as cp:
            yield cp

    return start


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path: unix socket paths below it must stay under 108 bytes
    (pytest's tmp_path is too long). World-readable: a container's user may need to enter."""
    path = Path(tempfile.mkdtemp(prefix="fg-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
