/* Library lifetime (reference-counted init/shutdown), error strings, system queries and
 * device enumeration. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fakegpu.h"
#include "visible.h"

static pthread_mutex_t init_mutex = PTHREAD_MUTEX_INITIALIZER;
static unsigned int init_refs = 0;
static unsigned long calls_in_flight = 0;

/* seq_cst with fg_call_begin's increment: a call either counts before shutdown looks at the
 * count, or sees init_refs at 0 (Dekker's pattern) */
int fg_initialised(void) { return __atomic_load_n(&init_refs, __ATOMIC_SEQ_CST) > 0; }

int fg_call_begin(void)
{
    __atomic_add_fetch(&calls_in_flight, 1, __ATOMIC_SEQ_CST);
    return fg_initialised();
}

void fg_call_end(int *begun)
{
    (void)begun;
    __atomic_sub_fetch(&calls_in_flight, 1, __ATOMIC_SEQ_CST);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&init_mutex);
    if (init_refs == 0) {
        rc = fg_store_open();
        if (rc == NVML_SUCCESS) fg_view_open(); /* FAKEGPU_NVML_VISIBLE: a container's GPUs */
        if (rc == NVML_SUCCESS && fg_gpu_count == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS)) {
            fg_debug("the state file describes no GPUs (use NVML_INIT_FLAG_NO_GPUS)");
            fg_store_close();
            rc = NVML_ERROR_GPU_NOT_FOUND;
        } else if (rc != NVML_SUCCESS && (flags & NVML_INIT_FLAG_NO_GPUS)) {
            rc = NVML_SUCCESS; /* initialised with no devices */
        }
        if (rc == NVML_SUCCESS) {
            rc = fg_handles_begin();
            if (rc != NVML_SUCCESS) fg_store_close();
        }
    }
    if (rc == NVML_SUCCESS) __atomic_add_fetch(&init_refs, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&init_mutex);
    return rc;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&init_mutex);
    if (init_refs == 0) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else if (__atomic_sub_fetch(&init_refs, 1, __ATOMIC_SEQ_CST) == 0) {
        /* Other threads may still be inside calls (clients shut down while a monitor thread
         * polls): new calls now answer UNINITIALIZED; wait for the running ones (event waits
         * notice at their next look, 20 ms at most) before unmapping what they read. */
        while (__atomic_load_n(&calls_in_flight, __ATOMIC_SEQ_CST) != 0) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
        fg_store_close();
    }
    pthread_mutex_unlock(&init_mutex);
    return rc;
}

static const char *const error_strings[] = {
    [NVML_SUCCESS] = "Success",
    [NVML_ERROR_UNINITIALIZED] = "Uninitialized",
    [NVML_ERROR_INVALID_ARGUMENT] = "Invalid Argument",
    [NVML_ERROR_NOT_SUPPORTED] = "Not Supported",
    [NVML_ERROR_NO_PERMISSION] = "Insufficient Permissions",
    [NVML_ERROR_ALREADY_INITIALIZED] = "Already Initialized",
    [NVML_ERROR_NOT_FOUND] = "Not Found",
    [NVML_ERROR_INSUFFICIENT_SIZE] = "Insufficient Size",
    [NVML_ERROR_INSUFFICIENT_POWER] = "Insufficient External Power",
    [NVML_ERROR_DRIVER_NOT_LOADED] = "Driver Not Loaded",
    [NVML_ERROR_TIMEOUT] = "Timeout",
    [NVML_ERROR_IRQ_ISSUE] = "Interrupt Request Issue",
    [NVML_ERROR_LIBRARY_NOT_FOUND] = "NVML Shared Library Not Found",
    [NVML_ERROR_FUNCTION_NOT_FOUND] = "Function Not Found",
    [NVML_ERROR_CORRUPTED_INFOROM] = "Corrupted infoROM",
    [NVML_ERROR_GPU_IS_LOST] = "GPU is lost",
    [NVML_ERROR_RESET_REQUIRED] = "GPU requires restart",
    [NVML_ERROR_OPERATING_SYSTEM] = "The operating system has blocked the request.",
    [NVML_ERROR_LIB_RM_VERSION_MISMATCH] = "RM has detected an NVML/RM version mismatch.",
    [NVML_ERROR_IN_USE] = "In use by another client",
    [NVML_ERROR_MEMORY] = "Insufficient Memory",
    [NVML_ERROR_NO_DATA] = "No data",
    [NVML_ERROR_VGPU_ECC_NOT_SUPPORTED] = "Not Supported",
    [NVML_ERROR_INSUFFICIENT_RESOURCES] = "Insufficient resources",
    [NVML_ERROR_FREQ_NOT_SUPPORTED] = "Frequency not supported",
    [NVML_ERROR_ARGUMENT_VERSION_MISMATCH] = "Argument version mismatch",
    [NVML_ERROR_DEPRECATED] = "Deprecated",
    [NVML_ERROR_NOT_READY] = "Not ready",
    [NVML_ERROR_GPU_NOT_FOUND] = "GPU not found",
    [NVML_ERROR_INVALID_STATE] = "Invalid state",
    [NVML_ERROR_RESET_TYPE_NOT_SUPPORTED] = "Reset type not supported",
};

const char *nvmlErrorString(nvmlReturn_t result)
{
    if (result == NVML_ERROR_UNKNOWN) return "Unknown Error";
    if ((unsigned)result < sizeof(error_strings) / sizeof(error_strings[0]) &&
        error_strings[result] != NULL)
        return error_strings[result];
    return "Unknown Error";
}

