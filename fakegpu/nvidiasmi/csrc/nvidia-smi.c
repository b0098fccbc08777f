/* A small nvidia-smi on NVML: what a pod's scripts ask of the real one, answered through
 * whatever libnvidia-ml.so.1 the loader finds (fakegpu's inside a prepared container), so it
 * shows exactly the GPUs that library shows. Not NVIDIA's code: the output follows the shapes
 * nvidia-smi prints, written here from its documented formats.
 *
 *   nvidia-smi -L                          GPUs and their MIG devices, with UUIDs
 *   nvidia-smi [-i I] -q                   the essentials of the full query
 *   nvidia-smi [-i I] --query-gpu=F,... --format=csv[,noheader][,nounits]
 *   nvidia-smi topo -m                     the NVLink matrix (NV<links> / SYS)
 *   nvidia-smi mig -lgi | -lci             GPU and compute instances
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvml.h>

#define MAX_GPUS 64

static unsigned int count;
static nvmlDevice_t gpus[MAX_GPUS];

static int fail(const char *what, nvmlReturn_t rc)
{
    fprintf(stderr, "%s: %s\n", what, nvmlErrorString(rc));
    return rc == NVML_ERROR_LIBRARY_NOT_FOUND || rc == NVML_ERROR_DRIVER_NOT_LOADED ? 9 : 15;
}

static int open_nvml(void)
{
    nvmlReturn_t rc = nvmlInit();
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                        "driver. (%s)\n", nvmlErrorString(rc));
        return 9;
    }
    if ((rc = nvmlDeviceGetCount(&count)) != NVML_SUCCESS) return fail("device count", rc);
    if (count > MAX_GPUS) count = MAX_GPUS;
    for (unsigned int i = 0; i < count; i++)
        if ((rc = nvmlDeviceGetHandleByIndex(i, &gpus[i])) != NVML_SUCCESS)
            return fail("device handle", rc);
    return 0;
}

static const char *text_or(nvmlReturn_t rc, const char *value)
{
    return rc == NVML_SUCCESS ? value : "N/A";
}

/* The profile part of a MIG device's name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb". */
static const char *mig_profile(const char *name)
{
    const char *p = strstr(name, "MIG ");
    return p ? p + 4 : name;
}

static int mig_enabled(nvmlDevice_t dev)
{
    unsigned int current = 0, pending = 0;
    return nvmlDeviceGetMigMode(dev, &current, &pending) == NVML_SUCCESS &&
           current == NVML_DEVICE_MIG_ENABLE;
}

