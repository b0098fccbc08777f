/* The view of FAKEGPU_NVML_VISIBLE (visible.h). Computed once per nvmlInit from the state
 * (MIG UUIDs included), so a view stays what the container was given while it runs. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fakegpu.h"
#include "visible.h"

static int all = 1;
static uint32_t shown[FGS_MAX_GPUS];   /* view index -> GPU */
static uint32_t n_shown;

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

static int gpu_listed(const char *list, uint32_t gpu)
{
    if (listed(list, fg_static(gpu)->uuid)) return 1;
    struct fgs_gpu_dynamic d;
    if (fg_read_dyn(gpu, &d) != NVML_SUCCESS || !d.mig_current) return 0;
    char buf[FGS_STR];
    for (uint32_t g = 0; g < FGS_MAX_GIS; g++) {
        if (!d.gis[g].active) continue;
        for (uint32_t c = 0; c < FGS_MAX_CIS; c++) {
            if (!d.gis[g].cis[c].active) continue;
            fg_mig_uuid(gpu, d.gis[g].id, d.gis[g].cis[c].id, buf, sizeof(buf));
            if (listed(list, buf)) return 1;
        }
    }
    return 0;
}

void fg_view_open(void)
{
    const char *list = getenv(FG_VISIBLE_ENV);
    all = list == NULL || *list == '\0' || strcmp(list, "all") == 0;
    n_shown = 0;
    if (all) return;
    for (uint32_t gpu = 0; gpu < fg_gpu_count && n_shown < FGS_MAX_GPUS; gpu++)
        if (gpu_listed(list, gpu)) shown[n_shown++] = gpu;
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

uint32_t fg_view_index(uint32_t gpu, uint32_t node_index)
{
    if (all) return node_index;
    for (uint32_t i = 0; i < n_shown; i++)
        if (shown[i] == gpu) return i;
    return node_index;
}
