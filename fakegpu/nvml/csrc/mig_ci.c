/* MIG compute instances and MIG device handles. */
#include <stdio.h>
#include <string.h>

#include "caps.h"
#include "fakegpu.h"
#include "visible.h"

/* compute-instance profiles: NVML_COMPUTE_INSTANCE_PROFILE_* index -> compute slices */
static const uint32_t ci_profile_slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {
    [NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE] = 1, [NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE] = 2,
    [NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE] = 3, [NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE] = 4,
    [NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE] = 7, /* 8, 6, rev1 and NVL: not on these GPUs */
};

struct ci_shape {
    uint32_t slices;
    uint32_t instance_count;
    uint32_t sm_count;
    uint32_t placement_count;
    uint32_t starts[8];
};

/* The shape of CI profile `profile` inside a GI of profile gp; 0 if unsupported. */
static int ci_shape(const struct fgs_profile *gp, unsigned profile, struct ci_shape *out)
{
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return 0;
    uint32_t s = ci_profile_slices[profile];
    if (s == 0 || s > gp->slice_count) return 0;
    memset(out, 0, sizeof(*out));
    out->slices = s;
    out->instance_count = gp->slice_count / s;
    out->sm_count = gp->sm_count * s / gp->slice_count;
    for (uint32_t start = 0; start + s <= gp->slice_count && out->placement_count < 8; start += s)
        out->starts[out->placement_count++] = start;
    return 1;
}

