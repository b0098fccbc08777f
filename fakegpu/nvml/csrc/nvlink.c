/* NVLink, GPU fabric (multi-node NVLink / IMEX cliques), PCIe topology and P2P status. */
#include <stdio.h>
#include <string.h>

#include "fakegpu.h"

/* checks for a per-link query: init, whole-GPU handle, link in range and present. Callers
 * also run FG_CHECK_INIT, so their call stays counted after the helper returns. */
static nvmlReturn_t link_of(nvmlDevice_t device, unsigned int link, const void *out,
                            struct fg_ref *ref, const struct fgs_link **l)
{
    FG_CHECK_INIT();
    FG_TRY(fg_device(device, ref));
    FG_CHECK_PTR(out);
    if (link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    const struct fgs_gpu_static *s = fg_static(ref->gpu);
    if (ref->is_mig || link >= s->link_count || !s->links[link].present)
        return NVML_ERROR_NOT_SUPPORTED;
    *l = &s->links[link];
    return NVML_SUCCESS;
}

static int link_up(const struct fgs_gpu_dynamic *d, unsigned int link)
{
    return !(link < 64 && (d->link_down_mask >> link) & 1u);
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_link *l;
    FG_TRY(link_of(device, link, isActive, &ref, &l));
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref.gpu, &d));
    *isActive = link_up(&d, link) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_link *l;
    FG_TRY(link_of(device, link, version, &ref, &l));
    *version = fg_static(ref.gpu)->nvlink_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                           nvmlNvLinkCapability_t capability, unsigned int *capResult)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_link *l;
    FG_TRY(link_of(device, link, capResult, &ref, &l));
    int grace = fg_static(ref.gpu)->architecture >= NVML_DEVICE_ARCH_BLACKWELL;
    switch (capability) {
    case NVML_NVLINK_CAP_P2P_SUPPORTED:
    case NVML_NVLINK_CAP_P2P_ATOMICS:
    case NVML_NVLINK_CAP_VALID: *capResult = 1; break;
    case NVML_NVLINK_CAP_SYSMEM_ACCESS:
    case NVML_NVLINK_CAP_SYSMEM_ATOMICS: *capResult = grace ? 1 : 0; break;
    case NVML_NVLINK_CAP_SLI_BRIDGE: *capResult = 0; break;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_link *l;
    FG_TRY(link_of(device, link, pci, &ref, &l));
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", l->remote_domain,
             l->remote_bus, l->remote_device, l->remote_function);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", l->remote_domain, l->remote_bus,
             l->remote_device, l->remote_function);
    pci->domain = l->remote_domain;
    pci->bus = l->remote_bus;
    pci->device = l->remote_device;
    pci->pciDeviceId = l->remote_pci_device_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                              nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_link *l;
    FG_TRY(link_of(device, link, pNvLinkDeviceType, &ref, &l));
    *pNvLinkDeviceType = (nvmlIntNvLinkDeviceType_t)l->remote_type;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                             nvmlNvLinkErrorCounter_t counter,
                                             unsigned long long *counterValue)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_link *l;
    FG_TRY(link_of(device, link, counterValue, &ref, &l));
    if ((unsigned)counter >= NVML_NVLINK_ERROR_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    *counterValue = 0;
    return NVML_SUCCESS;
}

/* ---- fabric ---- */

static nvmlReturn_t fabric_of(nvmlDevice_t device, const void *out, struct fg_ref *ref,
                              const struct fgs_gpu_static **s, int *degraded)
{
    FG_CHECK_INIT();
    FG_TRY(fg_device(device, ref));
    FG_CHECK_PTR(out);
    *s = fg_static(ref->gpu);
    if (ref->is_mig || !(*s)->fabric_present) return NVML_ERROR_NOT_SUPPORTED;
    struct fgs_gpu_dynamic d;
    FG_TRY(fg_read_dyn(ref->gpu, &d));
    *degraded = d.fabric_degraded != 0;
    return NVML_SUCCESS;
}

