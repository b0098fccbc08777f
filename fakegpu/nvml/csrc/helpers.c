/* fakegpu_* helpers for fakegpu's Python side (fault injection, layout checks, re-render).
 * They open the file themselves, so they work without nvmlInit and in any process. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fakegpu.h"

enum { FG_FAULT_XID = 1, FG_FAULT_ECC_DBE, FG_FAULT_GPU_LOST, FG_FAULT_NVLINK_DOWN,
       FG_FAULT_FABRIC_DEGRADED };

struct fault_arg {
    int kind;
    long long value;
    int clear;
    const struct fgs_gpu_static *s;
};

static nvmlReturn_t apply_fault(uint32_t gpu, struct fgs_gpu_dynamic *d, struct fgs_event *ev,
                                int *has_event, void *argp)
{
    const struct fault_arg *a = argp;
    ev->gpu = gpu;
    ev->gpu_instance_id = FG_NO_GPU;
    ev->compute_instance_id = FG_NO_GPU;
    if (a->clear) {
        switch (a->kind) {
        case 0:
            d->lost = 0;
            d->fabric_degraded = 0;
            d->link_down_mask = 0;
            d->ecc_dbe_volatile = 0;
            d->last_xid = 0;
            return NVML_SUCCESS;
        case FG_FAULT_XID: d->last_xid = 0; return NVML_SUCCESS;
        case FG_FAULT_ECC_DBE: d->ecc_dbe_volatile = 0; return NVML_SUCCESS;
        case FG_FAULT_GPU_LOST: d->lost = 0; return NVML_SUCCESS;
        case FG_FAULT_FABRIC_DEGRADED: d->fabric_degraded = 0; return NVML_SUCCESS;
        case FG_FAULT_NVLINK_DOWN:
            if (a->value < 0) d->link_down_mask = 0;
            else if (a->value < 64) d->link_down_mask &= ~(1ull << a->value);
            else return NVML_ERROR_INVALID_ARGUMENT;
            return NVML_SUCCESS;
        default: return NVML_ERROR_INVALID_ARGUMENT;
        }
    }
    switch (a->kind) {
    case FG_FAULT_XID:
        if (a->value <= 0 || a->value > 0xffffffffll) return NVML_ERROR_INVALID_ARGUMENT;
        d->last_xid = (uint32_t)a->value;
        d->xid_count++;
        ev->event_type = nvmlEventTypeXidCriticalError;
        ev->event_data = (uint64_t)a->value;
        *has_event = 1;
        return NVML_SUCCESS;
    case FG_FAULT_ECC_DBE:
        d->ecc_dbe_volatile++;
        ev->event_type = nvmlEventTypeDoubleBitEccError;
        ev->event_data = 0;
        *has_event = 1;
        return NVML_SUCCESS;
    case FG_FAULT_GPU_LOST:
        d->lost = 1;
        d->last_xid = 79; /* "GPU has fallen off the bus" */
        d->xid_count++;
        ev->event_type = nvmlEventTypeXidCriticalError;
        ev->event_data = 79;
        *has_event = 1;
        return NVML_SUCCESS;
    case FG_FAULT_NVLINK_DOWN:
        if (a->value < 0 || a->value >= (long long)a->s->link_count)
            return NVML_ERROR_INVALID_ARGUMENT;
        d->link_down_mask |= 1ull << a->value;
        return NVML_SUCCESS;
    case FG_FAULT_FABRIC_DEGRADED:
        if (!a->s->fabric_present || a->s->fabric_state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
            return NVML_ERROR_NOT_SUPPORTED;
        d->fabric_degraded = 1;
        return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

static int fault_helper(const char *path, unsigned int gpu, int kind, long long value, int clear)
{
    if (path == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct fg_map *m;
    char *copy;
    nvmlReturn_t rc = fg_map_open(path, &m, &copy);
    if (rc != NVML_SUCCESS) return (int)rc;
    const struct fgs_header *h = (const void *)copy;
    int status = NVML_ERROR_INVALID_ARGUMENT;
    if (gpu < h->gpu_count) {
        const struct fgs_gpu *recs = (const void *)(copy + sizeof(struct fgs_header));
        struct fault_arg a = {kind, value, clear, &recs[gpu].s};
        status = fg_map_mutate(m, &recs[gpu].s, gpu, apply_fault, &a);
    }
    fg_map_close(m);
    free(copy);
    /* the file changed under us (truncated, replaced): nothing was injected */
    return status == FG_MAP_CHANGED ? NVML_ERROR_GPU_IS_LOST : status;
}

FG_EXPORT int fakegpu_inject_fault(const char *path, unsigned int gpu, int kind, long long value)
{
    return fault_helper(path, gpu, kind, value, 0);
}

FG_EXPORT int fakegpu_clear_fault(const char *path, unsigned int gpu, int kind, long long value)
{
    return fault_helper(path, gpu, kind, value, 1);
}

/* Validate a state file as nvmlInit would; returns the NVML code. */
FG_EXPORT int fakegpu_check_state(const char *path)
{
    if (path == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct fg_map *m;
    char *copy;
    nvmlReturn_t rc = fg_map_open(path, &m, &copy);
    if (rc == NVML_SUCCESS) {
        fg_map_close(m);
        free(copy);
    }
    return (int)rc;
}

/* Copy a consistent snapshot of one GPU's dynamic record (for tests and `fakegpu smi`). */
FG_EXPORT int fakegpu_read_dynamic(const char *path, unsigned int gpu, void *out, size_t len)
{
    if (path == NULL || out == NULL || len != sizeof(struct fgs_gpu_dynamic))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fg_map *m;
    char *copy;
    nvmlReturn_t rc = fg_map_open(path, &m, &copy);
    if (rc != NVML_SUCCESS) return (int)rc;
    int status = fg_map_read_dyn(m, gpu, out);
    fg_map_close(m);
    free(copy);
    return status == FG_MAP_CHANGED ? NVML_ERROR_GPU_IS_LOST : status;
}
