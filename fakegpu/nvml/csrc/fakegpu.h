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

/* A resolved device: which GPU and, for MIG devices, which GI/CI slot. */
struct fg_ref {
    uint32_t gpu;
    uint32_t gi_slot;
    uint32_t ci_slot;
    int is_mig;
};

/* ---- store.c: the mapped state file ---- */
extern const struct fgs_header *fg_hdr;     /* private copy; NULL when initialised without a file */
extern unsigned int fg_gpu_count;

/* One mapping of a state file. */
struct fg_map {
    struct fgs_header *hdr;                 /* shared (MAP_SHARED); touch only in fg_guarded */
    size_t len;
    int fd;
    int writable;                           /* opened read-write: may change the file */
    uint32_t checksum;                      /* static checksum when validated */
    uint32_t gpu_count;                     /* as validated */
    uint64_t serial;                        /* distinct for every mapping made */
    uint64_t first_event;                   /* event_seq when mapped */
    unsigned long long dev, ino;            /* the file mapped */
    struct fg_map *next;                    /* retired list */
};
/* an op on a mapping answers an NVML code, or this: the mapping no longer holds the file */
#define FG_MAP_CHANGED (-1)

nvmlReturn_t fg_map_open(const char *path, struct fg_map **m, char **private_copy);
void fg_map_close(struct fg_map *m);
int fg_map_read_dyn(const struct fg_map *m, uint32_t gpu, struct fgs_gpu_dynamic *out);

/* Run a change: fn edits a private copy of the GPU's dynamic record and may set an event.
 * Returning anything but NVML_SUCCESS abandons the change. */
typedef nvmlReturn_t (*fg_mutator)(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                                   int *has_event, void *arg);
int fg_map_mutate(const struct fg_map *m, const struct fgs_gpu_static *s, uint32_t gpu,
                  fg_mutator fn, void *arg);
int fg_dyn_ok(const struct fgs_gpu_static *s, const struct fgs_gpu_dynamic *d);

nvmlReturn_t fg_store_open(void);           /* maps FAKEGPU_NVML_STATE; validates */
/* The state's name among the driver's files a container is given (store.c), and whether the
 * open store came from there at the root (no FAKEGPU_NVML_STATE: a container NVIDIA's plugin
 * prepared; not when found beside the library in its driver root). */
#define FG_FIRMWARE_STATE_GLOB "/lib/firmware/nvidia/*/gsp_fakegpu_nvml_state.bin"
extern int fg_store_from_driver_files;
void fg_store_close(void);                  /* only with no call in flight */
int fg_store_is_open(void);
const struct fgs_gpu_static *fg_static(uint32_t gpu);  /* from the private copy */
/* A consistent, validated snapshot: GPU_IS_LOST when the file no longer describes this
 * node, UNKNOWN when the record is corrupt (an index out of range). */
nvmlReturn_t fg_read_dyn(uint32_t gpu, struct fgs_gpu_dynamic *out);
nvmlReturn_t fg_mutate(uint32_t gpu, fg_mutator fn, void *arg);

/* The event ring: events with seq in [max(oldest, cursor), head) are in ring[seq % RING];
 * serial changes when the client moved to another mapping, whose ring counts from first. */
struct fg_events {
    struct fgs_event *ring;                 /* FGS_EVENT_RING entries, or NULL for head only */
    uint64_t head, oldest, serial, first;
};
nvmlReturn_t fg_events(struct fg_events *out);

void fg_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint32_t fg_crc32(uint32_t crc, const void *data, size_t len);

/* ---- guard.c ---- */
/* Run fn(arg) with SIGBUS on [base, base+len) turned into a -1 return (0 otherwise). */
int fg_guarded(const void *base, size_t len, void (*fn)(void *), void *arg);

/* ---- init.c ---- */
int fg_initialised(void);
/* Every hand-written call is counted while it runs, so the final nvmlShutdown can wait for
 * calls racing it before it unmaps (see FG_CHECK_INIT). */
int fg_call_begin(void);
void fg_call_end(int *begun);

/* ---- handles.c ---- */
/* Handles are addresses in a reserved range, one bank per node this process has seen: a
 * handle from before nvmlShutdown + nvmlInit on another node's file is refused. */
nvmlReturn_t fg_handles_begin(void);        /* at init: pick the bank for the mapped node */
uint32_t fg_handles_bank(void);
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
uint32_t fg_max_mig_devices(const struct fg_ref *ref, const struct fgs_gpu_dynamic *d);
/* ---- mig_ci.c ---- */
nvmlReturn_t fg_mig_index(const struct fg_ref *ref, unsigned int *index);

/* ---- util ---- */
nvmlReturn_t fg_copy_str(char *dst, unsigned int len, const char *src);

/* Declares the call's in-flight mark, released when the function returns. */
#define FG_CHECK_INIT()                                                                      \
    int fg_call_ __attribute__((cleanup(fg_call_end))) = fg_call_begin();                    \
    if (!fg_call_) return NVML_ERROR_UNINITIALIZED
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