static unsigned health_mask(int degraded)
{
#define FG_H(field, val) (NVML_GPU_FABRIC_HEALTH_MASK##field##val << NVML_GPU_FABRIC_HEALTH_MASK_SHIFT##field)
    unsigned m = FG_H(_ROUTE_RECOVERY, _FALSE) | FG_H(_ROUTE_UNHEALTHY, _FALSE) |
                 FG_H(_ACCESS_TIMEOUT_RECOVERY, _FALSE);
    m |= degraded ? FG_H(_DEGRADED_BW, _TRUE) : FG_H(_DEGRADED_BW, _FALSE);
    return m;
#undef FG_H
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_gpu_static *s;
    int degraded;
    FG_TRY(fabric_of(device, gpuFabricInfo, &ref, &s, &degraded));
    memset(gpuFabricInfo, 0, sizeof(*gpuFabricInfo));
    memcpy(gpuFabricInfo->clusterUuid, s->cluster_uuid, sizeof(gpuFabricInfo->clusterUuid));
    gpuFabricInfo->status = NVML_SUCCESS;
    gpuFabricInfo->cliqueId = s->clique_id;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)s->fabric_state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    FG_CHECK_INIT();
    struct fg_ref ref;
    const struct fgs_gpu_static *s;
    int degraded;
    FG_TRY(fabric_of(device, gpuFabricInfo, &ref, &s, &degraded));
    /* the caller's version picks the layout: pynvml 13.x still passes v2 */
    unsigned version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpuFabricInfo_v3_t v = {0};
    v.version = version;
    memcpy(v.clusterUuid, s->cluster_uuid, sizeof(v.clusterUuid));
    v.status = NVML_SUCCESS;
    v.cliqueId = s->clique_id;
    v.state = (nvmlGpuFabricState_t)s->fabric_state;
    /* no fabric to report (Hopper+ without NVSwitches): health mask and summary stay 0, as a
     * real H200 without a fabric answers (driver 580.159.04) */
    int reported = s->fabric_state != NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
    v.healthMask = reported ? health_mask(degraded) : 0;
    if (version == nvmlGpuFabricInfo_v2) {
        memcpy(gpuFabricInfo, &v, sizeof(nvmlGpuFabricInfo_v2_t));
    } else {
        v.healthSummary = !reported ? NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED
                          : degraded ? NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY
                                     : NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY;
        *gpuFabricInfo = v;
    }
    return NVML_SUCCESS;
}

/* ---- PCIe topology and P2P ---- */

static nvmlReturn_t two_gpus(nvmlDevice_t a, nvmlDevice_t b, const void *out, struct fg_ref *ra,
                             struct fg_ref *rb)
{
    FG_CHECK_INIT();
    FG_TRY(fg_device(a, ra));
    FG_TRY(fg_device(b, rb));
    FG_CHECK_PTR(out);
    if (ra->is_mig || rb->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static nvmlGpuTopologyLevel_t level_between(uint32_t a, uint32_t b)
{
    if (a == b) return NVML_TOPOLOGY_INTERNAL;
    const struct fgs_gpu_static *sa = fg_static(a), *sb = fg_static(b);
    if (sa->pci_domain == sb->pci_domain && (sa->pci_bus >> 4) == (sb->pci_bus >> 4))
        return NVML_TOPOLOGY_SINGLE; /* buses of one PCIe switch */
    return sa->numa_node == sb->numa_node ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo)
{
    FG_CHECK_INIT();
    struct fg_ref a, b;
    FG_TRY(two_gpus(device1, device2, pathInfo, &a, &b));
    *pathInfo = level_between(a.gpu, b.gpu);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                              unsigned int *count, nvmlDevice_t *deviceArray)
{
    FG_DEVICE(device, ref, count);
    if (ref.is_mig) return NVML_ERROR_NOT_SUPPORTED;
    if (level > NVML_TOPOLOGY_SYSTEM) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (uint32_t i = 0; i < fg_gpu_count; i++) {
        if (i == ref.gpu || level_between(ref.gpu, i) > level) continue;
        if (deviceArray != NULL && n < *count) deviceArray[n] = fg_device_handle(i);
        n++;
    }
    if (deviceArray == NULL || *count == 0) {
        *count = n;
        return NVML_SUCCESS;
    }
    if (n > *count) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* NVLink reachability: a direct up link between the two, or both reach an NVSwitch */
static nvmlReturn_t nvlink_connected(uint32_t a, uint32_t b, int *connected)
{
    const struct fgs_gpu_static *sa = fg_static(a), *sb = fg_static(b);
    struct fgs_gpu_dynamic da, db;
    FG_TRY(fg_read_dyn(a, &da));
    FG_TRY(fg_read_dyn(b, &db));
    *connected = 1;
    int a_switch = 0, b_switch = 0;
    for (uint32_t l = 0; l < sa->link_count; l++) {
        const struct fgs_link *k = &sa->links[l];
        if (!k->present || !link_up(&da, l)) continue;
        if (k->remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH) a_switch = 1;
        if (k->remote_type == NVML_NVLINK_DEVICE_TYPE_GPU && k->remote_gpu_index == sb->index &&
            strncmp(k->remote_node, fg_hdr->node, sizeof(k->remote_node)) == 0)
            return NVML_SUCCESS;
    }
    for (uint32_t l = 0; l < sb->link_count; l++)
        if (sb->links[l].present && link_up(&db, l) &&
            sb->links[l].remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH)
            b_switch = 1;
    *connected = a_switch && b_switch;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus)
{
    FG_CHECK_INIT();
    struct fg_ref a, b;
    FG_TRY(two_gpus(device1, device2, p2pStatus, &a, &b));
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_NVLINK: {
        int connected = 0;
        if (a.gpu != b.gpu) FG_TRY(nvlink_connected(a.gpu, b.gpu, &connected));
        *p2pStatus = connected ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        return NVML_SUCCESS;
    }
    case NVML_P2P_CAPS_INDEX_READ:
    case NVML_P2P_CAPS_INDEX_WRITE:
    case NVML_P2P_CAPS_INDEX_ATOMICS:
    case NVML_P2P_CAPS_INDEX_PCI:
        *p2pStatus = NVML_P2P_STATUS_OK;
        return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}
