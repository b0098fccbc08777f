"""What a call to the apiserver fails with: one vocabulary for every part of fakegpu.

The official client raises ``ApiException`` (the apiserver answered: an HTTP status) or
urllib3/OS errors (it was not reached: refused, TLS not ready, timed out). ``translate`` maps
both once into ``KubeError`` subclasses named for what the caller decides on (gone? someone
else wrote first? not allowed? retry later?), each message one line naming the call and, for
a refusal, the apiserver's own reason (a 422's Status says which field it refused).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from fakegpu.errors import FakegpuError

T = TypeVar("T")

# What a client call can raise when the apiserver refuses it or is not reached.
CLIENT_ERRORS: tuple[type[Exception], ...] = (ApiException, urllib3.exceptions.HTTPError,
                                              OSError)
# Statuses a later try may not see: throttled, or trouble on the server's side.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


class KubeError(FakegpuError):
    """A call to the apiserver failed; ``status`` is its HTTP status, 0 when not reached."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    @property
    def transient(self) -> bool:
        """Whether a later try may succeed (throttled, server trouble, not reached)."""
        return self.status == 0 or self.status in TRANSIENT_STATUSES


class NotFound(KubeError):
    """HTTP 404: the object (or its namespace, or its API) does not exist."""


class Conflict(KubeError):
    """HTTP 409: written by someone else since it was read (or it exists already)."""


class Forbidden(KubeError):
    """HTTP 401/403: the credentials may not do this (RBAC, node authorization, a policy)."""


class Invalid(KubeError):
    """HTTP 400/422: the apiserver refused the object or the request as given."""


class Unreachable(KubeError):
    """The apiserver was not reached: connection refused or reset, TLS, a timeout."""


_BY_STATUS: dict[int, type[KubeError]] = {404: NotFound, 409: Conflict, 401: Forbidden,
                                          403: Forbidden, 400: Invalid, 422: Invalid}


def status_message(body: object) -> str:
    """The ``message`` of an API error's Status body, if it is one."""
    if not isinstance(body, str | bytes) or not body:
        return ""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    return str(parsed.get("message") or "") if isinstance(parsed, dict) else ""


def translate(what: str, err: BaseException) -> KubeError:
    """``err`` from a client call as the vocabulary's error; ``what`` names the call
    ("cannot read Node n1"). A ``KubeError`` is passed through unchanged."""
    if isinstance(err, KubeError):
        return err
    if not isinstance(err, ApiException):
        first = (str(err).splitlines() or [type(err).__name__])[0]
        return Unreachable(f"{what}: {first}")
    status = int(err.status or 0)
    reason = err.reason or (str(err).splitlines() or [""])[0]
    detail = status_message(err.body)
    message = (f"{what}: {f'HTTP {status} ' if status else ''}{reason}"
               f"{f': {detail}' if detail else ''}")
    return _BY_STATUS.get(status, Unreachable if status == 0 else KubeError)(message, status)


def call(what: str, fn: Callable[[], T]) -> T:
    """``fn()`` (one client call), its failure raised as :func:`translate` maps it."""
    try:
        return fn()
    except CLIENT_ERRORS as err:
        raise translate(what, err) from err


def is_transient(err: BaseException) -> bool:
    """Whether a wait should try again after ``err``: throttling, server-side trouble, the
    apiserver not reached (raw client errors and ``KubeError`` alike)."""
    if isinstance(err, KubeError):
        return err.transient
    if isinstance(err, ApiException):
        return int(err.status or 0) in TRANSIENT_STATUSES | {0}
    return isinstance(err, ConnectionError | TimeoutError)


def is_not_found(err: BaseException) -> bool:
    """Whether ``err`` says the object does not exist (a raw client error or ``NotFound``)."""
    return isinstance(err, NotFound) or (isinstance(err, ApiException) and err.status == 404)
