/* The mapped state file: open + validate, seqlock reads, journaled writes under flock, and
 * what a client does when the file changes under it.
 *
 * nvmlInit copies the whole file privately and validates the copy: static facts (names, PCI,
 * profiles) are read from that copy only, so they cannot change or vanish under a call. The
 * shared mapping is touched only for the dynamic part, always inside a SIGBUS guard
 * (guard.c), and each access first checks that the mapping still holds the file we
 * validated (magic and static checksum). When it does not (truncated, another file copied
 * over it, or retired by a re-render, which clears the old file's magic) the client opens
 * the path again: the same node (identical static part) continues on the new file, anything
 * else answers NVML_ERROR_GPU_IS_LOST until nvmlShutdown + nvmlInit. Old mappings stay mapped
 * until the final nvmlShutdown, so a call still reading one never faults. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
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

const struct fgs_header *fg_hdr = NULL;   /* the private copy (static part) */
unsigned int fg_gpu_count = 0;
static char *private_copy;                 /* the whole file as validated at init */
static struct fg_map *current;             /* the mapping calls use (atomic) */
static struct fg_map *retired;             /* replaced mappings, unmapped at close */
static char *state_path;
static int lost;                           /* the path no longer holds this node */
static uint64_t lost_at_ms;
static uint64_t path_checked_ms;
static uint64_t next_serial = 1;
static pthread_mutex_t recover_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t fg_write_mutex = PTHREAD_MUTEX_INITIALIZER;

#define FG_RETRY_LOST_MS 100u   /* how often a lost client looks at the path again */
#define FG_PATH_CHECK_MS 1000u  /* how often a client checks the path still names its file */

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

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Record addresses use the layout this library was built with (validation made sure the file
 * has it), never sizes read again from the shared header, which anyone may overwrite. */
static struct fgs_gpu *gpu_rec(const struct fgs_header *h, uint32_t gpu)
{
    return (struct fgs_gpu *)((char *)h + sizeof(struct fgs_header) +
                              (size_t)gpu * sizeof(struct fgs_gpu));
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

static int terminated(const char *s, size_t size) { return memchr(s, '\0', size) != NULL; }

/* Static facts the code indexes with or prints: counts in range, strings terminated. */
static int static_ok(const struct fgs_gpu_static *s)
{
    if (s->link_count > FGS_MAX_LINKS || s->profile_count > FGS_MAX_PROFILES) return 0;
    if (!terminated(s->name, sizeof(s->name)) || !terminated(s->uuid, sizeof(s->uuid)) ||
        !terminated(s->serial, sizeof(s->serial)) ||
        !terminated(s->board_part_number, sizeof(s->board_part_number)))
        return 0;
    for (uint32_t l = 0; l < s->link_count; l++)
        if (!terminated(s->links[l].remote_node, sizeof(s->links[l].remote_node))) return 0;
    for (uint32_t p = 0; p < s->profile_count; p++)
        if (s->profiles[p].placement_count > FGS_MAX_PLACEMENTS ||
            !terminated(s->profiles[p].name, sizeof(s->profiles[p].name)))
            return 0;
    return 1;
}

/* Validate a private copy of a file; on failure say why (debug) and return the NVML error. */
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
    if (!terminated(h->driver_version, sizeof(h->driver_version)) ||
        !terminated(h->nvml_version, sizeof(h->nvml_version)) ||
        !terminated(h->topology, sizeof(h->topology)) || !terminated(h->node, sizeof(h->node))) {
        fg_debug("%s: unterminated string in the header", path);
        return NVML_ERROR_UNKNOWN;
    }
    for (uint32_t i = 0; i < h->gpu_count; i++) {
        if (!static_ok(&gpu_rec(h, i)->s)) {
            fg_debug("%s: GPU %u has out-of-range counts or unterminated strings", path, i);
            return NVML_ERROR_UNKNOWN;
        }
    }
    return NVML_SUCCESS;
}

/* ---- the dynamic record: every index the code uses, checked before use ---- */

int fg_dyn_ok(const struct fgs_gpu_static *s, const struct fgs_gpu_dynamic *d)
{
    if (d->mig_current > 1 || d->mig_pending > 1) return 0;
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        const struct fgs_gi *gi = &d->gis[g];
        if (!gi->active) continue;
        if (gi->profile_index >= s->profile_count) return 0;
        if ((uint64_t)gi->start + gi->size > FGS_MAX_PLACEMENTS) return 0;
        uint32_t slices = s->profiles[gi->profile_index].slice_count;
        for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
            const struct fgs_ci *ci = &gi->cis[c];
            if (!ci->active) continue;
            if (ci->nvml_profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
                (uint64_t)ci->start + ci->size > slices)
                return 0;
        }
    }
    return 1;
}

/* ---- mapping a file ---- */

static void copy_body(void *arg)
{
    void **a = arg;
    const struct fgs_header *h = a[1];
    /* the ring's head with one atomic load: the copy of a live file may be torn there */
    *(uint64_t *)a[3] = __atomic_load_n(&h->event_seq, __ATOMIC_ACQUIRE);
    memcpy(a[0], a[1], *(size_t *)a[2]);
}

static void unmap(struct fg_map *m)
{
    if (m->hdr != NULL) munmap(m->hdr, m->len);
    if (m->fd >= 0) close(m->fd);
    free(m);
}

/* Map and validate a state file: read-write where permitted, read-only otherwise (a reader
 * needs no write access; changes then answer NO_PERMISSION). On success *priv holds a
 * private copy of the whole file, validated (caller frees). */
nvmlReturn_t fg_map_open(const char *path, struct fg_map **out, char **priv)
{
    int writable = 1;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
        writable = 0;
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) {
        fg_debug("%s: cannot open state file: %s", path, strerror(errno));
        return errno == ENOENT ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_ERROR_NO_PERMISSION;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size < (off_t)sizeof(struct fgs_header) ||
        st.st_size > (off_t)(sizeof(struct fgs_header) + FGS_MAX_GPUS * sizeof(struct fgs_gpu))) {
        fg_debug("%s: not a fakegpu state file (not a regular file, or too short or long)", path);
        close(fd);
        return NVML_ERROR_UNKNOWN;
    }
    size_t len = (size_t)st.st_size;
    void *m = mmap(NULL, len, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    char *copy = malloc(len);
    struct fg_map *map = calloc(1, sizeof(*map));
    if (m == MAP_FAILED || copy == NULL || map == NULL) {
        fg_debug("%s: mmap failed: %s", path, strerror(errno));
        if (m != MAP_FAILED) munmap(m, len);
        free(copy);
        free(map);
        close(fd);
        return NVML_ERROR_OPERATING_SYSTEM;
    }
    uint64_t first_event = 0;
    void *args[4] = {copy, m, &len, &first_event};
    nvmlReturn_t rc = fg_guarded(m, len, copy_body, args) == 0 ? validate((void *)copy, len, path)
                                                                 : NVML_ERROR_UNKNOWN;
    if (rc != NVML_SUCCESS) {
        munmap(m, len);
        free(copy);
        free(map);
        close(fd);
        return rc;
    }
    const struct fgs_header *h = (const void *)copy;
    *map = (struct fg_map){.hdr = m, .len = len, .fd = fd, .writable = writable,
                           .checksum = h->checksum, .gpu_count = h->gpu_count,
                           .serial = __atomic_fetch_add(&next_serial, 1, __ATOMIC_RELAXED),
                           .first_event = first_event,
                           .dev = st.st_dev, .ino = st.st_ino};
    *out = map;
    *priv = copy;
    return NVML_SUCCESS;
}

void fg_map_close(struct fg_map *m) { unmap(m); }

/* Inside a guard: does the mapping still hold the file we validated? */
static int intact(const struct fg_map *m)
{
    return memcmp(m->hdr->magic, FGS_MAGIC, 8) == 0 &&
           __atomic_load_n(&m->hdr->checksum, __ATOMIC_RELAXED) == m->checksum;
}

static void lock_file(int fd)
{
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
}

/* Finish a published journal entry (caller holds the lock, inside a guard). Idempotent. */
static void replay_journal(const struct fg_map *m)
{
    struct fgs_header *h = m->hdr;
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
    if (gpu < m->gpu_count) memcpy(&gpu_rec(h, gpu)->d, &h->journal_dyn, sizeof(h->journal_dyn));
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

/* ---- reads ---- */

struct read_ctx {
    const struct fg_map *m;
    uint32_t gpu;
    struct fgs_gpu_dynamic *out;
    int status;
    int locked;
};

static void read_body(void *arg)
{
    struct read_ctx *c = arg;
    struct fgs_header *h = c->m->hdr;
    const struct fgs_gpu_dynamic *src = &gpu_rec(h, c->gpu)->d;
    for (int tries = 0;; tries++) {
        uint64_t g1 = __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
        if (!(g1 & 1u)) {
            if (!intact(c->m)) {
                c->status = FG_MAP_CHANGED;
                return;
            }
            memcpy(c->out, src, sizeof(*c->out));
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&h->generation, __ATOMIC_ACQUIRE) == g1) return;
        }
        if (tries > 2000) {
            /* a writer died mid-change: under the lock nothing moves; a read-write client
             * finishes its journal, a read-only one reads what the journal will make it */
            lock_file(c->m->fd);
            c->locked = 1;
            if (!intact(c->m)) {
                c->status = FG_MAP_CHANGED;
                return;
            }
            if (c->m->writable) {
                replay_journal(c->m);
                memcpy(c->out, src, sizeof(*c->out));
            } else if (__atomic_load_n(&h->journal_state, __ATOMIC_ACQUIRE) == FGS_JOURNAL_READY &&
                       h->journal_gpu == c->gpu) {
                memcpy(c->out, &h->journal_dyn, sizeof(*c->out));
            } else {
                memcpy(c->out, src, sizeof(*c->out));
            }
            return;
        }
        if (tries > 50) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

int fg_map_read_dyn(const struct fg_map *m, uint32_t gpu, struct fgs_gpu_dynamic *out)
{
    if (gpu >= m->gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    struct read_ctx c = {m, gpu, out, NVML_SUCCESS, 0};
    int faulted = fg_guarded(m->hdr, m->len, read_body, &c);
    if (c.locked) flock(m->fd, LOCK_UN);
    return faulted ? FG_MAP_CHANGED : c.status;
}

/* ---- writes ---- */

struct mutate_ctx {
    const struct fg_map *m;
    const struct fgs_gpu_static *s;
    uint32_t gpu;
    fg_mutator fn;
    void *arg;
    nvmlReturn_t rc;
    int status;
    int locked;
};

static void mutate_body(void *arg)
{
    struct mutate_ctx *c = arg;
    struct fgs_header *h = c->m->hdr;
    lock_file(c->m->fd);
    c->locked = 1;
    if (!intact(c->m)) {
        c->status = FG_MAP_CHANGED;
        return;
    }
    replay_journal(c->m);
    struct fgs_gpu_dynamic d;
    memcpy(&d, &gpu_rec(h, c->gpu)->d, sizeof(d));
    struct fgs_event ev;
    memset(&ev, 0, sizeof(ev));
    int has_event = 0;
    /* the mutators index with what they find: a corrupt record is refused, not used */
    c->rc = fg_dyn_ok(c->s, &d) ? c->fn(c->gpu, &d, &ev, &has_event, c->arg) : NVML_ERROR_UNKNOWN;
    if (c->rc != NVML_SUCCESS) return;
    /* write ahead: the complete change, then publish it, then apply it */
    h->journal_gpu = c->gpu;
    h->journal_dyn = d;
    h->journal_event = ev;
    h->journal_has_event = has_event ? 1u : 0u;
    h->journal_event_seq = (uint32_t)__atomic_load_n(&h->event_seq, __ATOMIC_ACQUIRE);
    __atomic_store_n(&h->journal_state, FGS_JOURNAL_READY, __ATOMIC_RELEASE);
    replay_journal(c->m);
}

int fg_map_mutate(const struct fg_map *m, const struct fgs_gpu_static *s, uint32_t gpu,
                  fg_mutator fn, void *arg)
{
    if (gpu >= m->gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!m->writable) return NVML_ERROR_NO_PERMISSION; /* a read-only client changes nothing */
    pthread_mutex_lock(&fg_write_mutex);
    struct mutate_ctx c = {m, s, gpu, fn, arg, NVML_SUCCESS, NVML_SUCCESS, 0};
    int faulted = fg_guarded(m->hdr, m->len, mutate_body, &c);
    if (c.locked) flock(m->fd, LOCK_UN);
    pthread_mutex_unlock(&fg_write_mutex);
    if (faulted || c.status == FG_MAP_CHANGED) return FG_MAP_CHANGED;
    return (int)c.rc;
}

/* ---- events ---- */

struct event_ctx {
    const struct fg_map *m;
    struct fg_events *out;
    int status;
};

static void events_body(void *arg)
{
    struct event_ctx *c = arg;
    struct fgs_header *h = c->m->hdr;
    if (!intact(c->m)) {
        c->status = FG_MAP_CHANGED;
        return;
    }
    uint64_t head = __atomic_load_n(&h->event_seq, __ATOMIC_ACQUIRE);
    if (c->out->ring != NULL) memcpy(c->out->ring, h->events, sizeof(h->events));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    uint64_t later = __atomic_load_n(&h->event_seq, __ATOMIC_ACQUIRE);
    c->out->head = head;
    /* slots of events up to `later` - RING may have been rewritten while we copied */
    c->out->oldest = later >= FGS_EVENT_RING ? later - FGS_EVENT_RING + 1 : 0;
}

/* ---- the current mapping of an initialised client ---- */

/* Where the node's state is when no variable names it, among the driver's GSP firmware files
 * (lib/firmware/nvidia/<version>/gsp*.bin under the driver root), where the NVIDIA host
 * (node/nvidiahost.py) links it: the fake GPUs' "firmware" carries what the fake driver knows.
 * Two places: at the root (a container NVIDIA's plugin prepared: its container toolkit mounts
 * those files into every GPU container, and *in_container says so: such a process is shown
 * the GPUs whose device nodes it has), and beside this library in its driver root (a
 * third-party plugin that loads libnvidia-ml from the driver root it was pointed at, or runs
 * its static nvidia-smi, wherever that root is mounted: usr/lib64/ and usr/bin/ are two
 * levels below it; it sees every GPU, as a plugin given the host's devices does). */
static const char *first_match(const char *pattern, char *out, size_t n)
{
    glob_t g;
    const char *found = NULL;
    if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0 &&
        snprintf(out, n, "%s", g.gl_pathv[0]) < (int)n)
        found = out;
    globfree(&g);
    return found;
}

static const char *driver_files_state(char *out, size_t n, int *in_container)
{
    const char *found = first_match(FG_FIRMWARE_STATE_GLOB, out, n);
    *in_container = found != NULL;
    if (found != NULL) return found;
    /* This code's file: the library, or the program it is linked into (the static
     * nvidia-smi in usr/bin/, where dladdr knows no file name). */
    Dl_info self;
    char exe[PATH_MAX];
    const char *file = NULL;
    if (dladdr((void *)driver_files_state, &self) != 0 && self.dli_fname != NULL &&
        strchr(self.dli_fname, '/') != NULL) {
        file = self.dli_fname;
    } else {
        ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (len <= 0) return NULL;
        exe[len] = '\0';
        file = exe;
    }
    const char *slash = strrchr(file, '/');
    char pattern[PATH_MAX];
    if (snprintf(pattern, sizeof(pattern), "%.*s/../..%s", (int)(slash - file), file,
                 FG_FIRMWARE_STATE_GLOB) >= (int)sizeof(pattern))
        return NULL;
    return first_match(pattern, out, n);
}

int fg_store_from_driver_files;

nvmlReturn_t fg_store_open(void)
{
    char found[PATH_MAX];
    const char *path = getenv("FAKEGPU_NVML_STATE");
    fg_store_from_driver_files = 0;
    if (path == NULL || path[0] == '\0') {
        path = driver_files_state(found, sizeof(found), &fg_store_from_driver_files);
        if (path == NULL) {
            fg_debug("FAKEGPU_NVML_STATE is not set and no %s, at the root or in this "
                     "library's driver root: no fake GPUs on this node", FG_FIRMWARE_STATE_GLOB);
            return NVML_ERROR_DRIVER_NOT_LOADED;
        }
    }
    struct fg_map *m;
    char *copy;
    nvmlReturn_t rc = fg_map_open(path, &m, &copy);
    if (rc != NVML_SUCCESS) return rc;
    state_path = strdup(path);
    if (state_path == NULL) {
        unmap(m);
        free(copy);
        return NVML_ERROR_MEMORY;
    }
    private_copy = copy;
    fg_hdr = (const struct fgs_header *)copy;
    fg_gpu_count = fg_hdr->gpu_count;
    lost = 0;
    path_checked_ms = now_ms();
    __atomic_store_n(&current, m, __ATOMIC_RELEASE);
    return NVML_SUCCESS;
}

/* Only when no call is in flight (init.c drains them first). */
void fg_store_close(void)
{
    struct fg_map *m = current;
    current = NULL;
    if (m != NULL) unmap(m);
    while (retired != NULL) {
        struct fg_map *next = retired->next;
        unmap(retired);
        retired = next;
    }
    free(private_copy);
    free(state_path);
    private_copy = NULL;
    state_path = NULL;
    fg_hdr = NULL;
    fg_gpu_count = 0;
}

int fg_store_is_open(void) { return __atomic_load_n(&current, __ATOMIC_ACQUIRE) != NULL; }

const struct fgs_gpu_static *fg_static(uint32_t gpu) { return &gpu_rec(fg_hdr, gpu)->s; }

/* Does the path hold the same node (identical static bytes) as our private copy? */
static int same_node(const char *copy)
{
    const struct fgs_header *h = (const void *)copy;
    if (memcmp(copy, private_copy, FGS_HEADER_STATIC_END) != 0) return 0;
    for (uint32_t i = 0; i < h->gpu_count; i++)
        if (memcmp(&gpu_rec(h, i)->s, fg_static(i), sizeof(struct fgs_gpu_static)) != 0) return 0;
    return 1;
}

/* The mapping `bad` no longer holds our file: open the path again. */
static nvmlReturn_t recover(struct fg_map *bad)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&recover_mutex);
    if (__atomic_load_n(&current, __ATOMIC_ACQUIRE) != bad) goto out; /* someone re-mapped */
    uint64_t now = now_ms();
    if (__atomic_load_n(&lost, __ATOMIC_ACQUIRE) && now - lost_at_ms < FG_RETRY_LOST_MS) {
        rc = NVML_ERROR_GPU_IS_LOST;
        goto out;
    }
    struct fg_map *m;
    char *copy;
    if (fg_map_open(state_path, &m, &copy) == NVML_SUCCESS) {
        int same = same_node(copy);
        free(copy);
        if (same) {
            fg_debug("%s: the state file was replaced by one for the same node: using it",
                     state_path);
            bad->next = retired;
            retired = bad;
            __atomic_store_n(&current, m, __ATOMIC_RELEASE);
            __atomic_store_n(&lost, 0, __ATOMIC_RELEASE);
            goto out;
        }
        unmap(m);
    }
    if (!lost) fg_debug("%s: the state file no longer describes this node: GPUs lost", state_path);
    lost_at_ms = now;
    __atomic_store_n(&lost, 1, __ATOMIC_RELEASE);
    rc = NVML_ERROR_GPU_IS_LOST;
out:
    pthread_mutex_unlock(&recover_mutex);
    return rc;
}

/* Once a second: does the path still name the file we map (a `mv` over it does not touch
 * the old file, so only the path tells)? */
static int path_moved(const struct fg_map *m)
{
    uint64_t now = now_ms();
    uint64_t last = __atomic_load_n(&path_checked_ms, __ATOMIC_RELAXED);
    if (now - last < FG_PATH_CHECK_MS) return 0;
    __atomic_store_n(&path_checked_ms, now, __ATOMIC_RELAXED);
    struct stat st;
    return stat(state_path, &st) != 0 || st.st_dev != m->dev || st.st_ino != m->ino;
}

/* Run op on the current mapping; if it no longer holds our file, recover and try once more. */
static nvmlReturn_t with_map(int (*op)(const struct fg_map *, void *), void *arg)
{
    for (int attempt = 0;; attempt++) {
        struct fg_map *m = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
        if (m == NULL) return NVML_ERROR_UNINITIALIZED;
        int status = FG_MAP_CHANGED;
        if (!__atomic_load_n(&lost, __ATOMIC_ACQUIRE) && !path_moved(m)) status = op(m, arg);
        if (status != FG_MAP_CHANGED) return (nvmlReturn_t)status;
        if (attempt > 0 || recover(m) != NVML_SUCCESS) return NVML_ERROR_GPU_IS_LOST;
    }
}

struct dyn_arg {
    uint32_t gpu;
    struct fgs_gpu_dynamic *out;
};

static int read_op(const struct fg_map *m, void *arg)
{
    struct dyn_arg *a = arg;
    return fg_map_read_dyn(m, a->gpu, a->out);
}

nvmlReturn_t fg_read_dyn(uint32_t gpu, struct fgs_gpu_dynamic *out)
{
    struct dyn_arg a = {gpu, out};
    FG_TRY(with_map(read_op, &a));
    if (!fg_dyn_ok(fg_static(gpu), out)) {
        fg_debug("%s: GPU %u: corrupt dynamic record (an index out of range)", state_path, gpu);
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

struct mutate_arg {
    uint32_t gpu;
    fg_mutator fn;
    void *arg;
};

static int mutate_op(const struct fg_map *m, void *arg)
{
    struct mutate_arg *a = arg;
    return fg_map_mutate(m, fg_static(a->gpu), a->gpu, a->fn, a->arg);
}

nvmlReturn_t fg_mutate(uint32_t gpu, fg_mutator fn, void *arg)
{
    struct mutate_arg a = {gpu, fn, arg};
    return with_map(mutate_op, &a);
}

static int events_op(const struct fg_map *m, void *arg)
{
    struct event_ctx c = {m, arg, NVML_SUCCESS};
    if (fg_guarded(m->hdr, m->len, events_body, &c) != 0) return FG_MAP_CHANGED;
    c.out->serial = m->serial;
    c.out->first = m->first_event;
    return c.status;
}

nvmlReturn_t fg_events(struct fg_events *out) { return with_map(events_op, out); }
