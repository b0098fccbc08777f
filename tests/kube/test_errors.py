"""fakegpu.kube.errors: the client's failures mapped once into one vocabulary."""

from __future__ import annotations

import json

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from fakegpu.errors import FakegpuError
from fakegpu.kube import errors


def _refusal(status: int, reason: str, message: str = "") -> ApiException:
    err = ApiException(status=status, reason=reason)
    err.body = json.dumps({"kind": "Status", "message": message}) if message else None
    return err


@pytest.mark.parametrize(("status", "kind"), [
    (404, errors.NotFound), (409, errors.Conflict), (403, errors.Forbidden),
    (401, errors.Forbidden), (422, errors.Invalid), (400, errors.Invalid),
    (500, errors.KubeError), (429, errors.KubeError)])
def test_each_status_has_its_name(status: int, kind: type[errors.KubeError]) -> None:
    err = errors.translate("cannot read Node n1", _refusal(status, "Why"))
    assert type(err) is kind
    assert err.status == status
    assert isinstance(err, FakegpuError)  # a command prints it as one line


def test_the_message_names_the_call_and_the_apiservers_reason() -> None:
    err = errors.translate("cannot update ResourceClaim c", _refusal(
        422, "Unprocessable Entity", "status.devices[0].data: Invalid value"))
    assert str(err) == ("cannot update ResourceClaim c: HTTP 422 Unprocessable Entity: "
                        "status.devices[0].data: Invalid value")


def test_not_reached_is_unreachable_and_transient() -> None:
    cause = urllib3.exceptions.MaxRetryError(None, "/api", "Connection refused\nmore")  # type: ignore[arg-type]
    err = errors.translate("cannot list pods in ns", cause)
    assert type(err) is errors.Unreachable and err.status == 0
    assert "\n" not in str(err) and str(err).startswith("cannot list pods in ns: ")
    assert err.transient


@pytest.mark.parametrize(("status", "transient"), [(429, True), (503, True), (0, True),
                                                    (404, False), (409, False), (403, False)])
def test_transient_is_the_same_for_raw_and_named_errors(status: int, transient: bool) -> None:
    raw = _refusal(status, "r")
    assert errors.is_transient(raw) is transient
    assert errors.is_transient(errors.translate("x", raw)) is transient


def test_call_raises_the_named_error_and_keeps_the_cause() -> None:
    def refused() -> None:
        raise _refusal(404, "Not Found")

    with pytest.raises(errors.NotFound, match="cannot read pod ns/p: HTTP 404 Not Found") as got:
        errors.call("cannot read pod ns/p", refused)
    assert isinstance(got.value.__cause__, ApiException)
    assert errors.is_not_found(got.value) and errors.is_not_found(got.value.__cause__)


def test_a_named_error_passes_through_and_others_propagate() -> None:
    named = errors.Conflict("already written", 409)
    assert errors.translate("again", named) is named
    with pytest.raises(KeyError):  # not a client error: a bug, not an API failure
        errors.call("x", lambda: {}["missing"])
