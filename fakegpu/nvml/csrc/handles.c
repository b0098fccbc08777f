/* Handles: addresses in one reserved, read-only range that holds no data (the zero page at
 * most), so a handle is validated by arithmetic and never dereferenced. The range has a bank
 * per node this process has initialised on: after nvmlShutdown + nvmlInit on another node's
 * file, handles of the old node fall outside the current bank and are refused; a re-init on
 * the same node keeps its bank, so its handles stay valid as with a real driver. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>

#include "fakegpu.h"
#include "visible.h"

#define FG_BANKS 64u  /* a handle aliases again only after 64 switches of node */
#define FG_SLOT 16u   /* bytes per handle: keeps them aligned like real structs */
enum {
    N_DEV = FGS_MAX_GPUS,
    N_MIG = FGS_MAX_GPUS * FGS_MAX_GIS * FGS_MAX_CIS,
    N_GI = FGS_MAX_GPUS * FGS_MAX_GIS,
    OFF_DEV = 0,
    OFF_MIG = OFF_DEV + N_DEV,
    OFF_GI = OFF_MIG + N_MIG,
    OFF_CI = OFF_GI + N_GI,
    PER_BANK = OFF_CI + N_MIG,
};

static char *space;                             /* FG_BANKS * PER_BANK slots */
static uint32_t bank;
static int have_identity;
static char identity[FGS_HEADER_STATIC_END];    /* the static header of the bank's node */

/* Called by nvmlInit with no call in flight. */
nvmlReturn_t fg_handles_begin(void)
{
    if (space == NULL) {
        void *p = mmap(NULL, (size_t)FG_BANKS * PER_BANK * FG_SLOT, PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return NVML_ERROR_MEMORY;
        space = p;
    }
    if (fg_hdr == NULL) return NVML_SUCCESS;    /* no file: no handles */
    /* the static header holds the node name and the checksum of every GPU's facts */
    if (have_identity && memcmp(identity, fg_hdr, sizeof(identity)) == 0) return NVML_SUCCESS;
    if (have_identity) bank = (bank + 1) % FG_BANKS;
    memcpy(identity, fg_hdr, sizeof(identity));
    have_identity = 1;
    return NVML_SUCCESS;
}

uint32_t fg_handles_bank(void) { return bank; }

static void *handle_at(uint32_t slot)
{
    return space + ((size_t)bank * PER_BANK + slot) * FG_SLOT;
}

/* the index of handle p among the n slots from off of the current bank, or -1 */
static long slot_of(const void *p, uint32_t off, uint32_t n)
{
    if (space == NULL) return -1;
    uintptr_t u = (uintptr_t)p, b = (uintptr_t)handle_at(off);
    if (u < b || u >= b + (uintptr_t)n * FG_SLOT || (u - b) % FG_SLOT != 0) return -1;
    return (long)((u - b) / FG_SLOT);
}

static uint32_t mig_slot(uint32_t gpu, uint32_t gi, uint32_t ci)
{
    return (gpu * FGS_MAX_GIS + gi) * FGS_MAX_CIS + ci;
}

nvmlDevice_t fg_device_handle(uint32_t gpu) { return handle_at(OFF_DEV + gpu); }

nvmlDevice_t fg_mig_handle(uint32_t gpu, uint32_t gi, uint32_t ci)
{
    return handle_at(OFF_MIG + mig_slot(gpu, gi, ci));
}

nvmlGpuInstance_t fg_gi_handle(uint32_t gpu, uint32_t gi)
{
    return handle_at(OFF_GI + gpu * FGS_MAX_GIS + gi);
}

nvmlComputeInstance_t fg_ci_handle(uint32_t gpu, uint32_t gi, uint32_t ci)
{
    return handle_at(OFF_CI + mig_slot(gpu, gi, ci));
}

static nvmlReturn_t live_instance(struct fg_ref *ref, int need_ci)
{
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref->gpu, &d));
    if (d.lost) return NVML_ERROR_GPU_IS_LOST;
    if (!d.mig_current || !d.gis[ref->gi_slot].active) return NVML_ERROR_INVALID_ARGUMENT;
    if (need_ci && !d.gis[ref->gi_slot].cis[ref->ci_slot].active)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t fg_device_any(nvmlDevice_t h, struct fg_ref *ref)
{
    long i = slot_of(h, OFF_DEV, N_DEV);
    if (i >= 0) {
        if ((unsigned)i >= fg_gpu_count || !fg_view_shows((uint32_t)i))
            return NVML_ERROR_INVALID_ARGUMENT;
        *ref = (struct fg_ref){(uint32_t)i, FG_NO_GPU, FG_NO_GPU, 0};
        return NVML_SUCCESS;
    }
    i = slot_of(h, OFF_MIG, N_MIG);
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t gpu = (uint32_t)i / (FGS_MAX_GIS * FGS_MAX_CIS);
    if (gpu >= fg_gpu_count || !fg_view_shows(gpu)) return NVML_ERROR_INVALID_ARGUMENT;
    *ref = (struct fg_ref){gpu, ((uint32_t)i / FGS_MAX_CIS) % FGS_MAX_GIS,
                           (uint32_t)i % FGS_MAX_CIS, 1};
    if (!fg_view_shows_mig_slot(gpu, ref->gi_slot, ref->ci_slot))
        return NVML_ERROR_INVALID_ARGUMENT; /* another container's MIG device */
    return NVML_SUCCESS;
}

nvmlReturn_t fg_device(nvmlDevice_t h, struct fg_ref *ref)
{
    FG_TRY(fg_device_any(h, ref));
    if (ref->is_mig) return live_instance(ref, 1);
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref->gpu, &d));
    return d.lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

nvmlReturn_t fg_gi(nvmlGpuInstance_t h, struct fg_ref *ref)
{
    long i = slot_of(h, OFF_GI, N_GI);
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;
    uint32_t gpu = (uint32_t)i / FGS_MAX_GIS;
    if (gpu >= fg_gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *ref = (struct fg_ref){gpu, (uint32_t)i % FGS_MAX_GIS, FG_NO_GPU, 1};
    return live_instance(ref, 0);
}

nvmlReturn_t fg_ci(nvmlComputeInstance_t h, struct fg_ref *ref)
{
    long i = slot_of(h, OFF_CI, N_MIG);
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
