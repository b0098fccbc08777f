/* Handle tables: every handle is a pointer into one of these static arrays, so a handle is
 * validated by range and alignment before anything is read through it. */
#include <string.h>

#include "fakegpu.h"

static struct nvmlDevice_st devices[FGS_MAX_GPUS];
static struct nvmlDevice_st mig_devices[FGS_MAX_GPUS][FGS_MAX_GIS][FGS_MAX_CIS];
static struct nvmlGpuInstance_st gis[FGS_MAX_GPUS][FGS_MAX_GIS];
static struct nvmlComputeInstance_st cis[FGS_MAX_GPUS][FGS_MAX_GIS][FGS_MAX_CIS];

/* index of p in a flat array of n elements of size sz starting at base, or -1 */
static long slot_of(const void *p, const void *base, size_t n, size_t sz)
{
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)base;
    if (u < b || u >= b + n * sz || (u - b) % sz != 0) return -1;
    return (long)((u - b) / sz);
}

nvmlDevice_t fg_device_handle(uint32_t gpu)
{
    devices[gpu] = (struct nvmlDevice_st){gpu, FG_NO_GPU, FG_NO_GPU, 0};
    return &devices[gpu];
}

nvmlDevice_t fg_mig_handle(uint32_t gpu, uint32_t gi, uint32_t ci)
{
    mig_devices[gpu][gi][ci] = (struct nvmlDevice_st){gpu, gi, ci, 1};
    return &mig_devices[gpu][gi][ci];
}

nvmlGpuInstance_t fg_gi_handle(uint32_t gpu, uint32_t gi)
{
    gis[gpu][gi] = (struct nvmlGpuInstance_st){gpu, gi};
    return &gis[gpu][gi];
}

nvmlComputeInstance_t fg_ci_handle(uint32_t gpu, uint32_t gi, uint32_t ci)
{
    cis[gpu][gi][ci] = (struct nvmlComputeInstance_st){gpu, gi, ci, 0};
    return &cis[gpu][gi][ci];
}

static nvmlReturn_t live_instance(struct fg_ref *ref, int need_ci)
{
    struct fgs_gpu_dynamic d;
    fg_read_dyn(ref->gpu, &d);
    if (d.lost) return NVML_ERROR_GPU_IS_LOST;
    if (!d.mig_current || !d.gis[ref->gi_slot].active) return NVML_ERROR_INVALID_ARGUMENT;
    if (need_ci && !d.gis[ref->gi_slot].cis[ref->ci_slot].active)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t fg_device_any(nvmlDevice_t h, struct fg_ref *ref)
{
    long i = slot_of(h, devices, FGS_MAX_GPUS, sizeof(devices[0]));
    if (i >= 0) {
        if ((unsigned)i >= fg_gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
        *ref = (struct fg_ref){(uint32_t)i, FG_NO_GPU, FG_NO_GPU, 0};
        return NVML_SUCCESS;
    }
    i = slot_of(h, mig_devices, (size_t)FGS_MAX_GPUS * FGS_MAX_GIS * FGS_MAX_CIS,
                sizeof(mig_devices[0][0][0]));
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t gpu = (uint32_t)i / (FGS_MAX_GIS * FGS_MAX_CIS);
    if (gpu >= fg_gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *ref = (struct fg_ref){gpu, ((uint32_t)i / FGS_MAX_CIS) % FGS_MAX_GIS,
                           (uint32_t)i % FGS_MAX_CIS, 1};
    return NVML_SUCCESS;
}

nvmlReturn_t fg_device(nvmlDevice_t h, struct fg_ref *ref)
{
    FG_TRY(fg_device_any(h, ref));
    if (ref->is_mig) return live_instance(ref, 1);
    struct fgs_gpu_dynamic d;
    fg_read_dyn(ref->gpu, &d);
    return d.lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

nvmlReturn_t fg_gi(nvmlGpuInstance_t h, struct fg_ref *ref)
{
    long i = slot_of(h, gis, (size_t)FGS_MAX_GPUS * FGS_MAX_GIS, sizeof(gis[0][0]));
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t gpu = (uint32_t)i / FGS_MAX_GIS;
    if (gpu >= fg_gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *ref = (struct fg_ref){gpu, (uint32_t)i % FGS_MAX_GIS, FG_NO_GPU, 1};
    return live_instance(ref, 0);
}

nvmlReturn_t fg_ci(nvmlComputeInstance_t h, struct fg_ref *ref)
{
    long i = slot_of(h, cis, (size_t)FGS_MAX_GPUS * FGS_MAX_GIS * FGS_MAX_CIS, sizeof(cis[0][0][0]));
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t gpu = (uint32_t)i / (FGS_MAX_GIS * FGS_MAX_CIS);
    if (gpu >= fg_gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *ref = (struct fg_ref){gpu, ((uint32_t)i / FGS_MAX_CIS) % FGS_MAX_GIS, (uint32_t)i % FGS_MAX_CIS,
                           1};
    return live_instance(ref, 1);
}

nvmlReturn_t fg_copy_str(char *dst, unsigned int len, const char *src)
{
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strnlen(src, FGS_STR);
    if (len <= n) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return NVML_SUCCESS;
}
