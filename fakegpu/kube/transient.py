"""Which API errors a wait retries: throttling, server-side trouble, connection resets. Any
other error is real and ends the wait (``fakegpu.wait``)."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

# What ``wait_for(transient=...)`` catches; ``is_transient_api_error`` narrows it.
TRANSIENT: tuple[type[BaseException], ...] = (ApiException, ConnectionError, TimeoutError)


def is_transient_api_error(err: BaseException) -> bool:
    """Errors worth retrying inside a wait: throttling, server-side trouble, connection resets."""
    if isinstance(err, ApiException):
        return err.status in (0, 429, 500, 502, 503, 504)
    return isinstance(err, (ConnectionError, TimeoutError))