/* ---- system ---- */

#define FG_CHECK_SYSTEM()                                                                    \
    FG_CHECK_INIT();                                                                         \
    if (!fg_store_is_open()) return NVML_ERROR_DRIVER_NOT_LOADED

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    FG_CHECK_SYSTEM();
    FG_CHECK_PTR(version);
    return fg_copy_str(version, length, fg_hdr->driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    FG_CHECK_SYSTEM();
    FG_CHECK_PTR(version);
    return fg_copy_str(version, length, fg_hdr->nvml_version);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    FG_CHECK_SYSTEM();
    FG_CHECK_PTR(cudaDriverVersion);
    *cudaDriverVersion = (int)fg_hdr->cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(name);
    (void)pid;
    (void)length;
    return NVML_ERROR_NOT_FOUND; /* no process runs on fake GPUs */
}

/* ---- enumeration ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(deviceCount);
    *deviceCount = fg_view_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

static nvmlReturn_t hand_out(uint32_t gpu, nvmlDevice_t *device)
{
    struct fgs_gpu_dynamic d;
    if (!fg_view_shows(gpu)) return NVML_ERROR_NOT_FOUND; /* outside the container's view */
    FG_TRY(fg_read_dyn(gpu, &d));
    if (d.lost) return NVML_ERROR_GPU_IS_LOST;
    *device = fg_device_handle(gpu);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(device);
    uint32_t gpu;
    if (!fg_view_gpu(index, &gpu)) return NVML_ERROR_INVALID_ARGUMENT;
    return hand_out(gpu, device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* The bus id of the GPU at `index` of the view, lost or not: NVIDIA's nvidia-smi learns it from
 * the kernel driver when NVML refuses the handle ("Unable to determine the device handle for
 * GPU1: 0000:34:00.0: ..."); fakegpu's nvidia-smi, linked with these sources, asks here. */
FG_EXPORT int fakegpu_bus_id(unsigned int index, char *busId, unsigned int length)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(busId);
    uint32_t gpu;
    if (!fg_view_gpu(index, &gpu)) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fgs_gpu_static *s = fg_static(gpu);
    if ((unsigned int)snprintf(busId, length, "%04X:%02X:%02X.%X", s->pci_domain, s->pci_bus,
                               s->pci_device, s->pci_function) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(uuid);
    FG_CHECK_PTR(device);
    for (uint32_t i = 0; i < fg_gpu_count; i++)
        if (strncmp(fg_static(i)->uuid, uuid, FGS_STR) == 0) return hand_out(i, device);
    if (strncmp(uuid, "MIG-", 4) == 0) {
        char buf[FGS_STR];
        for (uint32_t i = 0; i < fg_gpu_count; i++) {
            struct fgs_gpu_dynamic d;
            nvmlReturn_t rc = fg_read_dyn(i, &d);
            if (rc == NVML_ERROR_UNKNOWN) continue; /* a corrupt GPU holds no MIG device */
            if (rc != NVML_SUCCESS) return rc;
            if (!d.mig_current || !fg_view_shows(i)) continue;
            for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
                if (!d.gis[g].active) continue;
                for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
                    if (!d.gis[g].cis[c].active) continue;
                    if (!fg_view_shows_mig(i, d.gis[g].id, d.gis[g].cis[c].id)) continue;
                    fg_mig_uuid(i, d.gis[g].id, d.gis[g].cis[c].id, buf, sizeof(buf));
                    if (strncmp(buf, uuid, sizeof(buf)) == 0) {
                        if (d.lost) return NVML_ERROR_GPU_IS_LOST;
                        *device = fg_mig_handle(i, g, c);
                        return NVML_SUCCESS;
                    }
                }
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(uuid);
    FG_CHECK_PTR(device);
    if (uuid->version != nvmlUUID_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (uuid->type != NVML_UUID_TYPE_ASCII) return NVML_ERROR_NOT_SUPPORTED;
    char text[sizeof(uuid->value.str) + 1];
    memcpy(text, uuid->value.str, sizeof(uuid->value.str));
    text[sizeof(uuid->value.str)] = '\0';
    return nvmlDeviceGetHandleByUUID(text, device);
}

static int parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn)
{
    char tail;
    *fn = 0;
    if (sscanf(s, "%x:%x:%x.%x%c", dom, bus, dev, fn, &tail) == 4) return 1;
    if (sscanf(s, "%x:%x.%x%c", bus, dev, fn, &tail) == 3) {
        *dom = 0;
        return 1;
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(pciBusId);
    FG_CHECK_PTR(device);
    unsigned dom, bus, dev, fn;
    if (strnlen(pciBusId, 64) >= 64 || !parse_bus_id(pciBusId, &dom, &bus, &dev, &fn))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (uint32_t i = 0; i < fg_gpu_count; i++) {
        const struct fgs_gpu_static *s = fg_static(i);
        if (s->pci_domain == dom && s->pci_bus == bus && s->pci_device == dev &&
            s->pci_function == fn)
            return hand_out(i, device);
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(serial);
    FG_CHECK_PTR(device);
    int found = -1;
    for (uint32_t i = 0; i < fg_gpu_count; i++) {
        if (strncmp(fg_static(i)->serial, serial, sizeof(fg_static(i)->serial)) != 0) continue;
        if (found >= 0) return NVML_ERROR_INVALID_ARGUMENT; /* dual-GPU board: ambiguous */
        found = (int)i;
    }
    if (found < 0) return NVML_ERROR_NOT_FOUND;
    return hand_out((uint32_t)found, device);
}
