/*
 * Internal interface of the fake NVML library. Every hand-written entry point runs the same
 * checks in the same order through the macros below:
 *   1. initialised?         FG_CHECK_INIT()
 *   2. valid handle?        fg_device(handle, &ref) / fg_gi(...) / fg_ci(...)
 *   3. non-NULL out-pointer FG_CHECK_PTR(p)
 *   4. right struct version FG_CHECK_VERSION(v, expected)
 */
#ifndef FAKEGPU_INTERNAL_H
#define FAKEGPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* NVML names get default visibility; everything else stays hidden (-fvisibility=hidden). */
#pragma GCC visibility push(default)
#include <nvml.h>
#pragma GCC visibility pop

#include "state.h"

#define FG_EXPORT __attribute__((visibility("default")))
#define FG_NO_GPU 0xffffffffu

/* A device handle: a whole GPU (gi == FG_NO_GPU) or a MIG device (gpu, GI slot, CI slot). */
struct nvmlDevice_st {
    uint32_t gpu;
    uint32_t gi_slot;
    uint32_t ci_slot;
    uint32_t is_mig;
};
struct nvmlGpuInstance_st {
    uint32_t gpu;
    uint32_t gi_slot;
};
struct nvmlComputeInstance_st {
    uint32_t gpu;
    uint32_t gi_slot;
    uint32_t ci_slot;
    uint32_t pad;
};

/* A resolved device: which GPU and, for MIG devices, which GI/CI slot. */
struct fg_ref {
    uint32_t gpu;
    uint32_t gi_slot;
    uint32_t ci_slot;
    int is_mig;
};

/* ---- store.c: the mapped state file ---- */
extern struct fgs_header *fg_hdr;           /* NULL when initialised with NO_GPUS and no file */
extern unsigned int fg_gpu_count;

nvmlReturn_t fg_store_open(void);           /* maps FAKEGPU_NVML_STATE; validates */
void fg_store_close(void);
int fg_store_is_open(void);
const struct fgs_gpu_static *fg_static(uint32_t gpu);
void fg_read_dyn(uint32_t gpu, struct fgs_gpu_dynamic *out);   /* consistent snapshot */

/* Run a change: fn edits a private copy of the GPU's dynamic record and may set an event.
 * Returning anything but NVML_SUCCESS abandons the change. */
typedef nvmlReturn_t (*fg_mutator)(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                                   int *has_event, void *arg);
nvmlReturn_t fg_mutate(uint32_t gpu, fg_mutator fn, void *arg);
uint64_t fg_event_seq(void);
int fg_event_at(uint64_t seq, struct fgs_event *out);  /* 0 if overwritten */
void fg_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint32_t fg_crc32(uint32_t crc, const void *data, size_t len);

/* ---- init.c ---- */
int fg_initialised(void);

/* ---- handles.c ---- */
nvmlDevice_t fg_device_handle(uint32_t gpu);
nvmlDevice_t fg_mig_handle(uint32_t gpu, uint32_t gi_slot, uint32_t ci_slot);
nvmlGpuInstance_t fg_gi_handle(uint32_t gpu, uint32_t gi_slot);
nvmlComputeInstance_t fg_ci_handle(uint32_t gpu, uint32_t gi_slot, uint32_t ci_slot);
/* Resolve and validate; answer INVALID_ARGUMENT for garbage, GPU_IS_LOST for a lost GPU,
 * NOT_FOUND-like INVALID_ARGUMENT for a MIG device whose instance is gone. */
nvmlReturn_t fg_device(nvmlDevice_t h, struct fg_ref *ref);
nvmlReturn_t fg_device_any(nvmlDevice_t h, struct fg_ref *ref);  /* also when lost */
nvmlReturn_t fg_gi(nvmlGpuInstance_t h, struct fg_ref *ref);
nvmlReturn_t fg_ci(nvmlComputeInstance_t h, struct fg_ref *ref);

/* ---- mig.c helpers used elsewhere ---- */
void fg_mig_uuid(uint32_t gpu, uint32_t gi_id, uint32_t ci_id, char *out, size_t len);
const struct fgs_profile *fg_gi_profile(uint32_t gpu, const struct fgs_gpu_dynamic *d, uint32_t gi_slot);

/* ---- util ---- */
nvmlReturn_t fg_copy_str(char *dst, unsigned int len, const char *src);

#define FG_CHECK_INIT()                                                                      \
    do {                                                                                     \
        if (!fg_initialised()) return NVML_ERROR_UNINITIALIZED;                             \
    } while (0)
#define FG_CHECK_PTR(p)                                                                      \
    do {                                                                                     \
        if ((p) == NULL) return NVML_ERROR_INVALID_ARGUMENT;                                 \
    } while (0)
#define FG_TRY(expr)                                                                         \
    do {                                                                                     \
        nvmlReturn_t fg_rc_ = (expr);                                                        \
        if (fg_rc_ != NVML_SUCCESS) return fg_rc_;                                           \
    } while (0)
/* the usual opening of a device query: init, handle, out pointer */
#define FG_DEVICE(h, ref, out)                                                               \
    FG_CHECK_INIT();                                                                         \
    struct fg_ref ref;                                                                       \
    FG_TRY(fg_device((h), &ref));                                                            \
    FG_CHECK_PTR(out)

#endif