static int list_gpus(void)
{
    for (unsigned int i = 0; i < count; i++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
        nvmlDeviceGetName(gpus[i], name, sizeof(name));
        nvmlDeviceGetUUID(gpus[i], uuid, sizeof(uuid));
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        if (!mig_enabled(gpus[i])) continue;
        unsigned int max = 0;
        nvmlDeviceGetMaxMigDeviceCount(gpus[i], &max);
        for (unsigned int j = 0, shown = 0; j < max; j++) {
            nvmlDevice_t mig;
            if (nvmlDeviceGetMigDeviceHandleByIndex(gpus[i], j, &mig) != NVML_SUCCESS) continue;
            char mname[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
            char muuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
            nvmlDeviceGetName(mig, mname, sizeof(mname));
            nvmlDeviceGetUUID(mig, muuid, sizeof(muuid));
            printf("  MIG %-12s Device %2u: (UUID: %s)\n", mig_profile(mname), shown++, muuid);
        }
    }
    return 0;
}

/* --- --query-gpu --------------------------------------------------------------------------- */

struct opts { int header, units; };

/* One field of one GPU into out; returns 0 for an unknown field. */
static int field(nvmlDevice_t dev, unsigned int index, const char *f, struct opts o, char *out,
                 size_t n)
{
    char buf[256] = "";
    nvmlReturn_t rc;
    nvmlMemory_t mem;
    const char *mib = o.units ? " MiB" : "";
    if (!strcmp(f, "index")) {
        snprintf(out, n, "%u", index);
    } else if (!strcmp(f, "name") || !strcmp(f, "gpu_name")) {
        rc = nvmlDeviceGetName(dev, buf, sizeof(buf));
        snprintf(out, n, "%s", text_or(rc, buf));
    } else if (!strcmp(f, "uuid") || !strcmp(f, "gpu_uuid")) {
        rc = nvmlDeviceGetUUID(dev, buf, sizeof(buf));
        snprintf(out, n, "%s", text_or(rc, buf));
    } else if (!strcmp(f, "serial")) {
        rc = nvmlDeviceGetSerial(dev, buf, sizeof(buf));
        snprintf(out, n, "%s", text_or(rc, buf));
    } else if (!strcmp(f, "pci.bus_id") || !strcmp(f, "gpu_bus_id")) {
        nvmlPciInfo_t pci;
        rc = nvmlDeviceGetPciInfo(dev, &pci);
        snprintf(out, n, "%s", text_or(rc, pci.busId));
    } else if (!strcmp(f, "driver_version")) {
        rc = nvmlSystemGetDriverVersion(buf, sizeof(buf));
        snprintf(out, n, "%s", text_or(rc, buf));
    } else if (!strcmp(f, "memory.total") || !strcmp(f, "memory.used") ||
               !strcmp(f, "memory.free")) {
        if ((rc = nvmlDeviceGetMemoryInfo(dev, &mem)) != NVML_SUCCESS) {
            snprintf(out, n, "[N/A]");
        } else {
            unsigned long long v = !strcmp(f, "memory.total") ? mem.total
                                   : !strcmp(f, "memory.used") ? mem.used : mem.free;
            snprintf(out, n, "%llu%s", v >> 20, mib);
        }
    } else if (!strcmp(f, "mig.mode.current")) {
        snprintf(out, n, "%s", mig_enabled(dev) ? "Enabled" : "Disabled");
    } else if (!strcmp(f, "compute_cap")) {
        int major = 0, minor = 0;
        rc = nvmlDeviceGetCudaComputeCapability(dev, &major, &minor);
        if (rc == NVML_SUCCESS) snprintf(out, n, "%d.%d", major, minor);
        else snprintf(out, n, "[N/A]");
    } else if (!strcmp(f, "minor_number")) {
        unsigned int m = 0;
        rc = nvmlDeviceGetMinorNumber(dev, &m);
        if (rc == NVML_SUCCESS) snprintf(out, n, "%u", m);
        else snprintf(out, n, "[N/A]");
    } else if (!strcmp(f, "count")) {
        snprintf(out, n, "%u", count);
    } else {
        return 0;
    }
    return 1;
}

static int query_gpu(const char *fields, const char *format, int only)
{
    struct opts o = {1, 1};
    if (format == NULL || strncmp(format, "csv", 3) != 0) {
        fprintf(stderr, "--query-gpu needs --format=csv[,noheader][,nounits]\n");
        return 2;
    }
    if (strstr(format, "noheader")) o.header = 0;
    if (strstr(format, "nounits")) o.units = 0;
    char list[1024];
    snprintf(list, sizeof(list), "%s", fields);
    char *names[64];
    int n = 0;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t && n < 64;
         t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        names[n++] = t;
    }
    char out[256];
    for (int k = 0; k < n; k++) {  /* every field known before anything is printed */
        if (count == 0) break;
        if (!field(gpus[0], 0, names[k], o, out, sizeof(out))) {
            fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", names[k]);
            return 2;
        }
    }
    if (o.header) {
        for (int k = 0; k < n; k++) {
            int memory = !strncmp(names[k], "memory.", 7);
            printf("%s%s%s", k ? ", " : "", names[k], memory && o.units ? " [MiB]" : "");
        }
        printf("\n");
    }
    for (unsigned int i = 0; i < count; i++) {
        if (only >= 0 && (unsigned int)only != i) continue;
        for (int k = 0; k < n; k++) {
            field(gpus[i], i, names[k], o, out, sizeof(out));
            printf("%s%s", k ? ", " : "", out);
        }
        printf("\n");
    }
    return 0;
}

