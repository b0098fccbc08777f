/* Per-device queries: identity, memory, PCI, modes and plausible telemetry. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "fakegpu.h"
#include "visible.h"

#define MIB (1024ull * 1024ull)

/* A query that only makes sense for a whole GPU answers NOT_SUPPORTED on a MIG device. */
#define FG_WHOLE_GPU(ref)                                                                    \
    do {                                                                                     \
        if ((ref).is_mig) return NVML_ERROR_NOT_SUPPORTED;                                   \
    } while (0)

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    FG_DEVICE(device, ref, name);
    const struct fgs_gpu_static *s = fg_static(ref.gpu);
    if (!ref.is_mig) return fg_copy_str(name, length, s->name);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    const struct fgs_profile *p = fg_gi_profile(ref.gpu, &d, ref.gi_slot);
    char buf[FGS_STR + 48];
    snprintf(buf, sizeof(buf), "%s MIG %s", s->name, p->name);
    buf[FGS_STR - 1] = '\0';
    return fg_copy_str(name, length, buf);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    FG_DEVICE(device, ref, uuid);
    if (!ref.is_mig) return fg_copy_str(uuid, length, fg_static(ref.gpu)->uuid);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    char buf[FGS_STR];
    fg_mig_uuid(ref.gpu, d.gis[ref.gi_slot].id, d.gis[ref.gi_slot].cis[ref.ci_slot].id, buf,
                sizeof(buf));
    return fg_copy_str(uuid, length, buf);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    FG_DEVICE(device, ref, serial);
    return fg_copy_str(serial, length, fg_static(ref.gpu)->serial);
}

nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    FG_DEVICE(device, ref, partNumber);
    FG_WHOLE_GPU(ref);
    return fg_copy_str(partNumber, length, fg_static(ref.gpu)->board_part_number);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    FG_DEVICE(device, ref, version);
    FG_WHOLE_GPU(ref);
    return fg_copy_str(version, length, "96.00.99.00.01");
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    FG_DEVICE(device, ref, type);
    *type = (nvmlBrandType_t)fg_static(ref.gpu)->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    FG_DEVICE(device, ref, arch);
    *arch = fg_static(ref.gpu)->architecture;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    FG_DEVICE(device, ref, major);
    FG_CHECK_PTR(minor);
    *major = (int)fg_static(ref.gpu)->cc_major;
    *minor = (int)fg_static(ref.gpu)->cc_minor;
    return NVML_SUCCESS;
}

/* total, reserved, used of a device (whole GPU or MIG device) */
static nvmlReturn_t memory_of(const struct fg_ref *ref, unsigned long long *total,
                              unsigned long long *reserved)
{
    const struct fgs_gpu_static *s = fg_static(ref->gpu);
    if (!ref->is_mig) {
        *total = s->memory_total;
        *reserved = s->memory_reserved;
        return NVML_SUCCESS;
    }
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref->gpu, &d));
    *total = fg_gi_profile(ref->gpu, &d, ref->gi_slot)->memory_mib * MIB;
    *reserved = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    FG_DEVICE(device, ref, memory);
    unsigned long long total, reserved;
    FG_TRY(memory_of(&ref, &total, &reserved));
    memory->total = total;
    memory->used = reserved; /* v1 counts the driver reservation as used */
    memory->free = total - reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    FG_DEVICE(device, ref, memory);
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, reserved;
    FG_TRY(memory_of(&ref, &total, &reserved));
    memory->total = total;
    memory->reserved = reserved;
    memory->used = 0;
    memory->free = total - reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    FG_DEVICE(device, ref, bar1Memory);
    FG_WHOLE_GPU(ref);
    /* Data-center parts map the whole framebuffer: the BAR is its next power of two (a real
     * H200, 143771 MiB: 262144 MiB, 1 MiB used; the same rule for the others is unread). */
    unsigned long long total = 1;
    while (total < fg_static(ref.gpu)->memory_total) total <<= 1;
    bar1Memory->bar1Total = total;
    bar1Memory->bar1Used = MIB;
    bar1Memory->bar1Free = bar1Memory->bar1Total - bar1Memory->bar1Used;
    return NVML_SUCCESS;
}