#define FG_GI(h, ref, out)                                                                   \
    FG_CHECK_INIT();                                                                         \
    struct fg_ref ref;                                                                       \
    FG_TRY(fg_gi((h), &ref));                                                                \
    FG_CHECK_PTR(out);                                                                       \
    struct fgs_gpu_dynamic d;                                                                \
    FG_TRY(fg_read_dyn(ref.gpu, &d));                                                                \
    const struct fgs_profile *gp = fg_gi_profile(ref.gpu, &d, ref.gi_slot)

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info)
{
    FG_GI(gpuInstance, ref, info);
    if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED ||
        profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct ci_shape sh;
    if (!ci_shape(gp, profile, &sh)) return NVML_ERROR_NOT_SUPPORTED;
    *info = (nvmlComputeInstanceProfileInfo_t){
        .id = profile, .sliceCount = sh.slices, .instanceCount = sh.instance_count,
        .multiprocessorCount = sh.sm_count, .sharedCopyEngineCount = gp->copy_engines,
        .sharedDecoderCount = gp->decoders, .sharedEncoderCount = gp->encoders,
        .sharedJpegCount = gp->jpegs, .sharedOfaCount = gp->ofas};
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info)
{
    FG_GI(gpuInstance, ref, info);
    if (info->version != nvmlComputeInstanceProfileInfo_v2 &&
        info->version != nvmlComputeInstanceProfileInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED ||
        profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct ci_shape sh;
    if (!ci_shape(gp, profile, &sh)) return NVML_ERROR_NOT_SUPPORTED;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    if (sh.slices == gp->slice_count)
        snprintf(name, sizeof(name), "%s", gp->name);
    else
        snprintf(name, sizeof(name), "%uc.%.80s", sh.slices, gp->name);
    /* v2 and v3 share their prefix; v3 adds capabilities */
    unsigned version = info->version;
    nvmlComputeInstanceProfileInfo_v2_t v = {
        .version = version, .id = profile, .sliceCount = sh.slices,
        .instanceCount = sh.instance_count, .multiprocessorCount = sh.sm_count,
        .sharedCopyEngineCount = gp->copy_engines, .sharedDecoderCount = gp->decoders,
        .sharedEncoderCount = gp->encoders, .sharedJpegCount = gp->jpegs,
        .sharedOfaCount = gp->ofas};
    memcpy(v.name, name, sizeof(v.name));
    if (version == nvmlComputeInstanceProfileInfo_v3) {
        nvmlComputeInstanceProfileInfo_v3_t *v3 = (nvmlComputeInstanceProfileInfo_v3_t *)info;
        memcpy(v3, &v, sizeof(v));
        v3->capabilities = 0;
    } else {
        *info = v;
    }
    return NVML_SUCCESS;
}

/* capacity rule for CIs: inside the GI's compute slices, no overlap, count <= instance_count */
static nvmlReturn_t ci_fits(const struct fgs_gi *gi, unsigned profile, const struct ci_shape *sh,
                            uint32_t start)
{
    int legal = 0;
    for (uint32_t i = 0; i < sh->placement_count; i++)
        if (sh->starts[i] == start) legal = 1;
    if (!legal) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t same = 0;
    for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
        const struct fgs_ci *ci = &gi->cis[c];
        if (!ci->active) continue;
        if (ci->nvml_profile == profile) same++;
        if (start < ci->start + ci->size && ci->start < start + sh->slices)
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    return same >= sh->instance_count ? NVML_ERROR_INSUFFICIENT_RESOURCES : NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId,
                                                                unsigned int *count)
{
    FG_GI(gpuInstance, ref, count);
    struct ci_shape sh;
    if (!ci_shape(gp, profileId, &sh)) return NVML_ERROR_INVALID_ARGUMENT;
    struct fgs_gi gi = d.gis[ref.gi_slot];
    unsigned n = 0;
    for (uint32_t i = 0; i < sh.placement_count; i++) {
        if (ci_fits(&gi, profileId, &sh, sh.starts[i]) != NVML_SUCCESS) continue;
        for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
            if (gi.cis[c].active) continue;
            gi.cis[c] = (struct fgs_ci){1, 0, profileId, sh.starts[i], sh.slices, 0};
            break;
        }
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    nvmlComputeInstancePlacement_t *placements, unsigned int *count)
{
    FG_GI(gpuInstance, ref, count);
    struct ci_shape sh;
    if (!ci_shape(gp, profileId, &sh)) return NVML_ERROR_INVALID_ARGUMENT;
    if (placements == NULL) {
        *count = sh.placement_count;
        return NVML_SUCCESS;
    }
    if (*count < sh.placement_count) {
        *count = sh.placement_count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (uint32_t i = 0; i < sh.placement_count; i++) {
        placements[i].start = sh.starts[i];
        placements[i].size = sh.slices;
    }
    *count = sh.placement_count;
    return NVML_SUCCESS;
}

struct create_ci_arg {
    uint32_t gi_slot;
    unsigned profile;
    const nvmlComputeInstancePlacement_t *placement;
    uint32_t slot;
};

static nvmlReturn_t create_ci(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                              int *has_event, void *argp)
{
    (void)ev;
    (void)has_event;
    struct create_ci_arg *a = argp;
    struct fgs_gi *gi = &d->gis[a->gi_slot];
    if (!gi->active) return NVML_ERROR_INVALID_ARGUMENT;
    struct ci_shape sh;
    if (!ci_shape(fg_gi_profile(gpu, d, a->gi_slot), a->profile, &sh))
        return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t start = 0;
    if (a->placement != NULL) {
        if (a->placement->size != sh.slices) return NVML_ERROR_INVALID_ARGUMENT;
        start = a->placement->start;
        FG_TRY(ci_fits(gi, a->profile, &sh, start));
    } else {
        nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        for (uint32_t i = 0; i < sh.placement_count && rc != NVML_SUCCESS; i++) {
            rc = ci_fits(gi, a->profile, &sh, sh.starts[i]);
            start = sh.starts[i];
        }
        if (rc != NVML_SUCCESS) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    uint32_t slot = 0, id = 0;
    while (slot < FGS_MAX_CIS && gi->cis[slot].active) slot++;
    if (slot == FGS_MAX_CIS) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (;; id++) {
        int used = 0;
        for (uint32_t c = 0; c < FGS_MAX_CIS; c++)
            if (gi->cis[c].active && gi->cis[c].id == id) used = 1;
        if (!used) break;
    }
    gi->cis[slot] = (struct fgs_ci){1, id, a->profile, start, sh.slices, 0};
    a->slot = slot;
    return NVML_SUCCESS;
}

static nvmlReturn_t create_ci_common(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                     const nvmlComputeInstancePlacement_t *placement,
                                     nvmlComputeInstance_t *computeInstance, int need_placement)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_gi(gpuInstance, &ref));
    FG_CHECK_PTR(computeInstance);
    if (need_placement) FG_CHECK_PTR(placement);
    struct create_ci_arg a = {ref.gi_slot, profileId, placement, 0};
    FG_TRY(fg_mutate(ref.gpu, create_ci, &a));
    *computeInstance = fg_ci_handle(ref.gpu, ref.gi_slot, a.slot);
    struct fgs_gpu_dynamic d;
    if (fg_read_dyn(ref.gpu, &d) == NVML_SUCCESS)
        fg_caps_write(fg_static(ref.gpu)->minor, d.gis[ref.gi_slot].id,
                      (int)d.gis[ref.gi_slot].cis[a.slot].id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                  unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance)
{
    return create_ci_common(gpuInstance, profileId, NULL, computeInstance, 0);
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId,
    const nvmlComputeInstancePlacement_t *placement, nvmlComputeInstance_t *computeInstance)
{
    return create_ci_common(gpuInstance, profileId, placement, computeInstance, 1);
}

static nvmlReturn_t destroy_ci(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                               int *has_event, void *argp)
{
    (void)gpu;
    (void)ev;
    (void)has_event;
    const struct fg_ref *r = argp;
    struct fgs_ci *ci = &d->gis[r->gi_slot].cis[r->ci_slot];
    if (!d->gis[r->gi_slot].active || !ci->active) return NVML_ERROR_INVALID_ARGUMENT;
    memset(ci, 0, sizeof(*ci));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_ci(computeInstance, &ref));
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    FG_TRY(fg_mutate(ref.gpu, destroy_ci, &ref));
    fg_caps_remove(fg_static(ref.gpu)->minor, d.gis[ref.gi_slot].id,
                   (int)d.gis[ref.gi_slot].cis[ref.ci_slot].id);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances,
                                                unsigned int *count)
{
    FG_GI(gpuInstance, ref, count);
    FG_CHECK_PTR(computeInstances);
    struct ci_shape sh;
    if (!ci_shape(gp, profileId, &sh)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
        const struct fgs_ci *ci = &d.gis[ref.gi_slot].cis[c];
        if (!ci->active || ci->nvml_profile != profileId) continue;
        if (n >= *count) return NVML_ERROR_INSUFFICIENT_SIZE;
        computeInstances[n++] = fg_ci_handle(ref.gpu, ref.gi_slot, c);
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance)
{
    FG_GI(gpuInstance, ref, computeInstance);
    (void)gp;
    for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
        const struct fgs_ci *ci = &d.gis[ref.gi_slot].cis[c];
        if (ci->active && ci->id == id) {
            *computeInstance = fg_ci_handle(ref.gpu, ref.gi_slot, c);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t *info)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_ci(computeInstance, &ref));
    FG_CHECK_PTR(info);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    const struct fgs_ci *ci = &d.gis[ref.gi_slot].cis[ref.ci_slot];
    info->device = fg_device_handle(ref.gpu);
    info->gpuInstance = fg_gi_handle(ref.gpu, ref.gi_slot);
    info->id = ci->id;
    info->profileId = ci->nvml_profile;
    info->placement.start = ci->start;
    info->placement.size = ci->size;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                        nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

/* ---- MIG device handles ---- */

/* The MIG devices of a GPU in the order GetMigDeviceHandleByIndex numbers them: a container's
 * own ones only, from 0, as its nvidia-smi shows. Stops at position ``index`` (found: its slots)
 * or at the device in slots (gi, ci) (found: its position); -1 when neither is reached. */
static int mig_walk(const struct fg_ref *gpu, const struct fgs_gpu_dynamic *d, unsigned index,
                    uint32_t *gi, uint32_t *ci, int by_slot)
{
    unsigned n = 0;
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        if (!d->gis[g].active) continue;
        for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
            if (!d->gis[g].cis[c].active) continue;
            if (!fg_view_shows_mig(gpu->gpu, d->gis[g].id, d->gis[g].cis[c].id)) continue;
            if (by_slot ? (g == *gi && c == *ci) : n == index) {
                *gi = g;
                *ci = c;
                return (int)n;
            }
            n++;
        }
    }
    return -1;
}

