"""The API server connection of the ComputeDomain processes (controller, plugin, daemon),
checked once at start: a missing or broken kubeconfig, or an apiserver that does not answer
as Kubernetes does, is one line and an exit code, not a traceback from the first call."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import ReadTimeoutError

from fakegpu.errors import FakegpuError, InvalidInput
from fakegpu.kube import api as kubeapi
from fakegpu.kube import errors

PROBE_TIMEOUT_S = 10
LATE_ANSWER_S = 120


def connect(kubeconfig: Path | None) -> client.ApiClient:
    """A client whose apiserver answered ``/version``. Raises InvalidInput (exit 2) for a
    kubeconfig that cannot be used, FakegpuError (exit 1) for an apiserver that cannot be
    reached or refuses the credentials."""
    where = f"--kubeconfig {kubeconfig}" if kubeconfig is not None else (
        "the in-cluster service account or $KUBECONFIG")
    if kubeconfig is not None and not kubeconfig.is_file():
        raise InvalidInput(f"--kubeconfig {kubeconfig}: no such file")
    try:
        # The check without urllib3's retries (three warnings before the one line); the
        # client returned keeps them, for a long run's passing blips.
        probe = kubeapi.connect(kubeconfig, retries=False)
        api = kubeapi.connect(kubeconfig)
    except (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError,
            AttributeError) as err:  # what load_kube_config raises on a broken file
        raise InvalidInput(f"{where}: not a usable kubeconfig: {_one_line(err)}") from err
    try:
        _probe(probe, where)
    except errors.Unreachable as err:
        api.close()  # type: ignore[no-untyped-call]
        raise FakegpuError(f"cannot reach the apiserver of {where}: "
                           f"{_one_line(err.__cause__ or err)}") from err
    except errors.KubeError as err:
        api.close()  # type: ignore[no-untyped-call]
        raise FakegpuError(str(err)) from err
    except Exception as err:  # refused, timed out, TLS, not Kubernetes at all
        api.close()  # type: ignore[no-untyped-call]
        raise FakegpuError(f"cannot reach the apiserver of {where}: "
                           f"{_one_line(err)}") from err
    finally:
        probe.close()  # type: ignore[no-untyped-call]
    return api


def _probe(probe: client.ApiClient, where: str) -> None:
    """Ask for /version; an apiserver that took the connection but answered late is asked
    again until LATE_ANSWER_S have passed: it is alive, only loaded (an embedded bring-up of
    two large clusters at once, load average 80, left the controller of one dead at start)."""
    deadline = time.monotonic() + LATE_ANSWER_S
    while True:
        try:
            errors.call(f"the apiserver of {where} answered /version with",
                        lambda: client.VersionApi(probe).get_code(
                            _request_timeout=PROBE_TIMEOUT_S))
            return
        except (errors.Unreachable, ReadTimeoutError) as err:
            late = isinstance(err, ReadTimeoutError) or isinstance(err.__cause__,
                                                                   ReadTimeoutError)
            if not late or time.monotonic() >= deadline:
                raise


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."