static void fill_pci(const struct fgs_gpu_static *s, nvmlPciInfo_t *pci, int legacy_busid)
{
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", s->pci_domain,
             s->pci_bus, s->pci_device, s->pci_function);
    if (legacy_busid)
        snprintf(pci->busId, sizeof(pci->busId), "%04X:%02X:%02X.%X", s->pci_domain, s->pci_bus,
                 s->pci_device, s->pci_function);
    else
        snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", s->pci_domain, s->pci_bus,
                 s->pci_device, s->pci_function);
    pci->domain = s->pci_domain;
    pci->bus = s->pci_bus;
    pci->device = s->pci_device;
    pci->pciDeviceId = s->pci_device_id;
    pci->pciSubSystemId = s->pci_subsystem_id;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    FG_DEVICE(device, ref, pci);
    fill_pci(fg_static(ref.gpu), pci, 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

/* v1 predates the 8-digit domain: its busId has the legacy form */
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    FG_DEVICE(device, ref, pci);
    fill_pci(fg_static(ref.gpu), pci, 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    FG_DEVICE(device, ref, pci);
    if (pci->version != nvmlPciInfoExt_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const struct fgs_gpu_static *s = fg_static(ref.gpu);
    memset(pci, 0, sizeof(*pci));
    pci->version = nvmlPciInfoExt_v1;
    pci->domain = s->pci_domain;
    pci->bus = s->pci_bus;
    pci->device = s->pci_device;
    pci->pciDeviceId = s->pci_device_id;
    pci->pciSubSystemId = s->pci_subsystem_id;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller */
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", s->pci_domain, s->pci_bus,
             s->pci_device, s->pci_function);
    return NVML_SUCCESS;
}

/* ---- simple unsigned values, driven by a table ---- */

enum uval {
    UV_MINOR, UV_INDEX, UV_MODULE, UV_NUMA, UV_PCIE_GEN, UV_PCIE_WIDTH, UV_TEMP, UV_POWER,
    UV_POWER_LIMIT, UV_FAN, UV_CORES
};

static nvmlReturn_t uvalue(nvmlDevice_t device, unsigned int *out, enum uval which)
{
    FG_DEVICE(device, ref, out);
    const struct fgs_gpu_static *s = fg_static(ref.gpu);
    switch (which) {
    case UV_MINOR: FG_WHOLE_GPU(ref); *out = s->minor; break;
    case UV_INDEX:
        if (ref.is_mig) return fg_mig_index(&ref, out);
        *out = fg_view_index(ref.gpu, s->index);
        break;
    case UV_MODULE: *out = s->module_id; break;
    case UV_NUMA: *out = s->numa_node; break;
    case UV_PCIE_GEN: *out = s->architecture >= NVML_DEVICE_ARCH_BLACKWELL ? 6 : s->architecture >= NVML_DEVICE_ARCH_HOPPER ? 5 : 4; break;
    case UV_PCIE_WIDTH: *out = 16; break;
    case UV_TEMP: *out = 31 + (s->index * 7) % 9; break;
    case UV_POWER: *out = s->power_limit_mw / 10 + 1000 * (s->index % 5); break;
    case UV_POWER_LIMIT: *out = s->power_limit_mw; break;
    case UV_FAN: return NVML_ERROR_NOT_SUPPORTED; /* SXM boards have no fan */
    case UV_CORES: *out = s->sm_count * 128; break;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_MINOR); }
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_INDEX); }
nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_MODULE); }
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_NUMA); }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_PCIE_GEN); }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_PCIE_GEN); }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_PCIE_WIDTH); }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_PCIE_WIDTH); }
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_POWER); }
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_POWER_LIMIT); }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_POWER_LIMIT); }
nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_POWER_LIMIT); }
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_FAN); }
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t d, unsigned int *v) { return uvalue(d, v, UV_CORES); }

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    if (fg_initialised() && sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return uvalue(device, temp, UV_TEMP);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    FG_DEVICE(device, ref, temperature);
    if (temperature->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int t = 0;
    FG_TRY(uvalue(device, &t, UV_TEMP));
    temperature->temperature = (int)t;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                          unsigned int *maxLimit)
{
    FG_DEVICE(device, ref, minLimit);
    FG_CHECK_PTR(maxLimit);
    *minLimit = fg_static(ref.gpu)->power_limit_mw / 4;
    *maxLimit = fg_static(ref.gpu)->power_limit_mw;
    return NVML_SUCCESS;
}

/* current: 1 for the clock now, 0 for the maximum. Utilisation is always 0 here, so a GPU runs
 * at its idle SM clock where the catalog knows it (a real idle H200: 345 MHz of 1980). */
static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock,
                             int current)
{
    FG_DEVICE(device, ref, clock);
    const struct fgs_gpu_static *s = fg_static(ref.gpu);
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *clock = current && s->idle_sm_clock_mhz ? s->idle_sm_clock_mhz : s->max_sm_clock_mhz;
        return NVML_SUCCESS;
    case NVML_CLOCK_MEM: *clock = s->max_mem_clock_mhz; return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO: *clock = s->max_sm_clock_mhz * 8 / 10; return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned int *c) { return clock_of(d, t, c, 1); }
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned int *c) { return clock_of(d, t, c, 0); }

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    FG_DEVICE(device, ref, utilization);
    FG_WHOLE_GPU(ref);
    utilization->gpu = 0;
    utilization->memory = 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t zero_codec(nvmlDevice_t device, unsigned int *util, unsigned int *period)
{
    FG_DEVICE(device, ref, util);
    FG_CHECK_PTR(period);
    *util = 0;
    *period = 167000;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *p) { return zero_codec(d, u, p); }
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *p) { return zero_codec(d, u, p); }

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    FG_DEVICE(device, ref, pState);
    *pState = NVML_PSTATE_0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return nvmlDeviceGetPerformanceState(device, pState);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    FG_DEVICE(device, ref, reasons);
    *reasons = nvmlClocksEventReasonGpuIdle;
    return NVML_SUCCESS;
}