/* nvml.h: for a MIG device handle, the index that GetMigDeviceHandleByIndex on its parent
 * takes to return the same device (nvidia-container-toolkit finds MIG devices by it). */
nvmlReturn_t fg_mig_index(const struct fg_ref *ref, unsigned int *index)
{
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref->gpu, &d));
    uint32_t gi = ref->gi_slot, ci = ref->ci_slot;
    int n = mig_walk(ref, &d, 0, &gi, &ci, 1);
    if (n < 0) return NVML_ERROR_NOT_FOUND;
    *index = (unsigned)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_device(device, &ref));
    FG_CHECK_PTR(migDevice);
    const struct fgs_gpu_static *s = fg_static(ref.gpu);
    if (ref.is_mig || !s->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    /* beyond the max count (0 with MIG off) the index is invalid, as nvml.h documents */
    if (index >= fg_max_mig_devices(&ref, &d)) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t g = 0, c = 0;
    if (mig_walk(&ref, &d, index, &g, &c, 0) < 0) return NVML_ERROR_NOT_FOUND;
    *migDevice = fg_mig_handle(ref.gpu, g, c);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    FG_DEVICE(migDevice, ref, device);
    if (!ref.is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *device = fg_device_handle(ref.gpu);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    FG_DEVICE(device, ref, isMigDevice);
    *isMigDevice = ref.is_mig ? 1u : 0u;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    FG_DEVICE(device, ref, id);
    if (!ref.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *id = d.gis[ref.gi_slot].id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    FG_DEVICE(device, ref, id);
    if (!ref.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *id = d.gis[ref.gi_slot].cis[ref.ci_slot].id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    FG_DEVICE(device, ref, attributes);
    /* nvml.h documents the call for MIG device handles; a real H200 (driver 580.159.04)
     * answers NOT_SUPPORTED for the full GPU. Its SM count is the full-GPU profile's. */
    if (!ref.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    const struct fgs_profile *gp = fg_gi_profile(ref.gpu, &d, ref.gi_slot);
    const struct fgs_ci *ci = &d.gis[ref.gi_slot].cis[ref.ci_slot];
    *attributes = (nvmlDeviceAttributes_t){
        .multiprocessorCount = gp->sm_count * ci->size / (gp->slice_count ? gp->slice_count : 1),
        .sharedCopyEngineCount = gp->copy_engines, .sharedDecoderCount = gp->decoders,
        .sharedEncoderCount = gp->encoders, .sharedJpegCount = gp->jpegs,
        .sharedOfaCount = gp->ofas, .gpuInstanceSliceCount = gp->slice_count,
        .computeInstanceSliceCount = ci->size, .memorySizeMB = gp->memory_mib};
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}
