/* Event sets: waiting processes follow the event ring in the mapped state file, so an event
 * posted by any process (fault injection) reaches every waiter on the node. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "fakegpu.h"

#define FG_MAX_EVENT_SETS 64u
/* Every type the header names: a real H200 on driver 580.159.04 answers 0xFF9F
 * (nvmlEventTypeAll) and registers any of them; a bit outside it is NOT_SUPPORTED. Only XID
 * and ECC events are ever posted here (fault injection). */
#define FG_SUPPORTED_EVENTS nvmlEventTypeAll

struct nvmlEventSet_st {
    int used;
    uint32_t bank;                     /* the node's handle bank when created */
    uint64_t serial;                   /* the mapping the cursor counts in */
    uint64_t cursor;                   /* next event_seq to look at */
    unsigned long long mask[FGS_MAX_GPUS];
};

static struct nvmlEventSet_st sets[FG_MAX_EVENT_SETS];
static pthread_mutex_t sets_mutex = PTHREAD_MUTEX_INITIALIZER;

/* caller holds sets_mutex; a set made before nvmlInit on another node's file is stale */
static struct nvmlEventSet_st *set_any(nvmlEventSet_t set)
{
    uintptr_t u = (uintptr_t)set, b = (uintptr_t)sets;
    if (u < b || u >= b + sizeof(sets) || (u - b) % sizeof(sets[0]) != 0) return NULL;
    return set->used ? set : NULL;
}

static struct nvmlEventSet_st *set_of(nvmlEventSet_t set)
{
    struct nvmlEventSet_st *s = set_any(set);
    return s != NULL && s->bank == fg_handles_bank() ? s : NULL;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(set);
    struct fg_events ev = {NULL, 0, 0, 0, 0};
    if (fg_store_is_open()) FG_TRY(fg_events(&ev));
    nvmlReturn_t rc = NVML_ERROR_MEMORY;
    pthread_mutex_lock(&sets_mutex);
    for (uint32_t i = 0; i < FG_MAX_EVENT_SETS; i++) {
        if (sets[i].used) continue;
        memset(&sets[i], 0, sizeof(sets[i]));
        sets[i].used = 1;
        sets[i].bank = fg_handles_bank();
        sets[i].serial = ev.serial;
        sets[i].cursor = ev.head;
        *set = &sets[i];
        rc = NVML_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&sets_mutex);
    return rc;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    FG_CHECK_INIT();
    pthread_mutex_lock(&sets_mutex);
    struct nvmlEventSet_st *s = set_any(set); /* a stale set may still be freed */
    if (s != NULL) s->used = 0;
    pthread_mutex_unlock(&sets_mutex);
    return s != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    FG_DEVICE(device, ref, eventTypes);
    *eventTypes = FG_SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    FG_TRY(fg_device(device, &ref));
    if (ref.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    if (eventTypes & ~(unsigned long long)FG_SUPPORTED_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&sets_mutex);
    struct nvmlEventSet_st *s = set_of(set);
    if (s != NULL) s->mask[ref.gpu] |= eventTypes;
    pthread_mutex_unlock(&sets_mutex);
    return s != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* one pass over newly posted events: 1 and *data filled if one matches */
static nvmlReturn_t poll_once(nvmlEventSet_t set, nvmlEventData_t *data, int *found)
{
    *found = 0;
    struct fgs_event ring[FGS_EVENT_RING];
    struct fg_events ev = {ring, 0, 0, 0, 0};
    FG_TRY(fg_events(&ev));
    pthread_mutex_lock(&sets_mutex);
    struct nvmlEventSet_st *s = set_of(set);
    if (s == NULL) {
        pthread_mutex_unlock(&sets_mutex);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (s->serial != ev.serial) {
        /* re-init or a re-rendered file: deliver what was posted since the client mapped it */
        s->serial = ev.serial;
        s->cursor = ev.first;
    }
    if (ev.head < s->cursor) s->cursor = ev.head; /* a file was copied over it: count afresh */
    if (s->cursor < ev.oldest) s->cursor = ev.oldest; /* older ones were overwritten */
    while (s->cursor < ev.head && !*found) {
        const struct fgs_event *e = &ring[s->cursor % FGS_EVENT_RING];
        s->cursor++;
        if (e->gpu >= fg_gpu_count || !(s->mask[e->gpu] & e->event_type)) continue;
        data->device = fg_device_handle(e->gpu);
        data->eventType = e->event_type;
        data->eventData = e->event_data;
        data->gpuInstanceId = e->gpu_instance_id;
        data->computeInstanceId = e->compute_instance_id;
        *found = 1;
    }
    pthread_mutex_unlock(&sets_mutex);
    return NVML_SUCCESS;
}

#define EVENT_POLL_MIN_NS 500000L   /* 0.5 ms */
#define EVENT_POLL_MAX_NS 20000000L /* 20 ms: an idle wait looks 50 times a second */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    FG_CHECK_INIT();
    FG_CHECK_PTR(data);
    if (!fg_store_is_open()) return NVML_ERROR_TIMEOUT;
    uint64_t deadline = now_ms() + timeoutms;
    /* Polled, as the events live in the shared file: the first looks follow each other
     * closely (an event posted just before the call), then the gaps double up to
     * EVENT_POLL_MAX_NS. A fixed 0.5 ms gap cost a waiting client about 4% of a core
     * doing nothing (a DRA plugin per node waits here all its life; docs/testing.md). */
    long gap_ns = EVENT_POLL_MIN_NS;
    for (;;) {
        /* a shutdown waits for this call: leave as soon as it starts */
        if (!fg_initialised()) return NVML_ERROR_UNINITIALIZED;
        int found;
        FG_TRY(poll_once(set, data, &found));
        if (found) return NVML_SUCCESS;
        uint64_t now = now_ms();
        if (now >= deadline) return NVML_ERROR_TIMEOUT;
        uint64_t left_ns = (deadline - now) * 1000000u;
        struct timespec ts = {0, (long)(left_ns < (uint64_t)gap_ns ? left_ns : (uint64_t)gap_ns)};
        nanosleep(&ts, NULL);
        if (gap_ns < EVENT_POLL_MAX_NS) gap_ns *= 2;
        if (gap_ns > EVENT_POLL_MAX_NS) gap_ns = EVENT_POLL_MAX_NS;
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}
