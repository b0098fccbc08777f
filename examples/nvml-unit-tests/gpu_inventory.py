"""A tiny piece of code that calls NVML in-process, as a monitoring agent or a scheduler
plugin would: which GPUs of this machine are usable."""

from __future__ import annotations

from dataclasses import dataclass

import pynvml


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_mib: int


def usable_gpus() -> tuple[list[GpuInfo], list[int]]:
    """The GPUs that answer, and the indices of those that are lost or report a double-bit
    ECC error (not usable for new work)."""
    pynvml.nvmlInit()
    try:
        usable: list[GpuInfo] = []
        broken: list[int] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uncorrected = pynvml.nvmlDeviceGetTotalEccErrors(
                    handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    pynvml.NVML_VOLATILE_ECC)
                if uncorrected:
                    broken.append(index)
                    continue
                usable.append(GpuInfo(
                    index=index, uuid=pynvml.nvmlDeviceGetUUID(handle),
                    name=pynvml.nvmlDeviceGetName(handle),
                    memory_mib=pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20))
            except pynvml.NVMLError_GpuIsLost:
                broken.append(index)
        return usable, broken
    finally:
        pynvml.nvmlShutdown()