static nvmlReturn_t enable_state(nvmlDevice_t device, nvmlEnableState_t *out, nvmlEnableState_t v)
{
    FG_DEVICE(device, ref, out);
    *out = v;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, nvmlEnableState_t *v) { return enable_state(d, v, NVML_FEATURE_DISABLED); }
nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t d, nvmlEnableState_t *v) { return enable_state(d, v, NVML_FEATURE_DISABLED); }
nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t d, nvmlEnableState_t *v) { return enable_state(d, v, NVML_FEATURE_ENABLED); }

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                  nvmlEnableState_t *pending)
{
    FG_DEVICE(device, ref, current);
    FG_CHECK_PTR(pending);
    *current = *pending = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts)
{
    FG_DEVICE(device, ref, eccCounts);
    if (errorType > NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counterType > NVML_AGGREGATE_ECC)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *eccCounts = errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? d.ecc_dbe_volatile : 0;
    return NVML_SUCCESS;
}

/* fakegpu's own query (real NVML has none): the GPU's last XID, 0 once the fault is cleared.
 * XID events say when a fault happens; this says whether it is still there, so a health
 * watcher can lift its taint on `fakegpu fault clear` (standing for a repair or GPU reset). */
FG_EXPORT nvmlReturn_t fakegpu_device_last_xid(nvmlDevice_t device, unsigned int *xid)
{
    FG_DEVICE(device, ref, xid);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *xid = d.last_xid;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    FG_DEVICE(device, ref, mode);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *mode = (nvmlComputeMode_t)d.compute_mode;
    return NVML_SUCCESS;
}

