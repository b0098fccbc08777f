"""The plugin's only state: one record per prepared claim, ``<state-dir>/claims/<uid>.json``.

One file per claim keeps every call's cost independent of how many claims the node holds:
preparing a claim writes one small file, unpreparing removes it, answering an already
prepared claim reads one. Records are written to a synced temp file first and renamed into
place under the commit lock (``statelock``); callers sync the directory once per batch.

A record we cannot read is moved aside (``<uid>.json.corrupt-<time>``) with one error line and
the claim counts as not prepared: the kubelet asks again for every claim it still needs, and
prepare rebuilds the record and CDI spec from the ResourceClaim. Earlier versions kept every
claim in one ``checkpoint.json`` (version 1); ``recover`` migrates it, or moves it aside the
same way when it is unreadable.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fakegpu import fsutil

from . import names

log = logging.getLogger(__name__)

VERSION = 2  # one record per claim
LEGACY_VERSION = 1  # every claim in one file
LEGACY_FILENAME = "checkpoint.json"
CLAIMS_DIR = "claims"
RECORD_SUFFIX = ".json"


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str = ""


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    cdi_spec: str  # file name of the claim's transient CDI spec
    instance: str = ""  # which instance prepared it (for logs; any instance may unprepare)
    # The version stamp of the plugin that prepared it (version.py). Records of one format
    # VERSION are read by older and newer plugins alike: unknown fields are ignored, missing
    # ones default, so a downgrade keeps every prepared claim (docs/upgrades.md).
    plugin_version: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Any) -> PreparedClaim:
        """Raises ValueError/KeyError/TypeError on anything but a record we wrote."""
        if not isinstance(raw, dict):
            raise TypeError(f"a claim record is an object, not {type(raw).__name__}")
        devices = tuple(PreparedDevice(
            request_names=tuple(_strs(d["request_names"])), pool_name=_str(d["pool_name"]),
            device_name=_str(d["device_name"]), cdi_device_ids=tuple(_strs(d["cdi_device_ids"])),
            share_id=_str(d.get("share_id", ""))) for d in raw["devices"])
        claim = cls(uid=_str(raw["uid"]), namespace=_str(raw["namespace"]),
                    name=_str(raw["name"]), devices=devices, cdi_spec=_str(raw["cdi_spec"]),
                    instance=_str(raw.get("instance", "")),
                    plugin_version=_str(raw.get("plugin_version", "")))
        for what, value in (("uid", claim.uid), ("CDI spec", claim.cdi_spec)):
            if why := names.check(what, value):
                raise ValueError(why)
        return claim


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _strs(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return [_str(v) for v in value]


def _decode(data: bytes) -> Any:
    """JSON from bytes; every way it can be wrong is a ValueError (UnicodeDecodeError is one)."""
    return json.loads(data.decode("utf-8"))


def move_aside(path: Path, why: object) -> Path:
    """Keep an unreadable file for a person to look at, out of the plugin's way."""
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
                            f"-{os.getpid()}")
    os.replace(path, target)
    log.error("corrupt checkpoint %s (%s): moved to %s; the claims it held are prepared again "
              "when the kubelet asks", path, why, target.name)
    return target