/* --- -q ------------------------------------------------------------------------------------- */

static int query_all(int only)
{
    char version[96] = "N/A";
    int cuda = 0;
    nvmlSystemGetDriverVersion(version, sizeof(version));
    printf("\n==============NVSMI LOG==============\n\n");
    printf("%-38s: %s\n", "Driver Version", version);
    if (nvmlSystemGetCudaDriverVersion(&cuda) == NVML_SUCCESS)
        printf("%-38s: %d.%d\n", "CUDA Version", cuda / 1000, cuda % 1000 / 10);
    printf("\n%-38s: %u\n", "Attached GPUs", count);
    for (unsigned int i = 0; i < count; i++) {
        if (only >= 0 && (unsigned int)only != i) continue;
        nvmlDevice_t d = gpus[i];
        char name[96] = "", uuid[96] = "", serial[96] = "N/A";
        nvmlPciInfo_t pci;
        nvmlMemory_t mem;
        unsigned int minor = 0;
        memset(&pci, 0, sizeof(pci));
        nvmlDeviceGetName(d, name, sizeof(name));
        nvmlDeviceGetUUID(d, uuid, sizeof(uuid));
        nvmlDeviceGetSerial(d, serial, sizeof(serial));
        nvmlDeviceGetPciInfo(d, &pci);
        nvmlDeviceGetMinorNumber(d, &minor);
        printf("GPU %s\n", pci.busId);
        printf("    %-34s: %s\n", "Product Name", name);
        printf("    %-34s: %s\n", "MIG Mode Current", mig_enabled(d) ? "Enabled" : "Disabled");
        printf("    %-34s: %s\n", "Serial Number", serial);
        printf("    %-34s: %s\n", "GPU UUID", uuid);
        printf("    %-34s: %u\n", "Minor Number", minor);
        if (nvmlDeviceGetMemoryInfo(d, &mem) == NVML_SUCCESS) {
            printf("    FB Memory Usage\n");
            printf("        %-30s: %llu MiB\n", "Total", mem.total >> 20);
            printf("        %-30s: %llu MiB\n", "Used", mem.used >> 20);
            printf("        %-30s: %llu MiB\n", "Free", mem.free >> 20);
        }
    }
    return 0;
}

/* --- topo -m -------------------------------------------------------------------------------- */

/* Active links of a to b (b NULL: to any NVSwitch). */
static unsigned int links_to(nvmlDevice_t a, nvmlDevice_t b)
{
    nvmlPciInfo_t peer;
    unsigned int n = 0;
    memset(&peer, 0, sizeof(peer));
    if (b != NULL && nvmlDeviceGetPciInfo(b, &peer) != NVML_SUCCESS) return 0;
    for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
        nvmlEnableState_t on;
        nvmlIntNvLinkDeviceType_t kind;
        nvmlPciInfo_t remote;
        if (nvmlDeviceGetNvLinkState(a, link, &on) != NVML_SUCCESS || on != NVML_FEATURE_ENABLED)
            continue;
        if (nvmlDeviceGetNvLinkRemoteDeviceType(a, link, &kind) != NVML_SUCCESS) continue;
        if (b == NULL) {
            n += kind == NVML_NVLINK_DEVICE_TYPE_SWITCH;
            continue;
        }
        memset(&remote, 0, sizeof(remote));
        if (kind == NVML_NVLINK_DEVICE_TYPE_GPU &&
            nvmlDeviceGetNvLinkRemotePciInfo(a, link, &remote) == NVML_SUCCESS &&
            !strcasecmp(remote.busId, peer.busId))
            n++;
    }
    return n;
}