/* Sets one uint32_t of a GPU's dynamic record: arg is {offset in the record, value}. */
static nvmlReturn_t set_u32(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                            int *has_event, void *arg)
{
    (void)gpu;
    (void)ev;
    (void)has_event;
    const uint32_t *field_value = arg;
    memcpy((char *)d + field_value[0], &field_value[1], sizeof(uint32_t));
    return NVML_SUCCESS;
}

/* The setters' one path: a whole GPU's handle (a MIG device's is NOT_SUPPORTED), then the
 * value (``valid``, INVALID_ARGUMENT), then the field at ``offset`` in its dynamic record. */
static nvmlReturn_t set_field(nvmlDevice_t device, size_t offset, uint32_t value, int valid)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_device(device, &ref));
    FG_WHOLE_GPU(ref);
    if (!valid) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t arg[2] = {(uint32_t)offset, value};
    return fg_mutate(ref.gpu, set_u32, arg);
}

/* Kept in the node's state, so every process (nvidia-smi, a plugin, a pod) sees the mode a
 * sharing setup applied (NVIDIA's plugin runs `nvidia-smi -i UUID -c EXCLUSIVE_PROCESS` for
 * MPS and back to DEFAULT). A MIG device takes its GPU's mode: nvml.h sets it per device. */
nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode)
{
    return set_field(device, offsetof(struct fgs_gpu_dynamic, compute_mode), (uint32_t)mode,
                     (unsigned)mode < NVML_COMPUTEMODE_COUNT);
}

/* fakegpu's own: the compute-policy timeslice (0 DEFAULT, 1 SHORT, 2 MEDIUM, 3 LONG) that
 * `nvidia-smi compute-policy --set-timeslice` sets; NVIDIA's tool reaches it through no public
 * NVML call, so the fake nvidia-smi uses these. */
FG_EXPORT nvmlReturn_t fakegpu_device_timeslice(nvmlDevice_t device, unsigned int *timeslice)
{
    FG_DEVICE(device, ref, timeslice);
    FG_WHOLE_GPU(ref);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *timeslice = d.timeslice;
    return NVML_SUCCESS;
}

FG_EXPORT nvmlReturn_t fakegpu_device_set_timeslice(nvmlDevice_t device, unsigned int timeslice)
{
    return set_field(device, offsetof(struct fgs_gpu_dynamic, timeslice), timeslice,
                     timeslice <= 3);
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *mode)
{
    FG_DEVICE(device, ref, mode);
    *mode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t *mode)
{
    FG_DEVICE(device, ref, mode);
    if (mode->version != nvmlDeviceAddressingMode_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    /* rendered per product (state.py): ATS needs a coherent CPU link, i.e. a Grace host */
    mode->value = fg_static(ref.gpu)->addressing_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    FG_DEVICE(device, ref, mode);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *mode = d.persistence_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode)
{
    return set_field(device, offsetof(struct fgs_gpu_dynamic, persistence_mode),
                     mode == NVML_FEATURE_ENABLED,
                     mode == NVML_FEATURE_ENABLED || mode == NVML_FEATURE_DISABLED);
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet)
{
    FG_DEVICE(device, ref, cpuSet);
    if (cpuSetSize == 0) return NVML_ERROR_INVALID_ARGUMENT;
    memset(cpuSet, 0, cpuSetSize * sizeof(unsigned long));
    cpuSet[0] = ~0ul; /* the first 64 CPUs */
    return NVML_SUCCESS;
}

/* ---- processes: nothing ever runs on a fake GPU ---- */

#define FG_NO_PROCESSES(fn, type)                                                            \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos)               \
    {                                                                                        \
        FG_DEVICE(device, ref, infoCount);                                                   \
        (void)infos;                                                                         \
        *infoCount = 0;                                                                      \
        return NVML_SUCCESS;                                                                 \
    }
FG_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
FG_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
FG_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)
FG_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
FG_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
FG_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
FG_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
FG_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
FG_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
