/* The mapped state file: open + validate, seqlock reads, journaled writes under flock. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fakegpu.h"

struct fgs_header *fg_hdr = NULL;
unsigned int fg_gpu_count = 0;
static int fg_fd = -1;
static size_t fg_map_len = 0;
static pthread_mutex_t fg_write_mutex = PTHREAD_MUTEX_INITIALIZER;

void fg_debug(const char *fmt, ...)
{
    const char *dbg = getenv("FAKEGPU_NVML_DEBUG");
    if (dbg == NULL || dbg[0] == '\0' || strcmp(dbg, "0") == 0) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("fakegpu-nvml: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

uint32_t fg_crc32(uint32_t crc, const void *data, size_t len)
{
    static uint32_t table[256];
    static int ready = 0;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

static struct fgs_gpu *gpu_rec(const struct fgs_header *h, uint32_t gpu)
{
    return (struct fgs_gpu *)((char *)h + h->header_size + (size_t)gpu * h->gpu_size);
}

/* Checksum of everything static: header up to `generation` (checksum field as 0), GPU statics. */
static uint32_t static_checksum(const struct fgs_header *h)
{
    struct fgs_header copy;
    memcpy(&copy, h, FGS_HEADER_STATIC_END);
    copy.checksum = 0;
    uint32_t crc = fg_crc32(0, &copy, FGS_HEADER_STATIC_END);
    for (uint32_t i = 0; i < h->gpu_count; i++)
        crc = fg_crc32(crc, &gpu_rec(h, i)->s, sizeof(struct fgs_gpu_static));
    return crc;
}

/* Finish a published journal entry (caller holds the lock). Idempotent. */
static void replay_journal(struct fgs_header *h)
{
    if (__atomic_load_n(&h->journal_state, __ATOMIC_ACQUIRE) != FGS_JOURNAL_READY) {
        /* a writer may have died with the seqlock odd before publishing: make it even */
        uint64_t g = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
        if (g & 1u) __atomic_store_n(&h->generation, g + 1, __ATOMIC_RELEASE);
        return;
    }
    uint32_t gpu = h->journal_gpu;
    uint64_t g = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
    if (!(g & 1u)) __atomic_store_n(&h->generation, g + 1, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (gpu < h->gpu_count) memcpy(&gpu_rec(h, gpu)->d, &h->journal_dyn, sizeof(h->journal_dyn));
    if (h->journal_has_event) {
        /* the event goes to slot journal_event_seq; event_seq
         * is only bumped after the slot is written, so a replay writes the same slot again */
        uint64_t seq = __atomic_load_n(&h->event_seq, __ATOMIC_ACQUIRE);
        if ((uint32_t)seq == h->journal_event_seq) {
            h->events[seq % FGS_EVENT_RING] = h->journal_event;
            __atomic_store_n(&h->event_seq, seq + 1, __ATOMIC_RELEASE);
        }
    }
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    g = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
    __atomic_store_n(&h->generation, (g | 1u) + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&h->journal_state, FGS_JOURNAL_EMPTY, __ATOMIC_RELEASE);
}

/* Validate a mapping; on failure say why (debug) and return the NVML error. */
static nvmlReturn_t validate(const struct fgs_header *h, size_t len, const char *path)
{
    if (len < sizeof(struct fgs_header) || memcmp(h->magic, FGS_MAGIC, 8) != 0) {
        fg_debug("%s: not a fakegpu state file (bad magic or too short)", path);
        return NVML_ERROR_UNKNOWN;
    }
    if (h->layout_version != FGS_LAYOUT_VERSION || h->header_size != sizeof(struct fgs_header) ||
        h->gpu_size != sizeof(struct fgs_gpu)) {
        fg_debug("%s: state layout %u (header %u, gpu %u bytes) but this library reads layout %u "
                 "(%zu, %zu)", path, h->layout_version, h->header_size, h->gpu_size,
                 FGS_LAYOUT_VERSION, sizeof(struct fgs_header), sizeof(struct fgs_gpu));
        return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    }
    if (h->gpu_count > FGS_MAX_GPUS ||
        h->file_size != (uint64_t)h->header_size + (uint64_t)h->gpu_count * h->gpu_size ||
        h->file_size != len) {
        fg_debug("%s: size mismatch (file %zu bytes, header says %llu for %u GPUs)", path, len,
                 (unsigned long long)h->file_size, h->gpu_count);
        return NVML_ERROR_UNKNOWN;
    }
    if (static_checksum(h) != h->checksum) {
        fg_debug("%s: checksum mismatch: the file is corrupt", path);
        return NVML_ERROR_UNKNOWN;
    }
    for (uint32_t i = 0; i < h->gpu_count; i++) {
        const struct fgs_gpu_static *s = &gpu_rec(h, i)->s;
        if (s->link_count > FGS_MAX_LINKS || s->profile_count > FGS_MAX_PROFILES) {
            fg_debug("%s: GPU %u has out-of-range counts", path, i);
            return NVML_ERROR_UNKNOWN;
        }
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t map_file(const char *path, int *fd_out, struct fgs_header **hdr_out,
                             size_t *len_out)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fg_debug("%s: cannot open state file: %s", path, strerror(errno));
        return errno == ENOENT ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_ERROR_NO_PERMISSION;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct fgs_header)) {
        fg_debug("%s: not a fakegpu state file (too short)", path);
        close(fd);
        return NVML_ERROR_UNKNOWN;
    }
    size_t len = (size_t)st.st_size;
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        fg_debug("%s: mmap failed: %s", path, strerror(errno));
        close(fd);
        return NVML_ERROR_OPERATING_SYSTEM;
    }
    nvmlReturn_t rc = validate(m, len, path);
    if (rc != NVML_SUCCESS) {
        munmap(m, len);
        close(fd);
        return rc;
    }
    *fd_out = fd;
    *hdr_out = m;
    *len_out = len;
    return NVML_SUCCESS;
}

