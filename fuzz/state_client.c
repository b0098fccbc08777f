/* The client fuzz/state.py runs against each mutated state file: nvmlInit, enumeration, MIG
 * queries and changes, events, shutdown. Any NVML code is fine; a signal or a hang is a
 * finding. With a second argument N it truncates its own state file to N bytes after the
 * first enumeration (the file vandalised under a live client), with a third it overwrites the
 * file in place with that file's bytes. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvml.h>

static void device_queries(nvmlDevice_t h)
{
    char buf[256];
    unsigned int u, v;
    nvmlMemory_t mem;
    nvmlPciInfo_t pci;
    nvmlDeviceAttributes_t attrs;
    nvmlDeviceGetName(h, buf, sizeof(buf));
    nvmlDeviceGetUUID(h, buf, sizeof(buf));
    nvmlDeviceGetPciInfo_v3(h, &pci);
    nvmlDeviceGetMemoryInfo(h, &mem);
    nvmlDeviceGetMigMode(h, &u, &v);
    nvmlDeviceGetAttributes_v2(h, &attrs);
    nvmlDeviceGetGpuInstanceId(h, &u);
    nvmlDeviceGetComputeInstanceId(h, &u);
}

static void mig_queries(nvmlDevice_t h)
{
    for (unsigned p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
        nvmlGpuInstanceProfileInfo_t info;
        if (nvmlDeviceGetGpuInstanceProfileInfo(h, p, &info) != NVML_SUCCESS) continue;
        nvmlGpuInstancePlacement_t pl[16];
        unsigned int n = 16, count;
        nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, info.id, pl, &n);
        nvmlDeviceGetGpuInstanceRemainingCapacity(h, info.id, &count);
        nvmlGpuInstance_t gis[16];
        n = 16;
        if (nvmlDeviceGetGpuInstances(h, info.id, gis, &n) != NVML_SUCCESS) continue;
        for (unsigned g = 0; g < n && g < 16; g++) {
            nvmlGpuInstanceInfo_t gi;
            nvmlGpuInstanceGetInfo(gis[g], &gi);
            for (unsigned c = 0; c < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; c++) {
                nvmlComputeInstanceProfileInfo_t ci;
                nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gis[g], c, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci);
                nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gis[g], c, &count);
                nvmlComputeInstance_t cis[16];
                unsigned int m = 16;
                if (nvmlGpuInstanceGetComputeInstances(gis[g], c, cis, &m) != NVML_SUCCESS)
                    continue;
                for (unsigned k = 0; k < m && k < 16; k++) {
                    nvmlComputeInstanceInfo_t cinfo;
                    nvmlComputeInstanceGetInfo_v2(cis[k], &cinfo);
                }
            }
        }
    }
    /* one change round trip: create what fits first, then remove it */
    nvmlGpuInstanceProfileInfo_t info;
    if (nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &info) ==
        NVML_SUCCESS) {
        nvmlGpuInstance_t gi;
        if (nvmlDeviceCreateGpuInstance(h, info.id, &gi) == NVML_SUCCESS) {
            nvmlComputeInstance_t ci;
            if (nvmlGpuInstanceCreateComputeInstance(gi, 0, &ci) == NVML_SUCCESS)
                nvmlComputeInstanceDestroy(ci);
            nvmlGpuInstanceDestroy(gi);
        }
    }
}

static void enumerate(unsigned int count)
{
    nvmlDevice_t first = NULL;
    for (unsigned i = 0; i < count && i < 300; i++) {
        nvmlDevice_t h;
        if (nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS) continue;
        if (first == NULL) first = h;
        device_queries(h);
        unsigned int max = 0;
        nvmlDeviceGetMaxMigDeviceCount(h, &max);
        for (unsigned j = 0; j < max && j < 64; j++) {
            nvmlDevice_t mig;
            if (nvmlDeviceGetMigDeviceHandleByIndex(h, j, &mig) == NVML_SUCCESS)
                device_queries(mig);
        }
        mig_queries(h);
        for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
            nvmlEnableState_t st;
            nvmlPciInfo_t pci;
            nvmlDeviceGetNvLinkState(h, l, &st);
            nvmlDeviceGetNvLinkRemotePciInfo_v2(h, l, &pci);
        }
        nvmlGpuFabricInfoV_t fab = {.version = nvmlGpuFabricInfo_v3};
        nvmlDeviceGetGpuFabricInfoV(h, &fab);
        nvmlGpuP2PStatus_t p2p;
        nvmlDeviceGetP2PStatus(first, h, NVML_P2P_CAPS_INDEX_NVLINK, &p2p);
        nvmlGpuTopologyLevel_t level;
        nvmlDeviceGetTopologyCommonAncestor(first, h, &level);
    }
}

int main(int argc, char **argv)
{
    const char *path = getenv("FAKEGPU_NVML_STATE");
    if (nvmlInit_v2() != NVML_SUCCESS) return 0;
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    nvmlEventSet_t set;
    int have_set = nvmlEventSetCreate(&set) == NVML_SUCCESS;
    nvmlDevice_t h0;
    if (have_set && nvmlDeviceGetHandleByIndex_v2(0, &h0) == NVML_SUCCESS)
        nvmlDeviceRegisterEvents(h0, nvmlEventTypeXidCriticalError, set);
    enumerate(count);
    if (argc > 1 && path != NULL) {
        if (truncate(path, atol(argv[1])) != 0) perror("truncate");
        if (argc > 2) { /* write another file's bytes over it in place, as cp does */
            int in = open(argv[2], O_RDONLY), out = open(path, O_WRONLY);
            char buf[65536];
            ssize_t n;
            while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
                if (write(out, buf, (size_t)n) != n) break;
            if (in >= 0) close(in);
            if (out >= 0) close(out);
        }
        enumerate(count);
    }
    if (have_set) {
        nvmlEventData_t data;
        nvmlEventSetWait_v2(set, &data, 0);
        nvmlEventSetFree(set);
    }
    nvmlShutdown();
    return 0;
}
