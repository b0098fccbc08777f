"""Before the suite starts: is the kubeconfig's server a Kubernetes apiserver at all?

One ``GET /version`` through the kubernetes client. A server that is not reached, refuses the
credentials, or answers without a Kubernetes version becomes one line (``MissingPrerequisite``,
exit 3) instead of every check failing with the client's tracebacks.
"""

from __future__ import annotations

import json
from pathlib import Path

from fakegpu.errors import InvalidInput, MissingPrerequisite, printable
from fakegpu.kube import api as kapi
from fakegpu.kube.errors import KubeError, call

TIMEOUT_S = 10.0


def server_version(kubeconfig: Path) -> str:
    """The apiserver's ``gitVersion`` (``v1.37.2``); InvalidInput for a kubeconfig the client
    cannot read, MissingPrerequisite for a server that is not a reachable apiserver."""
    where = printable(str(kubeconfig))
    try:
        client = kapi.connect(kubeconfig, retries=False)
    except Exception as err:  # the client's ConfigException, YAML and key errors alike
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise InvalidInput(f"--kubeconfig: {where}: cannot use it: {printable(first)}") from None
    host = printable(str(client.configuration.host))
    try:
        body = call(f"GET {host}/version", lambda: kapi.get(client, "/version", TIMEOUT_S))
    except KubeError as err:
        raise MissingPrerequisite(f"the cluster of {where} is not usable: {printable(str(err))}"
                                  ) from None
    finally:
        client.close()  # type: ignore[no-untyped-call]
    version = _git_version(body)
    if version is None:
        raise MissingPrerequisite(f"the cluster of {where}: {host} is not a Kubernetes "
                                  "apiserver (GET /version has no gitVersion)")
    return version


def _git_version(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    version = doc.get("gitVersion") if isinstance(doc, dict) else None
    return version if isinstance(version, str) and version.startswith("v") else None
