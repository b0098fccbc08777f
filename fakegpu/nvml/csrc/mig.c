/* MIG: mode, GPU-instance and compute-instance profiles, placements, create/destroy with the
 * hardware's capacity rules, and MIG device handles. */
#include <stdio.h>
#include <string.h>

#include "caps.h"
#include "fakegpu.h"

/* ---- helpers ---- */

const struct fgs_profile *fg_gi_profile(uint32_t gpu, const struct fgs_gpu_dynamic *d,
                                        uint32_t gi_slot)
{
    const struct fgs_gpu_static *s = fg_static(gpu);
    uint32_t p = d->gis[gi_slot].profile_index;
    return &s->profiles[p < s->profile_count ? p : 0];
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

void fg_mig_uuid(uint32_t gpu, uint32_t gi_id, uint32_t ci_id, char *out, size_t len)
{
    const char *parent = fg_static(gpu)->uuid;
    uint32_t ids[2] = {gi_id, ci_id};
    uint64_t a = fnv1a(0xcbf29ce484222325ull, parent, strnlen(parent, FGS_STR));
    a = fnv1a(a, ids, sizeof(ids));
    uint64_t b = fnv1a(a ^ 0x9e3779b97f4a7c15ull, ids, sizeof(ids));
    snprintf(out, len, "MIG-%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32),
             (unsigned)(a >> 16) & 0xffffu, 0x5000u | ((unsigned)a & 0x0fffu),
             0x8000u | ((unsigned)(b >> 48) & 0x3fffu),
             (unsigned long long)(b & 0xffffffffffffull));
}

static int find_profile_by_enum(const struct fgs_gpu_static *s, unsigned int e)
{
    for (uint32_t i = 0; i < s->profile_count; i++)
        if (s->profiles[i].nvml_profile == e) return (int)i;
    return -1;
}

static int find_profile_by_id(const struct fgs_gpu_static *s, unsigned int id)
{
    for (uint32_t i = 0; i < s->profile_count; i++)
        if (s->profiles[i].id == id) return (int)i;
    return -1;
}

/* Can a GI of profile pi go at placement pl? NVML's answer for the hardware's rules. */
static nvmlReturn_t gi_fits(const struct fgs_gpu_static *s, const struct fgs_gpu_dynamic *d,
                            int pi, const nvmlGpuInstancePlacement_t *pl)
{
    const struct fgs_profile *p = &s->profiles[pi];
    int legal = 0;
    for (uint32_t i = 0; i < p->placement_count; i++)
        if (p->placements[i].start == pl->start && p->placements[i].size == pl->size) legal = 1;
    if (!legal) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t same = 0, active = 0, compute = 0;
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        const struct fgs_gi *gi = &d->gis[g];
        if (!gi->active) continue;
        active++;
        compute += s->profiles[gi->profile_index].slice_count;
        if ((int)gi->profile_index == pi) same++;
        if (pl->start < gi->start + gi->size && gi->start < pl->start + pl->size)
            return NVML_ERROR_INSUFFICIENT_RESOURCES; /* memory slices overlap */
    }
    if (same >= p->instance_count || active >= s->mig_max_gpu_instances ||
        active >= FGS_MAX_GIS || compute + p->slice_count > s->mig_compute_slices)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    return NVML_SUCCESS;
}

/* the first legal free placement of profile pi, or -1 */
static int first_fit(const struct fgs_gpu_static *s, const struct fgs_gpu_dynamic *d, int pi)
{
    const struct fgs_profile *p = &s->profiles[pi];
    for (uint32_t i = 0; i < p->placement_count; i++) {
        nvmlGpuInstancePlacement_t pl = {p->placements[i].start, p->placements[i].size};
        if (gi_fits(s, d, pi, &pl) == NVML_SUCCESS) return (int)i;
    }
    return -1;
}

