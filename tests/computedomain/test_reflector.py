"""The reflector's list-then-watch loop with a fake list call and fake watch streams (the
real apiserver path is in test_controller_apiserver.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fakegpu.computedomain.reflector import Reflector, Source, say
from fakegpu.kube import errors

Event = Mapping[str, Any]


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}}


class Api:
    """Lists in turn from ``lists``, watch streams in turn from ``streams``; once both are
    used up, ``stop`` is set (so that ``run`` ends) and every call fails."""

    def __init__(self, lists: list[tuple[str, list[dict[str, Any]]]],
                 streams: list[list[Event | Exception]]) -> None:
        self.lists, self.streams = lists, streams
        self.stop = threading.Event()
        self.list_kwargs: list[dict[str, Any]] = []
        self.watched_from: list[str] = []
        self.seen: list[tuple[str, str]] = []

    def list_call(self, *_args: Any, **kwargs: Any) -> Any:
        self.list_kwargs.append(kwargs)
        if not self.lists:
            self.stop.set()
            raise AssertionError("listed once more than expected")
        rv, items = self.lists.pop(0)
        return SimpleNamespace(data=json.dumps(
            {"metadata": {"resourceVersion": rv}, "items": items}).encode())

    def stream(self, rv: str) -> Iterator[Event]:
        self.watched_from.append(rv)
        if not self.streams:
            self.stop.set()
            return
        for item in self.streams.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item
        if not self.streams:
            self.stop.set()

    def reflector(self) -> Reflector:
        return Reflector(Source("things", self.list_call, kwargs={"label_selector": "k"}),
                         lambda kind, o: self.seen.append((kind, o["metadata"]["name"])),
                         stream=self.stream)


@pytest.mark.parametrize("expiry", [
    ApiException(status=410, reason="Expired"),  # what kubernetes.watch.Watch raises
    {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}},
], ids=["exception", "error-event"])
def test_an_expired_watch_leads_to_a_relist_that_hands_on_what_vanished(
        expiry: Event | Exception) -> None:
    api = Api(lists=[("10", [obj("a", "1"), obj("b", "2")]), ("20", [obj("a", "11")])],
              streams=[[{"type": "MODIFIED", "object": obj("a", "11")}, expiry], []])
    r = api.reflector()
    r.step()  # listed, watched from 10, expired
    assert r.listed.is_set() and r.rv is None
    assert api.seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a")]
    r.step()
    assert r.rv == "20"
    assert api.watched_from == ["10", "20"]
    assert len(api.list_kwargs) == 2 and api.list_kwargs[0]["label_selector"] == "k"
    # b was deleted while no watch ran: the relist says so.
    assert api.seen[3:] == [("DELETED", "b"), ("ADDED", "a")]
    assert [o["metadata"]["name"] for o in r.objects()] == ["a"]


def test_a_watch_that_ends_resumes_from_the_last_version_seen_bookmarks_included() -> None:
    api = Api(lists=[], streams=[[
        {"type": "ADDED", "object": obj("c", "31")},
        {"type": "DELETED", "object": obj("c", "32")},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "40"}}}]])
    r = api.reflector()
    r.rv = "30"
    r.step()
    assert r.rv == "40"
    assert api.list_kwargs == []  # no list: the watch resumed
    assert api.seen == [("ADDED", "c"), ("DELETED", "c")]
    assert r.objects() == []


def test_other_errors_back_off_and_resume_from_the_last_version_without_a_relist() -> None:
    api = Api(lists=[("5", [])],
              streams=[[{"type": "ADDED", "object": obj("d", "6")},
                        ApiException(status=500, reason="boom")],
                       [{"type": "ADDED", "object": obj("e", "7")}]])
    r = api.reflector()
    r.run(api.stop)  # lists, watches from 5, fails; backs off, watches from 6; ends (stop set)
    assert api.watched_from == ["5", "6"]
    assert len(api.list_kwargs) == 1
    assert api.seen == [("ADDED", "d"), ("ADDED", "e")]


@pytest.mark.parametrize("failure", [
    ApiException(status=403, reason="Forbidden"),  # what the client raises
    {"type": "ERROR", "object": {"kind": "Status", "code": 403, "message": "no watch"}},
], ids=["exception", "error-event"])
def test_a_failed_watch_raises_in_the_one_error_vocabulary(failure: Event | Exception) -> None:
    """Not an expiry: the round fails with a KubeError naming the source and the status (what
    the controller's and the daemon's logs print), and the version seen is kept."""
    api = Api(lists=[("5", [])], streams=[[{"type": "ADDED", "object": obj("d", "6")},
                                           failure]])
    r = api.reflector()
    with pytest.raises(errors.KubeError, match="things") as failed:
        r.step()
    assert failed.value.status == 403
    assert r.rv == "6"
    assert say(failed.value) == str(failed.value) and "\n" not in say(failed.value)
