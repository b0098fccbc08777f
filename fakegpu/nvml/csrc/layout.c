/* Static checks of the struct layouts we fill against the header we compile with, and a
 * description of the state file layout so fakegpu/nvml/state.py can check its mirror. */
#include <assert.h>
#include <stdio.h>

#include "fakegpu.h"

static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
static_assert(offsetof(nvmlPciInfo_t, busIdLegacy) == 0, "busIdLegacy first");
static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t");
static_assert(sizeof(nvmlMemory_v2_t) == 40 && nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2_t");
static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t");
static_assert(sizeof(nvmlGpuFabricInfo_v2_t) == 36 && nvmlGpuFabricInfo_v2 == 0x02000024, "v2");
static_assert(sizeof(nvmlGpuFabricInfo_v3_t) == 40 && nvmlGpuFabricInfo_v3 == 0x03000028, "v3");
static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == 152 &&
              nvmlGpuInstanceProfileInfo_v2 == 0x02000098, "gi profile v2");
static_assert(NVML_NVLINK_MAX_LINKS >= FGS_MAX_LINKS, "links");
static_assert(sizeof(struct fgs_gpu_dynamic) % 8 == 0, "dynamic record alignment");
static_assert(sizeof(struct fgs_header) % 8 == 0, "header alignment");

#define FIELDS(X)                                                                            \
    X(fgs_header, magic) X(fgs_header, layout_version) X(fgs_header, gpu_count)              \
    X(fgs_header, file_size) X(fgs_header, checksum) X(fgs_header, driver_version)           \
    X(fgs_header, node) X(fgs_header, generation) X(fgs_header, event_seq)                   \
    X(fgs_header, events) X(fgs_header, journal_state) X(fgs_header, journal_dyn)            \
    X(fgs_gpu, s) X(fgs_gpu, d) X(fgs_gpu_static, name) X(fgs_gpu_static, uuid)              \
    X(fgs_gpu_static, memory_total) X(fgs_gpu_static, pci_domain) X(fgs_gpu_static, links)   \
    X(fgs_gpu_static, fabric_present) X(fgs_gpu_static, cluster_uuid)                        \
    X(fgs_gpu_static, clique_id) X(fgs_gpu_static, mig_capable) X(fgs_gpu_static, profiles)  \
    X(fgs_gpu_static, addressing_mode) X(fgs_gpu_static, idle_sm_clock_mhz)                  \
    X(fgs_link, remote_node) X(fgs_profile, memory_mib) X(fgs_profile, placements)           \
    X(fgs_gpu_dynamic, compute_mode) X(fgs_gpu_dynamic, timeslice)                           \
    X(fgs_gpu_dynamic, link_down_mask) X(fgs_gpu_dynamic, gis) X(fgs_gi, cis)                \
    X(fgs_event, event_type)

#define SIZES(X)                                                                             \
    X(fgs_header) X(fgs_gpu) X(fgs_gpu_static) X(fgs_gpu_dynamic) X(fgs_link) X(fgs_profile) \
    X(fgs_gi) X(fgs_ci) X(fgs_event)

/* "struct=size;struct.field=offset;..." */
FG_EXPORT const char *fakegpu_state_layout(void)
{
    static char buf[4096];
    static int done = 0;
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        size_t n = 0;
#define SZ(s) n += (size_t)snprintf(buf + n, sizeof(buf) - n, #s "=%zu;", sizeof(struct s));
#define OFF(s, f) n += (size_t)snprintf(buf + n, sizeof(buf) - n, #s "." #f "=%zu;", offsetof(struct s, f));
        SIZES(SZ)
        FIELDS(OFF)
#undef SZ
#undef OFF
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    }
    return buf;
}
