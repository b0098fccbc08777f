"""Transient CDI spec files, one per prepared claim, in the runtime's CDI directory: their
names, their atomic writing, and the checks a restarted plugin makes on them.

Every plugin's specs are named ``<driver with _ for .>-claim_<uid>.json``, so one driver's
cleanup never touches another's. What a spec holds is each driver's own (``build_spec`` in
its package).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fakegpu import fsutil

# 0.6.0 suffices for env, mounts and device nodes; a spec using netDevices says 1.1.0 (the
# oldest CDI version that knows them), and runtimes refuse a spec older than its fields.
CDI_VERSION = "0.6.0"


def spec_filename(driver: str, claim_uid: str) -> str:
    return f"{driver.replace('.', '_')}-claim_{claim_uid}.json"


def device_id(kind: str, name: str) -> str:
    """The fully qualified CDI device (``vendor/class=name``) the kubelet hands the runtime."""
    return f"{kind}={name}"


def stage_spec(cdi_root: Path, filename: str, spec: dict[str, Any]) -> Path:
    """The spec in a temp file; the caller renames it to ``cdi_root/filename``.

    The temp name (``.<filename>.<random>.tmp``, fsutil's) is dot-prefixed and not ``.json``:
    CDI loaders read only ``*.json`` / ``*.yaml``, so the runtime never sees half a spec. Not
    synced: the CDI dir is usually a tmpfs, emptied at boot, and a spec lost or torn by a crash
    is found by :func:`spec_sound` and written again before a claim is answered from its record.
    """
    return fsutil.write_temp(Path(cdi_root) / filename, json.dumps(spec, indent=1), mode=0o644,
                             sync=False)


def spec_sound(cdi_root: Path, filename: str, kind: str, device_ids: Sequence[str]) -> bool:
    """True when the spec exists, parses, is of ``kind`` and defines every one of
    ``device_ids``."""
    try:
        spec = json.loads((Path(cdi_root) / filename).read_bytes())
        defined = {d["name"] for d in spec["devices"]} if spec["kind"] == kind else set()
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(i.partition("=")[2] in defined for i in device_ids)


def remove_spec(cdi_root: Path, filename: str) -> None:
    (Path(cdi_root) / filename).unlink(missing_ok=True)


def remove_stale_temps(cdi_root: Path, driver: str) -> list[Path]:
    """Temp files a killed writer of this driver left (other drivers' files stay)."""
    if not Path(cdi_root).is_dir():
        return []
    return fsutil.remove_stale_temps(cdi_root, spec_filename(driver, "*"))


def claim_specs(cdi_root: Path, driver: str) -> dict[str, Path]:
    """Claim UID -> this driver's spec file in ``cdi_root`` (other drivers' are not ours)."""
    suffix = ".json"
    prefix = spec_filename(driver, "")[:-len(suffix)]
    if not Path(cdi_root).is_dir():
        return {}
    return {p.name[len(prefix):-len(suffix)]: p
            for p in Path(cdi_root).glob(spec_filename(driver, "*"))}