/* One cell of the matrix: NV<links> (direct, or through NVSwitches when NVML says P2P over
 * NVLink works), else the PCIe level of the common ancestor. */
static void cell(nvmlDevice_t a, nvmlDevice_t b, char *out, size_t n)
{
    unsigned int direct = links_to(a, b);
    nvmlGpuP2PStatus_t p2p;
    nvmlGpuTopologyLevel_t level;
    if (direct) {
        snprintf(out, n, "NV%u", direct);
    } else if (nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &p2p) == NVML_SUCCESS &&
               p2p == NVML_P2P_STATUS_OK) {
        unsigned int up_a = links_to(a, NULL), up_b = links_to(b, NULL);
        snprintf(out, n, "NV%u", up_a < up_b ? up_a : up_b);
    } else if (nvmlDeviceGetTopologyCommonAncestor(a, b, &level) == NVML_SUCCESS) {
        snprintf(out, n, "%s", level <= NVML_TOPOLOGY_SINGLE ? "PIX"
                              : level <= NVML_TOPOLOGY_MULTIPLE ? "PXB"
                              : level <= NVML_TOPOLOGY_HOSTBRIDGE ? "PHB"
                              : level <= NVML_TOPOLOGY_NODE ? "NODE" : "SYS");
    } else {
        snprintf(out, n, "SYS");
    }
}

static int topo(void)
{
    printf("\t");
    for (unsigned int j = 0; j < count; j++) printf("GPU%u\t", j);
    printf("\n");
    for (unsigned int i = 0; i < count; i++) {
        printf("GPU%u\t", i);
        for (unsigned int j = 0; j < count; j++) {
            if (i == j) { printf(" X \t"); continue; }
            char c[16];
            cell(gpus[i], gpus[j], c, sizeof(c));
            printf("%s\t", c);
        }
        printf("\n");
    }
    printf("\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP "
           "interconnect between NUMA nodes\n  NODE = Connection traversing PCIe as well as the "
           "interconnect between PCIe Host Bridges within a NUMA node\n  PHB  = Connection "
           "traversing PCIe as well as a PCIe Host Bridge\n  PXB  = Connection traversing "
           "multiple PCIe bridges\n  PIX  = Connection traversing at most a single PCIe bridge\n"
           "  NV#  = Connection traversing a bonded set of # NVLinks\n");
    return 0;
}

/* --- mig -lgi / -lci ------------------------------------------------------------------------ */