class Records:
    """The claim records under ``<state-dir>/claims``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.dir = self.state_dir / CLAIMS_DIR

    def path(self, uid: str) -> Path:
        if why := names.check("claim UID", uid):  # callers validate; this is the last guard
            raise ValueError(why)
        return self.dir / f"{uid}{RECORD_SUFFIX}"

    def get(self, uid: str, *, repair: bool = False) -> PreparedClaim | None:
        """The claim's record, or None (never prepared, or its record is unreadable).

        ``repair`` (only under the commit lock, so no other writer is renaming this record
        right now) moves an unreadable record aside; prepare then writes a new one.
        """
        path = self.path(uid)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            raw = _decode(data)
            if not isinstance(raw, dict) or raw.get("version") != VERSION:
                version = raw.get("version") if isinstance(raw, dict) else None
                raise ValueError(f"unsupported record version {version!r} (want {VERSION})")
            claim = PreparedClaim.from_json(raw.get("claim"))
            if claim.uid != uid:
                raise ValueError(f"it holds claim UID {claim.uid!r}")
            return claim
        except (ValueError, KeyError, TypeError) as err:
            if repair:
                with contextlib.suppress(FileNotFoundError):  # another instance moved it first
                    move_aside(path, err)
            return None

    def stage(self, claim: PreparedClaim) -> Path:
        """A synced temp file holding the record; :meth:`commit` renames it into place.

        The rename is not synced: a record is whole or absent, and one a power loss took
        is prepared again when the kubelet, restarting the node's pods, asks again.
        """
        body = json.dumps({"version": VERSION, "claim": claim.to_json()}, sort_keys=True)
        return fsutil.write_temp(self.path(claim.uid), body)

    def commit(self, uid: str, staged: Path) -> None:
        """Rename a staged record into place (under the commit lock; sync the dir after)."""
        os.replace(staged, self.path(uid))

    def remove(self, uid: str) -> bool:
        """Forget the claim; True when it had a record. Sync the dir after."""
        try:
            self.path(uid).unlink()
        except FileNotFoundError:
            return False
        return True

    def all(self) -> dict[str, PreparedClaim]:
        """Every readable record (for tests, tools, and the time-sliced GPU's mode check: other
        calls never need the whole set)."""
        found = {}
        for path in sorted(self.dir.glob(f"*{RECORD_SUFFIX}")):
            uid = path.name[:-len(RECORD_SUFFIX)]
            if not names.problem(uid) and (claim := self.get(uid)) is not None:
                found[uid] = claim
        return found

    def sync(self) -> None:
        """Make renames and removals in the records' directory durable."""
        fsutil.fsync_dir(self.dir)

    def recover(self) -> None:
        """Startup housekeeping, under the cleanup lock: temp files a killed writer left,
        and the single-file checkpoint of earlier versions (migrated, or moved aside)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for tmp in [*fsutil.remove_stale_temps(self.dir, f"*{RECORD_SUFFIX}"),
                    # earlier versions' temp names: .checkpoint-<random>.tmp
                    *_unlink_all(self.state_dir.glob(".checkpoint-*.tmp"))]:
            log.info("removed a temp file a killed writer left: %s", tmp)
        self.migrate()

    def legacy_exists(self) -> bool:
        return (self.state_dir / LEGACY_FILENAME).exists()

    def migrate(self) -> None:
        """Move the claims of an earlier release's ``checkpoint.json`` to records (under the
        commit lock). Called at start and whenever a call finds the file, so claims that an
        instance of the earlier release prepares during a rolling update are picked up too."""
        legacy = self.state_dir / LEGACY_FILENAME
        try:
            data = legacy.read_bytes()
        except FileNotFoundError:
            return
        try:
            raw = _decode(data)
            if not isinstance(raw, dict) or raw.get("version") != LEGACY_VERSION:
                version = raw.get("version") if isinstance(raw, dict) else None
                raise ValueError(f"unsupported checkpoint version {version!r} "
                                 f"(want {LEGACY_VERSION})")
            claims = [PreparedClaim.from_json(c) for c in dict(raw.get("claims") or {}).values()]
        except (ValueError, KeyError, TypeError) as err:
            move_aside(legacy, err)
            return
        staged = [(c.uid, self.stage(c)) for c in claims if not self.path(c.uid).exists()]
        for uid, tmp in staged:
            self.commit(uid, tmp)
        self.sync()
        legacy.unlink()  # only now: a crash before this migrates again, idempotently
        fsutil.fsync_dir(self.state_dir)
        log.info("migrated %d prepared claims from %s to one record each in %s",
                 len(claims), legacy, self.dir)


def _unlink_all(paths: Iterable[Path]) -> list[Path]:
    removed = []
    for path in paths:
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed
