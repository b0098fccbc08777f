/* The view of FAKEGPU_NVML_VISIBLE (visible.h), or of the device nodes in a container NVIDIA's
 * plugin prepared. Computed once per nvmlInit from the state
 * (MIG UUIDs included), so a view stays what the container was given while it runs. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "caps.h"
#include "fakegpu.h"
#include "visible.h"

/* MIG devices a view can list one by one: every instance of 32 fully split GPUs. */
#define FG_VIEW_MAX_MIG 256u

static int all = 1;
static uint32_t shown[FGS_MAX_GPUS];   /* view index -> GPU */
static uint32_t n_shown;
static uint8_t whole[FGS_MAX_GPUS];    /* the GPU's own UUID is listed: all its MIG devices */
static struct { uint32_t gpu, gi, ci; } migs[FG_VIEW_MAX_MIG]; /* listed MIG devices, by ids */
static uint32_t n_migs;

/* Is ``uuid`` (length len) listed in the comma-separated ``list``? */
static int listed(const char *list, const char *uuid)
{
    size_t len = strnlen(uuid, FGS_STR);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, uuid, n) == 0) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

/* Records the GPU's listed MIG devices (by GPU instance and compute instance id, which the
 * MIG UUID is made of); 1 when the GPU itself or one of them is listed. */
static int gpu_listed(const char *list, uint32_t gpu)
{
    whole[gpu] = (uint8_t)listed(list, fg_static(gpu)->uuid);
    struct fgs_gpu_dynamic d;
    if (fg_read_dyn(gpu, &d) != NVML_SUCCESS || !d.mig_current) return whole[gpu];
    int any = whole[gpu];
    char buf[FGS_STR];
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        if (!d.gis[g].active) continue;
        for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
            if (!d.gis[g].cis[c].active) continue;
            fg_mig_uuid(gpu, d.gis[g].id, d.gis[g].cis[c].id, buf, sizeof(buf));
            if (!listed(list, buf) || n_migs >= FG_VIEW_MAX_MIG) continue;
            migs[n_migs++] = (typeof(migs[0])){gpu, d.gis[g].id, d.gis[g].cis[c].id};
            any = 1;
        }
    }
    return any;
}

extern char **environ;

/* FAKEGPU_NVML_VISIBLE and every FAKEGPU_NVML_VISIBLE_<suffix>, joined by commas (NULL when
 * none has a value): a CDI spec names each device in a variable of its own, so a container
 * given some of a claim's requests, or several claims, sees the union of what it was given. */
static char *joined_list(void)
{
    size_t prefix = strlen(FG_VISIBLE_ENV), len = 0;
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, FG_VISIBLE_ENV, prefix) == 0 && ((*e)[prefix] == '=' ||
                                                         (*e)[prefix] == '_'))
            len += strlen(*e) + 1;
    if (len == 0) return NULL;
    char *out = calloc(1, len + 1);
    if (out == NULL) return NULL;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, FG_VISIBLE_ENV, prefix) != 0) continue;
        if ((*e)[prefix] != '=' && (*e)[prefix] != '_') continue;
        const char *value = strchr(*e, '=');
        if (value == NULL || value[1] == '\0') continue;
        if (*out) strcat(out, ",");
        strcat(out, value + 1);
    }
    return out;
}

static int node_exists(const char *fmt, unsigned int n)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), fmt, n);
    return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* A GPU is in a container's view when its /dev/nvidia<minor> is there, and of its MIG devices
 * those whose GPU- and compute-instance capability nodes are there: what NVIDIA's container
 * toolkit gives a container, and what the real driver lets it open. */
static int gpu_by_device_nodes(uint32_t gpu)
{
    unsigned int minor = fg_static(gpu)->minor;
    whole[gpu] = 0;
    if (!node_exists("/dev/nvidia%u", minor)) return 0;
    struct fgs_gpu_dynamic d;
    if (fg_read_dyn(gpu, &d) != NVML_SUCCESS || !d.mig_current) {
        whole[gpu] = 1;
        return 1;
    }
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        if (!d.gis[g].active) continue;
        unsigned int gi_minor = fg_caps_gi_minor(minor, d.gis[g].id);
        if (!node_exists("/dev/nvidia-caps/nvidia-cap%u", gi_minor)) continue;
        for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
            if (!d.gis[g].cis[c].active || n_migs >= FG_VIEW_MAX_MIG) continue;
            if (node_exists("/dev/nvidia-caps/nvidia-cap%u", gi_minor + 1 + d.gis[g].cis[c].id))
                migs[n_migs++] = (typeof(migs[0])){gpu, d.gis[g].id, d.gis[g].cis[c].id};
        }
    }
    return 1;
}

void fg_view_open(void)
{
    char *list = joined_list();
    all = list == NULL || *list == '\0' || listed(list, "all");
    n_shown = 0;
    n_migs = 0;
    if (all && list == NULL && fg_store_from_driver_files) {
        all = 0;
        for (uint32_t gpu = 0; gpu < fg_gpu_count && n_shown < FGS_MAX_GPUS; gpu++)
            if (gpu_by_device_nodes(gpu)) shown[n_shown++] = gpu;
        return;
    }
    if (!all)
        for (uint32_t gpu = 0; gpu < fg_gpu_count && n_shown < FGS_MAX_GPUS; gpu++)
            if (gpu_listed(list, gpu)) shown[n_shown++] = gpu;
    free(list);
}

uint32_t fg_view_count(void) { return all ? fg_gpu_count : n_shown; }

int fg_view_gpu(uint32_t index, uint32_t *gpu)
{
    if (index >= fg_view_count()) return 0;
    *gpu = all ? index : shown[index];
    return 1;
}

int fg_view_shows(uint32_t gpu)
{
    if (all) return gpu < fg_gpu_count;
    for (uint32_t i = 0; i < n_shown; i++)
        if (shown[i] == gpu) return 1;
    return 0;
}

int fg_view_shows_mig(uint32_t gpu, uint32_t gi_id, uint32_t ci_id)
{
    if (all) return gpu < fg_gpu_count;
    if (!fg_view_shows(gpu)) return 0;
    if (whole[gpu]) return 1;
    for (uint32_t i = 0; i < n_migs; i++)
        if (migs[i].gpu == gpu && migs[i].gi == gi_id && migs[i].ci == ci_id) return 1;
    return 0;
}

int fg_view_shows_mig_slot(uint32_t gpu, uint32_t gi_slot, uint32_t ci_slot)
{
    if (all) return gpu < fg_gpu_count;
    struct fgs_gpu_dynamic d;
    if (gi_slot >= FGS_MAX_GIS || ci_slot >= FGS_MAX_CIS) return 0;
    if (fg_read_dyn(gpu, &d) != NVML_SUCCESS) return fg_view_shows(gpu); /* its own error */
    const struct fgs_gi *gi = &d.gis[gi_slot];
    return fg_view_shows_mig(gpu, gi->id, gi->cis[ci_slot].id);
}

uint32_t fg_view_index(uint32_t gpu, uint32_t node_index)
{
    if (all) return node_index;
    for (uint32_t i = 0; i < n_shown; i++)
        if (shown[i] == gpu) return i;
    return node_index;
}
