"""Sharing configs: opaque device configuration on the class or the claim, per request. Pure.

The kinds, fields and defaults are NVIDIA's (``api/nvidia.com/resource/v1beta1``): ``GpuConfig``
for whole GPUs and ``MigDeviceConfig`` for MIG devices, each with ``sharing.strategy``
``TimeSlicing`` (``timeSlicingConfig.interval``: Default, Short, Medium, Long; GPUs only) or
``MPS`` (``mpsConfig.defaultActiveThreadPercentage`` 0..100,
``defaultPinnedDeviceMemoryLimit``, ``defaultPerDevicePinnedMemoryLimit`` by device index or
UUID). The API group is ``resource.nvidia.com/v1beta1`` with NVIDIA's driver name and
``resource.fakegpu.dev/v1beta1`` with fakegpu's own; decoding is strict, as NVIDIA's is (an
unknown field is an error).

Precedence as NVIDIA's driver (and Kubernetes) defines it: the allocation's configs of this
driver, class configs before claim configs, each in order; for every allocated device the last
config that names its request wins, else the last one naming no request that fits the device's
type; a config naming the request but of the wrong type (GpuConfig on a MIG device) is an
error. A device no config applies to gets nothing (NVIDIA's default with its TimeSlicingSettings
gate off); a config without ``sharing`` means time-slicing, interval Default.

Applying a config (fakegpu has no processes to schedule) is making it visible to the
container: per device ``FAKEGPU_DEVICE_<NAME>_SHARING_STRATEGY`` and its settings, and for MPS
``CUDA_MPS_PIPE_DIRECTORY`` as NVIDIA's MPS control daemon sets it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fakegpu import drivers

NVIDIA_GROUP_VERSION = drivers.config_api_version(drivers.NVIDIA)
OWN_GROUP_VERSION = drivers.config_api_version(drivers.FAKEGPU)
GPU_CONFIG = "GpuConfig"
MIG_CONFIG = "MigDeviceConfig"
TIME_SLICING = "TimeSlicing"
MPS = "MPS"
INTERVALS = ("Default", "Short", "Medium", "Long")
MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"  # where NVIDIA's MPS daemon's pipes appear
MPS_LOG_DIRECTORY = "/var/log/nvidia-mps"  # fakegpu's stand-in's log, as nvidia-cuda-mps-control
MPS_LOG = "control.log"


def group_version(driver: str) -> str:
    """The configs' apiVersion: NVIDIA's with NVIDIA's driver name, else fakegpu's own."""
    return drivers.config_api_version(driver)


class ConfigError(ValueError):
    """A config this claim cannot use; the message names the config and the field."""


@dataclass(frozen=True)
class Sharing:
    strategy: str = TIME_SLICING
    interval: str = "Default"  # TimeSlicing
    active_thread_percentage: int | None = None  # MPS
    pinned_memory_limit: str = ""  # MPS, e.g. "10Gi"
    per_device_pinned_memory_limit: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DeviceConfig:
    kind: str  # GpuConfig | MigDeviceConfig
    requests: tuple[str, ...]  # empty: every request of the claim
    sharing: Sharing
    where: str  # "class config 1" / "claim config 2": how errors name it


def _fields(obj: Any, where: str, allowed: Sequence[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: is {type(obj).__name__}, expected an object")
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field (expected one of "
                          f"{', '.join(allowed)})")
    return obj


# No sign, no exponent, no nan/inf: a limit is a size. fullmatch, as match's `$` passes "1Gi\n".
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")


def _quantity(value: Any, where: str) -> str:
    text = str(value)
    if isinstance(value, bool) or not _QUANTITY.fullmatch(text):
        raise ConfigError(f"{where}: {value!r} is not a quantity (e.g. 10Gi)")
    return text


def _sharing(raw: Any, where: str, kind: str) -> Sharing:
    data = _fields(raw, where, ("strategy", "timeSlicingConfig", "mpsConfig")
                   if kind == GPU_CONFIG else ("strategy", "mpsConfig"))
    strategy = data.get("strategy")
    if strategy not in (TIME_SLICING, MPS):
        raise ConfigError(f"{where}.strategy: {strategy!r} is not a sharing strategy "
                          f"(expected {TIME_SLICING} or {MPS})")
    if strategy == TIME_SLICING:
        if data.get("mpsConfig") is not None:
            raise ConfigError(f"{where}.mpsConfig: cannot be used with the {TIME_SLICING} "
                              "strategy")
        ts = _fields(data.get("timeSlicingConfig") or {}, f"{where}.timeSlicingConfig",
                     ("interval",))
        interval = ts.get("interval", "Default")
        if interval not in INTERVALS:
            raise ConfigError(f"{where}.timeSlicingConfig.interval: {interval!r} is not one "
                              f"of {', '.join(INTERVALS)}")
        return Sharing(strategy=TIME_SLICING, interval=str(interval))
    if data.get("timeSlicingConfig") is not None:
        raise ConfigError(f"{where}.timeSlicingConfig: cannot be used with the {MPS} strategy")
    mps = _fields(data.get("mpsConfig") or {}, f"{where}.mpsConfig",
                  ("defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit",
                   "defaultPerDevicePinnedMemoryLimit"))
    pct = mps.get("defaultActiveThreadPercentage")
    if pct is not None and (isinstance(pct, bool) or not isinstance(pct, int)
                            or not 0 <= pct <= 100):
        raise ConfigError(f"{where}.mpsConfig.defaultActiveThreadPercentage: {pct!r} must be "
                          "an integer from 0 to 100")
    limit = mps.get("defaultPinnedDeviceMemoryLimit")
    per = mps.get("defaultPerDevicePinnedMemoryLimit") or {}
    if not isinstance(per, dict):
        raise ConfigError(f"{where}.mpsConfig.defaultPerDevicePinnedMemoryLimit: expected a "
                          "map of device index or UUID to a quantity")
    per_device = tuple(sorted(
        (str(k), _quantity(v, f"{where}.mpsConfig.defaultPerDevicePinnedMemoryLimit.{k}"))
        for k, v in per.items()))
    return Sharing(strategy=MPS, active_thread_percentage=pct,
                   pinned_memory_limit=(_quantity(limit, f"{where}.mpsConfig."
                                                  "defaultPinnedDeviceMemoryLimit")
                                        if limit is not None else ""),
                   per_device_pinned_memory_limit=per_device)


def parse(configs: Sequence[Mapping[str, Any]], driver: str, group_version: str
          ) -> list[DeviceConfig]:
    """The allocation's opaque configs of ``driver``, class ones first, each checked."""
    out: list[DeviceConfig] = []
    for source, label in (("FromClass", "class"), ("FromClaim", "claim")):
        numbered = [c for c in configs if c.get("source") == source]
        for i, entry in enumerate(numbered, 1):
            opaque = entry.get("opaque") or {}
            if opaque.get("driver") != driver:
                continue  # another driver's, or not opaque
            where = f"{label} config {i} (opaque.parameters)"
            params = opaque.get("parameters")
            if not isinstance(params, dict):
                raise ConfigError(f"{where}: expected an object with apiVersion and kind")
            if params.get("apiVersion") != group_version:
                raise ConfigError(f"{where}.apiVersion: {params.get('apiVersion')!r}, expected "
                                  f"{group_version}")
            kind = params.get("kind")
            if kind not in (GPU_CONFIG, MIG_CONFIG):
                raise ConfigError(f"{where}.kind: {kind!r} is not a kind of this driver "
                                  f"(expected {GPU_CONFIG} or {MIG_CONFIG})")
            data = _fields(params, where, ("apiVersion", "kind", "metadata", "sharing"))
            sharing = (_sharing(data["sharing"], f"{where}.sharing", kind)
                       if data.get("sharing") is not None else Sharing())
            out.append(DeviceConfig(kind=kind, requests=tuple(entry.get("requests") or ()),
                                    sharing=sharing, where=f"{label} config {i}"))
    return out