static int mig_list(int compute)
{
    if (compute) {
        printf("+--------------------------------------------------------------------+\n"
               "| Compute instances:                                                 |\n"
               "| GPU     GPU       Name             Profile   Instance   Placement    |\n"
               "|       Instance                       ID        ID       Start:Size   |\n"
               "|         ID                                                         |\n"
               "|====================================================================|\n");
    } else {
        printf("+---------------------------------------------------------+\n"
               "| GPU instances:                                          |\n"
               "| GPU   Name               Profile  Instance   Placement  |\n"
               "|                            ID       ID       Start:Size |\n"
               "|=========================================================|\n");
    }
    int any = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (!mig_enabled(gpus[i])) continue;
        for (unsigned int p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
            nvmlGpuInstanceProfileInfo_t info;
            memset(&info, 0, sizeof(info));
            if (nvmlDeviceGetGpuInstanceProfileInfo(gpus[i], p, &info) != NVML_SUCCESS) continue;
            nvmlGpuInstance_t gis[16];
            unsigned int n = 16;  /* in: room in gis (as fakegpu's NVML reads it), out: found */
            if (nvmlDeviceGetGpuInstances(gpus[i], info.id, gis, &n) != NVML_SUCCESS) continue;
            for (unsigned int g = 0; g < n && g < 16; g++) {
                nvmlGpuInstanceInfo_t gi;
                memset(&gi, 0, sizeof(gi));
                if (nvmlGpuInstanceGetInfo(gis[g], &gi) != NVML_SUCCESS) continue;
                char gname[64];
                snprintf(gname, sizeof(gname), "MIG %ug.%lugb", info.sliceCount,
                         (unsigned long)((info.memorySizeMB + 1023) / 1024));
                if (!compute) {
                    printf("|  %-3u %-18s %5u %8u %9u:%-3u  |\n", i, gname, info.id, gi.id,
                           gi.placement.start, gi.placement.size);
                    any = 1;
                    continue;
                }
                for (unsigned int cp = 0; cp < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; cp++) {
                    nvmlComputeInstanceProfileInfo_t cinfo;
                    memset(&cinfo, 0, sizeof(cinfo));
                    if (nvmlGpuInstanceGetComputeInstanceProfileInfo(
                            gis[g], cp, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cinfo)
                        != NVML_SUCCESS) continue;
                    nvmlComputeInstance_t cis[8];
                    unsigned int m = 8;
                    if (nvmlGpuInstanceGetComputeInstances(gis[g], cinfo.id, cis, &m)
                        != NVML_SUCCESS) continue;
                    for (unsigned int c = 0; c < m && c < 8; c++) {
                        nvmlComputeInstanceInfo_t ci;
                        memset(&ci, 0, sizeof(ci));
                        if (nvmlComputeInstanceGetInfo(cis[c], &ci) != NVML_SUCCESS) continue;
                        printf("|  %-3u %5u     %-18s %5u %9u %7u:%-3u     |\n", i, gi.id,
                               gname, cinfo.id, ci.id, ci.placement.start, ci.placement.size);
                        any = 1;
                    }
                }
            }
        }
    }
    if (!any) printf("| No %s instances found.%*s|\n", compute ? "compute" : "GPU",
                     compute ? 40 : 29, "");
    printf("+%s+\n", compute ? "--------------------------------------------------------------------"
                             : "---------------------------------------------------------");
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: nvidia-smi [-L | [-i N] -q | [-i N] --query-gpu=F,... "
                    "--format=csv[,noheader][,nounits] | topo -m | mig -lgi | mig -lci]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *query = NULL, *format = NULL;
    int list = 0, full = 0, only = -1, rc;
    if (argc >= 2 && !strcmp(argv[1], "topo")) {
        if (argc != 3 || strcmp(argv[2], "-m")) return usage();
        if ((rc = open_nvml())) return rc;
        rc = topo();
        nvmlShutdown();
        return rc;
    }
    if (argc >= 2 && !strcmp(argv[1], "mig")) {
        if (argc != 3 || (strcmp(argv[2], "-lgi") && strcmp(argv[2], "-lci"))) return usage();
        if ((rc = open_nvml())) return rc;
        rc = mig_list(!strcmp(argv[2], "-lci"));
        nvmlShutdown();
        return rc;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-L") || !strcmp(argv[i], "--list-gpus")) list = 1;
        else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--query")) full = 1;
        else if (!strncmp(argv[i], "--query-gpu=", 12)) query = argv[i] + 12;
        else if (!strncmp(argv[i], "--format=", 9)) format = argv[i] + 9;
        else if (!strcmp(argv[i], "-i") && i + 1 < argc) only = atoi(argv[++i]);
        else if (!strncmp(argv[i], "--id=", 5)) only = atoi(argv[i] + 5);
        else return usage();
    }
    if (!list && !full && !query) return usage();
    if ((rc = open_nvml())) return rc;
    if (only >= (int)count) {
        fprintf(stderr, "No devices were found with index %d\n", only);
        nvmlShutdown();
        return 6;
    }
    rc = list ? list_gpus() : query ? query_gpu(query, format, only) : query_all(only);
    nvmlShutdown();
    return rc;
}