nvmlReturn_t fg_store_open(void)
{
    const char *path = getenv("FAKEGPU_NVML_STATE");
    if (path == NULL || path[0] == '\0') {
        fg_debug("FAKEGPU_NVML_STATE is not set: no fake GPUs on this node");
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    nvmlReturn_t rc = map_file(path, &fg_fd, &fg_hdr, &fg_map_len);
    if (rc != NVML_SUCCESS) return rc;
    fg_gpu_count = fg_hdr->gpu_count;
    return NVML_SUCCESS;
}

void fg_store_close(void)
{
    if (fg_hdr != NULL) munmap(fg_hdr, fg_map_len);
    if (fg_fd >= 0) close(fg_fd);
    fg_hdr = NULL;
    fg_fd = -1;
    fg_gpu_count = 0;
}

int fg_store_is_open(void) { return fg_hdr != NULL; }

const struct fgs_gpu_static *fg_static(uint32_t gpu) { return &gpu_rec(fg_hdr, gpu)->s; }

static void lock_file(int fd)
{
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
}

static void read_dyn(struct fgs_header *h, int fd, uint32_t gpu, struct fgs_gpu_dynamic *out)
{
    const struct fgs_gpu_dynamic *src = &gpu_rec(h, gpu)->d;
    for (int tries = 0;; tries++) {
        uint64_t g1 = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
        if (!(g1 & 1u)) {
            memcpy(out, src, sizeof(*out));
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&h->generation, __ATOMIC_ACQUIRE) == g1) return;
        }
        if (tries > 2000) {
            /* a writer died mid-change: finish its journal under the lock, then read */
            lock_file(fd);
            replay_journal(h);
            memcpy(out, src, sizeof(*out));
            flock(fd, LOCK_UN);
            return;
        }
        if (tries > 50) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

void fg_read_dyn(uint32_t gpu, struct fgs_gpu_dynamic *out) { read_dyn(fg_hdr, fg_fd, gpu, out); }

static nvmlReturn_t mutate(struct fgs_header *h, int fd, uint32_t gpu, fg_mutator fn, void *arg)
{
    pthread_mutex_lock(&fg_write_mutex);
    lock_file(fd);
    replay_journal(h);
    struct fgs_gpu_dynamic d;
    memcpy(&d, &gpu_rec(h, gpu)->d, sizeof(d));
    struct fgs_event ev;
    memset(&ev, 0, sizeof(ev));
    int has_event = 0;
    nvmlReturn_t rc = fn(gpu, &d, &ev, &has_event, arg);
    if (rc == NVML_SUCCESS) {
        /* write ahead: the complete change, then publish it, then apply it */
        h->journal_gpu = gpu;
        h->journal_dyn = d;
        h->journal_event = ev;
        h->journal_has_event = has_event ? 1u : 0u;
        h->journal_event_seq = (uint32_t)__atomic_load_n(&h->event_seq, __ATOMIC_ACQUIRE);
        __atomic_store_n(&h->journal_state, FGS_JOURNAL_READY, __ATOMIC_RELEASE);
        replay_journal(h);
    }
    flock(fd, LOCK_UN);
    pthread_mutex_unlock(&fg_write_mutex);
    return rc;
}

nvmlReturn_t fg_mutate(uint32_t gpu, fg_mutator fn, void *arg)
{
    return mutate(fg_hdr, fg_fd, gpu, fn, arg);
}

uint64_t fg_event_seq(void) { return __atomic_load_n(&fg_hdr->event_seq, __ATOMIC_ACQUIRE); }

int fg_event_at(uint64_t seq, struct fgs_event *out)
{
    *out = fg_hdr->events[seq % FGS_EVENT_RING];
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return fg_event_seq() - seq <= FGS_EVENT_RING;
}

/* ------------------------------------------------------------------------------------------
 * Private helpers for fakegpu's Python side (fault injection, layout checks). They open the
 * file themselves, so they work without nvmlInit and in any process.
 * ---------------------------------------------------------------------------------------- */

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
        if (!a->s->fabric_present) return NVML_ERROR_NOT_SUPPORTED;
        d->fabric_degraded = 1;
        return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

static int fault_helper(const char *path, unsigned int gpu, int kind, long long value, int clear)
{
    if (path == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    int fd;
    struct fgs_header *h;
    size_t len;
    nvmlReturn_t rc = map_file(path, &fd, &h, &len);
    if (rc != NVML_SUCCESS) return (int)rc;
    if (gpu >= h->gpu_count) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        struct fault_arg a = {kind, value, clear, &gpu_rec(h, gpu)->s};
        rc = mutate(h, fd, gpu, apply_fault, &a);
    }
    munmap(h, len);
    close(fd);
    return (int)rc;
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
    int fd;
    struct fgs_header *h;
    size_t len;
    nvmlReturn_t rc = map_file(path, &fd, &h, &len);
    if (rc == NVML_SUCCESS) {
        munmap(h, len);
        close(fd);
    }
    return (int)rc;
}

/* Copy a consistent snapshot of one GPU's dynamic record (for tests and `fakegpu smi`). */
FG_EXPORT int fakegpu_read_dynamic(const char *path, unsigned int gpu, void *out, size_t len)
{
    if (path == NULL || out == NULL || len != sizeof(struct fgs_gpu_dynamic))
        return NVML_ERROR_INVALID_ARGUMENT;
    int fd;
    struct fgs_header *h;
    size_t maplen;
    nvmlReturn_t rc = map_file(path, &fd, &h, &maplen);
    if (rc != NVML_SUCCESS) return (int)rc;
    if (gpu < h->gpu_count) read_dyn(h, fd, gpu, out);
    else rc = NVML_ERROR_INVALID_ARGUMENT;
    munmap(h, maplen);
    close(fd);
    return (int)rc;
}