def select(configs: Sequence[DeviceConfig], request: str, device_type: str,
           device_name: str) -> Sharing | None:
    """The sharing that applies to one allocated device (NVIDIA's precedence); None when no
    config does (the device's own default: nothing is set)."""
    wanted = MIG_CONFIG if device_type == "mig" else GPU_CONFIG
    for config in reversed(configs):
        if request in config.requests:
            if config.kind != wanted:
                raise ConfigError(f"{config.where}: cannot apply {config.kind} to device "
                                  f"{device_name} of type {device_type} (request {request})")
            return config.sharing
        if not config.requests and config.kind == wanted:
            return config.sharing
    return None


def env(prefix: str, sharing: Sharing, device_index: int, device_uuid: str) -> list[str]:
    """What the container sees of a device's sharing (``prefix``: FAKEGPU_DEVICE_<NAME>)."""
    out = [f"{prefix}_SHARING_STRATEGY={sharing.strategy}"]
    if sharing.strategy == TIME_SLICING:
        out.append(f"{prefix}_TIMESLICE_INTERVAL={sharing.interval}")
        return out
    out.append(f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIRECTORY}")
    if sharing.active_thread_percentage is not None:
        out.append(f"{prefix}_MPS_ACTIVE_THREAD_PERCENTAGE={sharing.active_thread_percentage}")
    limit = dict(sharing.per_device_pinned_memory_limit)
    own = limit.get(device_uuid, limit.get(str(device_index), sharing.pinned_memory_limit))
    if own:
        out.append(f"{prefix}_MPS_PINNED_DEVICE_MEMORY_LIMIT={own}")
    return out


def mps_devices(devices: Sequence[tuple[str, str, Sharing | None]]
                ) -> list[tuple[str, str, Sharing]]:
    """(device name, UUID, sharing) of the claim's devices shared through MPS."""
    return [(n, u, s) for n, u, s in devices if s is not None and s.strategy == MPS]


def control_log(claim: str, devices: Sequence[tuple[str, str, Sharing]]) -> str:
    """What the claim's MPS control daemon stand-in records: one line per device and setting,
    read by the container from MPS_LOG_DIRECTORY/control.log (no daemon process runs)."""
    lines = [f"fakegpu MPS control daemon stand-in for claim {claim}"]
    for index, (name, uuid, sharing) in enumerate(devices):
        limit = dict(sharing.per_device_pinned_memory_limit)
        own = limit.get(uuid, limit.get(str(index), sharing.pinned_memory_limit))
        pct = sharing.active_thread_percentage
        lines.append(f"device {name} uuid={uuid} "
                     f"active_thread_percentage={100 if pct is None else pct} "
                     f"pinned_device_memory_limit={own or 'none'}")
    return "\n".join(lines) + "\n"
