"""The plugin's only state: prepared claims, as versioned JSON written atomically.

Every instance of the driver on a node shares this file (seamless upgrade), so callers hold
the state lock (``driver.StateLock``) around load -> change -> save. A checkpoint we cannot
read is an error, never silently emptied: forgetting prepared claims would leak CDI specs and
hand the kubelet different answers for the same claim.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.errors import FakegpuError

VERSION = 1
FILENAME = "checkpoint.json"


class CheckpointError(FakegpuError):
    """The checkpoint exists but is unreadable: a person must look at it."""


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


@dataclass
class Checkpoint:
    claims: dict[str, PreparedClaim] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "claims": {uid: asdict(c) for uid, c in self.claims.items()}}

    @classmethod
    def from_json(cls, data: Any) -> Checkpoint:
        if not isinstance(data, dict) or data.get("version") != VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            raise ValueError(f"unsupported checkpoint version {version!r} (want {VERSION})")
        claims: dict[str, PreparedClaim] = {}
        for uid, raw in dict(data.get("claims") or {}).items():
            devices = tuple(PreparedDevice(
                request_names=tuple(d["request_names"]), pool_name=d["pool_name"],
                device_name=d["device_name"], cdi_device_ids=tuple(d["cdi_device_ids"]),
                share_id=d.get("share_id", "")) for d in raw["devices"])
            claims[uid] = PreparedClaim(uid=raw["uid"], namespace=raw["namespace"],
                                        name=raw["name"], devices=devices,
                                        cdi_spec=raw["cdi_spec"], instance=raw.get("instance", ""))
        return cls(claims=claims)


def load(state_dir: Path) -> Checkpoint:
    """The checkpoint, or an empty one when none was written yet. Raises CheckpointError."""
    path = Path(state_dir) / FILENAME
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Checkpoint()
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from err
    try:
        return Checkpoint.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"corrupt checkpoint {path}: {err}; move it aside to start over "
            "(claims it lists then need their CDI specs removed by hand)") from err


def save(state_dir: Path, checkpoint: Checkpoint) -> None:
    """Write temp file + fsync + rename + fsync(dir): a crash leaves the old or the new file."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".checkpoint-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(checkpoint.to_json(), out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, state_dir / FILENAME)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
