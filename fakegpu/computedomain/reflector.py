"""List, then watch, one kind of object: the controller's view of the API server.

client-go's reflector and store, reduced to what the ComputeDomain controller needs. A
reflector lists its objects (the store, keyed by namespace/name), hands each one on, then
watches from the list's resourceVersion (``kubernetes.watch.Watch``, bookmarks on): every
event updates the store and is handed on. A watch that ends (the server's timeout) resumes
from the last resourceVersion seen; one that expired (410 Gone: the apiserver has compacted
that version away) is replaced by a fresh list, which hands on the objects that vanished in
between as deleted, so no deletion is missed. Any other error (the apiserver away, a refused
request) waits with an exponential backoff and resumes from where it was.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import watch

from fakegpu.kube import errors

from .workqueue import backoff_s

log = logging.getLogger(__name__)
LIST_TIMEOUT_S = 30
# Each watch asks the server to end it after 5-10 minutes (client-go's spread), so that a
# connection silently lost is noticed and the watches of many clients do not end together.
WATCH_S = 300
GONE = 410
ADDED, MODIFIED, DELETED, BOOKMARK, ERROR = "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"

Handler = Callable[[str, dict[str, Any]], None]  # (event type, object)
Stream = Callable[[str], Iterable[Mapping[str, Any]]]  # resourceVersion -> watch events


@dataclass(frozen=True)
class Source:
    """What one reflector follows: a list call of the official client and its arguments."""

    what: str  # for the log: "daemonsets fakegpu-system"
    list_call: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)  # label_selector


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class Reflector:
    def __init__(self, source: Source, handle: Handler, stream: Stream | None = None) -> None:
        self.source = source
        self.listed = threading.Event()  # set once the first list was handed on
        self.rv: str | None = None  # where the next watch starts; None: list first
        self._handle = handle
        self._stream = stream or self._watch_stream
        self._store: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watch: watch.Watch | None = None

    def objects(self) -> list[dict[str, Any]]:
        """What the reflector last saw (a copy of the list; the objects are shared)."""
        with self._lock:
            return list(self._store.values())

    def run(self, stop: threading.Event) -> None:
        """Follow the source until ``stop`` (or :meth:`close`)."""
        failures = 0
        while not (stop.is_set() or self._stopping.is_set()):
            try:
                self.step()
                failures = 0
            except Exception as err:  # the apiserver away or refusing: wait, then resume
                if stop.is_set() or self._stopping.is_set():
                    break  # close() shut the watch's socket: its read fails, as it should
                delay = backoff_s(failures)
                failures += 1
                log.warning("%s: %s; again in %.2fs", self.source.what, say(err), delay)
                if stop.wait(delay):
                    break

    def close(self) -> None:
        """End :meth:`run` (from another thread): the current watch's socket is shut."""
        self._stopping.set()
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]

    def step(self) -> None:
        """One round: list when there is no resourceVersion to start from, then follow one
        watch stream from it. After an expired watch (410) the next round lists again; any
        other error propagates, and the next round resumes from the last version seen."""
        if self.rv is None:
            self.rv = self.relist()
        try:
            try:
                self.follow(self._stream(self.rv))
            except errors.CLIENT_ERRORS as err:
                raise errors.translate(f"cannot watch {self.source.what}", err) from err
        except (Expired, errors.KubeError) as err:
            if isinstance(err, errors.KubeError) and err.status != GONE:
                raise
            log.info("%s: watch expired at resourceVersion %s; listing again",
                     self.source.what, self.rv)
            self.rv = None

    def relist(self) -> str:
        """List the source: the store becomes the list; every object is handed on as ADDED,
        every one that vanished since as DELETED. Returns the list's resourceVersion."""
        s = self.source
        resp = errors.call(f"cannot list {s.what}", lambda: s.list_call(
            *s.args, **s.kwargs, _preload_content=False, _request_timeout=LIST_TIMEOUT_S))
        body = json.loads(resp.data)
        items: list[dict[str, Any]] = list(body.get("items") or [])
        fresh = {_key(o): o for o in items}
        with self._lock:
            vanished = [o for k, o in self._store.items() if k not in fresh]
            self._store = fresh
        for obj in vanished:
            self._handle(DELETED, obj)
        for obj in items:
            self._handle(ADDED, obj)
        self.listed.set()
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def follow(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Apply one watch stream's events to the store and hand them on; ``rv`` follows
        each one (bookmarks included). Raises Expired on a 410 event."""
        for event in events:
            kind = str(event.get("type"))
            obj = event.get("raw_object") or event.get("object") or {}
            if kind == ERROR:
                code = obj.get("code")
                if code == GONE:
                    raise Expired(str(obj.get("message") or ""))
                raise errors.KubeError(f"watch of {self.source.what} failed: HTTP {code} "
                                       f"{obj.get('message') or ''}", int(code or 0))
            self.rv = str((obj.get("metadata") or {}).get("resourceVersion") or self.rv)
            if kind == BOOKMARK:
                continue
            with self._lock:
                if kind == DELETED:
                    self._store.pop(_key(obj), None)
                else:
                    self._store[_key(obj)] = obj
            self._handle(kind, obj)
            if self._stopping.is_set():
                break

    def _watch_stream(self, rv: str) -> Iterable[Mapping[str, Any]]:
        if self._stopping.is_set():
            return []
        timeout = int(WATCH_S * random.uniform(1.0, 2.0))
        # return_type "object": every object a dict, as the list gives them.
        w = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
        self._watch = w
        s = self.source
        # The read timeout outlasts the server's own end of the watch: a longer silence is a
        # lost connection.
        events: Iterable[Mapping[str, Any]] = w.stream(  # type: ignore[no-untyped-call]
            s.list_call, *s.args, **s.kwargs, resource_version=rv, allow_watch_bookmarks=True,
            timeout_seconds=timeout, _request_timeout=(LIST_TIMEOUT_S, timeout + LIST_TIMEOUT_S))
        return events


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def say(err: BaseException) -> str:
    """One line for a failed round: the error vocabulary's message (a raw client error
    mapped to it first), else the error's type and text."""
    if isinstance(err, errors.CLIENT_ERRORS):
        err = errors.translate("apiserver call failed", err)
    if isinstance(err, errors.KubeError):
        return str(err)
    return f"{type(err).__name__}: {err}"