static void add_gi(const struct fgs_gpu_static *s, struct fgs_gpu_dynamic *d, int pi,
                   uint32_t start, uint32_t size, uint32_t *slot_out)
{
    uint32_t slot = 0;
    while (d->gis[slot].active) slot++;
    /* ids: the full-GPU profile is 0, others the lowest free id from 1 */
    uint32_t id = 0;
    if (s->profiles[pi].slice_count < s->mig_compute_slices) {
        for (id = 1;; id++) {
            int used = 0;
            for (uint32_t g = 0; g < FGS_MAX_GIS; g++)
                if (d->gis[g].active && d->gis[g].id == id) used = 1;
            if (!used) break;
        }
    }
    memset(&d->gis[slot], 0, sizeof(d->gis[slot]));
    d->gis[slot] = (struct fgs_gi){.active = 1, .id = id, .profile_index = (uint32_t)pi,
                                   .start = start, .size = size};
    *slot_out = slot;
}

/* ---- mode ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    FG_DEVICE(device, ref, currentMode);
    FG_CHECK_PTR(pendingMode);
    if (ref.is_mig || !fg_static(ref.gpu)->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *currentMode = d.mig_current;
    *pendingMode = d.mig_pending;
    return NVML_SUCCESS;
}

static nvmlReturn_t set_mode(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                             int *has_event, void *arg)
{
    (void)gpu;
    (void)ev;
    (void)has_event;
    unsigned mode = *(const unsigned *)arg;
    if (mode == NVML_DEVICE_MIG_DISABLE)
        for (uint32_t g = 0; g < FGS_MAX_GIS; g++)
            if (d->gis[g].active) return NVML_ERROR_IN_USE;
    /* no process ever uses a fake GPU, so the change applies at once (no reset needed) */
    d->mig_current = d->mig_pending = mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                  nvmlReturn_t *activationStatus)
{
    FG_DEVICE(device, ref, activationStatus);
    if (ref.is_mig || !fg_static(ref.gpu)->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = fg_mutate(ref.gpu, set_mode, &mode);
    *activationStatus = rc;
    return rc;
}

/* How many MIG devices can exist under the GPU right now: nvml.h says zero "if MIG is not
 * supported or enabled", and go-nvlib's GetMigDevices walks 0..count-1, so a MIG-off GPU
 * must answer 0 (not its capacity) for enumeration to succeed. */
uint32_t fg_max_mig_devices(const struct fg_ref *ref, const struct fgs_gpu_dynamic *d)
{
    const struct fgs_gpu_static *s = fg_static(ref->gpu);
    return ref->is_mig || !s->mig_capable || !d->mig_current ? 0 : s->mig_max_gpu_instances;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    FG_DEVICE(device, ref, count);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *count = fg_max_mig_devices(&ref, &d);
    return NVML_SUCCESS;
}

/* ---- GPU instance profiles ---- */

/* device checks shared by the profile/placement calls: a MIG-capable whole GPU */
#define FG_MIG_GPU(h, ref, out)                                                              \
    FG_DEVICE(h, ref, out);                                                                  \
    if (ref.is_mig || !fg_static(ref.gpu)->mig_capable) return NVML_ERROR_NOT_SUPPORTED;     \
    const struct fgs_gpu_static *s = fg_static(ref.gpu)

/* The profile indexes driver 580 knows: 0 .. NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME. A newer
 * header adds 3_SLICE_GFX (0x11); a real H200 on driver 580.159.04 answers INVALID_ARGUMENT
 * for it, as for any index past its count, and NOT_SUPPORTED for a known index it lacks. */
#define FG_GI_PROFILE_COUNT (NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME + 1)

static nvmlReturn_t gi_profile_index(const struct fgs_gpu_static *s, unsigned int profile, int *pi)
{
    if (profile >= FG_GI_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *pi = find_profile_by_enum(s, profile);
    return *pi < 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    FG_MIG_GPU(device, ref, info);
    int pi;
    FG_TRY(gi_profile_index(s, profile, &pi));
    const struct fgs_profile *p = &s->profiles[pi];
    *info = (nvmlGpuInstanceProfileInfo_t){
        .id = p->id, .isP2pSupported = 0, .sliceCount = p->slice_count,
        .instanceCount = p->instance_count, .multiprocessorCount = p->sm_count,
        .copyEngineCount = p->copy_engines, .decoderCount = p->decoders,
        .encoderCount = p->encoders, .jpegCount = p->jpegs, .ofaCount = p->ofas,
        .memorySizeMB = p->memory_mib};
    return NVML_SUCCESS;
}

/* Checked before the profile lookup. A real H200 (driver 580.159.04) answers INVALID_ARGUMENT,
 * not ARGUMENT_VERSION_MISMATCH, for a version other than v2/v3 (0 included), whatever the id. */
static nvmlReturn_t gi_info_version(const nvmlGpuInstanceProfileInfo_v2_t *info)
{
    return info->version == nvmlGpuInstanceProfileInfo_v2 ||
                   info->version == nvmlGpuInstanceProfileInfo_v3
               ? NVML_SUCCESS
               : NVML_ERROR_INVALID_ARGUMENT;
}

/* What the real driver (580.159.04, read on an H200) hands back in the V structs: the name
 * with NVIDIA's "MIG " prefix ("MIG 1g.18gb", as nvidia-smi mig -lgip prints it) and the
 * version field cleared to 0 (the caller passed v2, got 0 back with SUCCESS). The catalog
 * and the state file keep the bare profile name ("1g.18gb"): MIG device names use that. */
static void gi_name(const struct fgs_profile *p, char *out, size_t size)
{
    snprintf(out, size, "MIG %s", p->name);
}

static nvmlReturn_t fill_gi_profile_v(const struct fgs_profile *p, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    if (info->version == nvmlGpuInstanceProfileInfo_v2) {
        *info = (nvmlGpuInstanceProfileInfo_v2_t){
            .version = 0, .id = p->id, .isP2pSupported = 0,
            .sliceCount = p->slice_count, .instanceCount = p->instance_count,
            .multiprocessorCount = p->sm_count, .copyEngineCount = p->copy_engines,
            .decoderCount = p->decoders, .encoderCount = p->encoders, .jpegCount = p->jpegs,
            .ofaCount = p->ofas, .memorySizeMB = p->memory_mib};
        gi_name(p, info->name, sizeof(info->name));
        return NVML_SUCCESS;
    }
    if (info->version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        *v3 = (nvmlGpuInstanceProfileInfo_v3_t){
            .version = 0, .id = p->id, .sliceCount = p->slice_count,
            .instanceCount = p->instance_count, .multiprocessorCount = p->sm_count,
            .copyEngineCount = p->copy_engines, .decoderCount = p->decoders,
            .encoderCount = p->encoders, .jpegCount = p->jpegs, .ofaCount = p->ofas,
            .memorySizeMB = p->memory_mib, .capabilities = 0};
        gi_name(p, v3->name, sizeof(v3->name));
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    FG_MIG_GPU(device, ref, info);
    FG_TRY(gi_info_version(info));
    int pi;
    FG_TRY(gi_profile_index(s, profile, &pi));
    return fill_gi_profile_v(&s->profiles[pi], info);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info)
{
    FG_MIG_GPU(device, ref, info);
    FG_TRY(gi_info_version(info));
    int pi = find_profile_by_id(s, profileId);
    if (pi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    return fill_gi_profile_v(&s->profiles[pi], info);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count)
{
    FG_MIG_GPU(device, ref, count);
    int pi = find_profile_by_id(s, profileId);
    if (pi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fgs_profile *p = &s->profiles[pi];
    if (placements == NULL) {
        *count = p->placement_count;
        return NVML_SUCCESS;
    }
    if (*count < p->placement_count) {
        *count = p->placement_count;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (uint32_t i = 0; i < p->placement_count; i++) {
        placements[i].start = p->placements[i].start;
        placements[i].size = p->placements[i].size;
    }
    *count = p->placement_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t *placements,
                                                        unsigned int *count)
{
    return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count)
{
    FG_MIG_GPU(device, ref, count);
    int pi = find_profile_by_id(s, profileId);
    if (pi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    if (!d.mig_current) return NVML_ERROR_INVALID_STATE;
    unsigned n = 0;
    for (int i; (i = first_fit(s, &d, pi)) >= 0; n++) {
        uint32_t slot;
        add_gi(s, &d, pi, s->profiles[pi].placements[i].start, s->profiles[pi].placements[i].size,
               &slot);
    }
    *count = n;
    return NVML_SUCCESS;
}

/* ---- GPU instances ---- */

struct create_gi_arg {
    int pi;
    const nvmlGpuInstancePlacement_t *placement; /* NULL: first fit */
    uint32_t slot;
};

static nvmlReturn_t create_gi(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                              int *has_event, void *argp)
{
    (void)ev;
    (void)has_event;
    struct create_gi_arg *a = argp;
    const struct fgs_gpu_static *s = fg_static(gpu);
    if (!d->mig_current) return NVML_ERROR_INVALID_STATE;
    nvmlGpuInstancePlacement_t pl;
    if (a->placement != NULL) {
        pl = *a->placement;
        FG_TRY(gi_fits(s, d, a->pi, &pl));
    } else {
        int i = first_fit(s, d, a->pi);
        if (i < 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;
        pl.start = s->profiles[a->pi].placements[i].start;
        pl.size = s->profiles[a->pi].placements[i].size;
    }
    add_gi(s, d, a->pi, pl.start, pl.size, &a->slot);
    return NVML_SUCCESS;
}

static nvmlReturn_t create_gi_common(nvmlDevice_t device, unsigned int profileId,
                                     const nvmlGpuInstancePlacement_t *placement,
                                     nvmlGpuInstance_t *gpuInstance, int need_placement)
{
    FG_MIG_GPU(device, ref, gpuInstance);
    if (need_placement) FG_CHECK_PTR(placement);
    int pi = find_profile_by_id(s, profileId);
    if (pi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    struct create_gi_arg a = {pi, placement, 0};
    FG_TRY(fg_mutate(ref.gpu, create_gi, &a));
    *gpuInstance = fg_gi_handle(ref.gpu, a.slot);
    struct fgs_gpu_dynamic d;
    if (fg_read_dyn(ref.gpu, &d) == NVML_SUCCESS)
        fg_caps_write(s->minor, d.gis[a.slot].id, -1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t *gpuInstance)
{
    return create_gi_common(device, profileId, NULL, gpuInstance, 0);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance)
{
    return create_gi_common(device, profileId, placement, gpuInstance, 1);
}

static nvmlReturn_t destroy_gi(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                               int *has_event, void *argp)
{
    (void)gpu;
    (void)ev;
    (void)has_event;
    struct fgs_gi *gi = &d->gis[*(const uint32_t *)argp];
    if (!gi->active) return NVML_ERROR_INVALID_ARGUMENT;
    for (uint32_t c = 0; c < FGS_MAX_CIS; c++)
        if (gi->cis[c].active) return NVML_ERROR_IN_USE;
    memset(gi, 0, sizeof(*gi));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_gi(gpuInstance, &ref));
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    FG_TRY(fg_mutate(ref.gpu, destroy_gi, &ref.gi_slot));
    fg_caps_remove(fg_static(ref.gpu)->minor, d.gis[ref.gi_slot].id, -1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    FG_MIG_GPU(device, ref, count);
    FG_CHECK_PTR(gpuInstances);
    int pi = find_profile_by_id(s, profileId);
    if (pi < 0) return NVML_ERROR_INVALID_ARGUMENT;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    if (!d.mig_current) return NVML_ERROR_INVALID_STATE;
    unsigned n = 0;
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        if (!d.gis[g].active || (int)d.gis[g].profile_index != pi) continue;
        if (n >= *count) return NVML_ERROR_INSUFFICIENT_SIZE;
        gpuInstances[n++] = fg_gi_handle(ref.gpu, g);
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance)
{
    FG_MIG_GPU(device, ref, gpuInstance);
    (void)s;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    if (!d.mig_current) return NVML_ERROR_INVALID_STATE;
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        if (d.gis[g].active && d.gis[g].id == id) {
            *gpuInstance = fg_gi_handle(ref.gpu, g);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_gi(gpuInstance, &ref));
    FG_CHECK_PTR(info);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    const struct fgs_gi *gi = &d.gis[ref.gi_slot];
    info->device = fg_device_handle(ref.gpu);
    info->id = gi->id;
    info->profileId = fg_gi_profile(ref.gpu, &d, ref.gi_slot)->id;
    info->placement.start = gi->start;
    info->placement.size = gi->size;
    return NVML_SUCCESS;
}
