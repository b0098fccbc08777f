/* A small nvidia-smi on NVML: what a pod's scripts ask of the real one, answered through
 * fakegpu's NVML (linked in statically), so it shows exactly the GPUs that library shows. Not
 * NVIDIA's code: the output follows the shapes nvidia-smi prints, written here from public
 * examples of its output; every figure comes from an NVML call.
 *
 *   nvidia-smi [-i ID[,ID...]]             the summary table (driver, GPUs, MIG devices, processes)
 *   nvidia-smi -L [-i ID]                  GPUs and their MIG devices, with UUIDs
 *   nvidia-smi [-i ID] -q                  the essentials of the full query
 *   nvidia-smi [-i ID] --query-gpu=F,... --format=csv[,noheader][,nounits]
 *   nvidia-smi topo -m                     the NVLink matrix (NV<links> / SYS)
 *   nvidia-smi mig -lgi | -lci             GPU and compute instances
 *   nvidia-smi mig -lgip | -lgipp          GPU-instance profiles and their placements
 *   nvidia-smi --version                   versions of the tool, NVML, driver and CUDA
 *   nvidia-smi [-i ID] -c MODE             set the compute mode (DEFAULT, EXCLUSIVE_PROCESS, ...)
 *   nvidia-smi compute-policy [-i ID] --set-timeslice N | -l
 *                                          the time-slice policy (0 DEFAULT .. 3 LONG); NVIDIA's
 *                                          DRA plugin runs both for its sharing strategies
 *
 * ID is what NVIDIA's -i takes: an index, a GPU UUID, a PCI bus id or a board serial number.
 * Exit codes are NVIDIA's: 2 bad arguments, 6 no such GPU, 9 no driver, 15 a GPU is lost.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <nvml.h>

#define MAX_GPUS 64
#define EXIT_NOT_FOUND 6
#define EXIT_GPU_LOST 15

/* In the fake NVML (linked in): the bus id of a GPU whose handle NVML refuses, as NVIDIA's
 * nvidia-smi learns it from the kernel driver. */
int fakegpu_bus_id(unsigned int index, char *busId, unsigned int length);
/* The compute-policy time slice, kept in the node's state (no public NVML call reaches it). */
nvmlReturn_t fakegpu_device_timeslice(nvmlDevice_t device, unsigned int *timeslice);
nvmlReturn_t fakegpu_device_set_timeslice(nvmlDevice_t device, unsigned int timeslice);

static unsigned int count;
static nvmlDevice_t gpus[MAX_GPUS];
static nvmlReturn_t handle_rc[MAX_GPUS];  /* why NVML refused a GPU's handle (lost) */
static int selected[MAX_GPUS];            /* -i: the GPUs asked for (all without it) */

static int fail(const char *what, nvmlReturn_t rc)
{
    fprintf(stderr, "%s: %s\n", what, nvmlErrorString(rc));
    return rc == NVML_ERROR_LIBRARY_NOT_FOUND || rc == NVML_ERROR_DRIVER_NOT_LOADED ? 9 : 15;
}

/* Every GPU's handle; a GPU NVML refuses (lost) stays in the list with its error, as NVIDIA's
 * tool reports it and goes on with the others. */
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
    for (unsigned int i = 0; i < count; i++) {
        handle_rc[i] = nvmlDeviceGetHandleByIndex(i, &gpus[i]);
        selected[i] = 1;
    }
    return 0;
}

static int shown(unsigned int i)
{
    return selected[i] && handle_rc[i] == NVML_SUCCESS;
}

/* NVIDIA's line for a GPU without a handle; returns 1 when GPU i is selected and lost. */
static int report_lost(unsigned int i)
{
    if (!selected[i] || handle_rc[i] == NVML_SUCCESS) return 0;
    char bus[32] = "N/A";
    fakegpu_bus_id(i, bus, sizeof(bus));
    fflush(stdout);  /* in order with what was printed before, under 2>&1 */
    fprintf(stderr, "Unable to determine the device handle for GPU%u: %s: %s\n", i, bus,
            handle_rc[i] == NVML_ERROR_GPU_IS_LOST
                ? "GPU is lost.  Reboot the system to recover this GPU"
                : nvmlErrorString(handle_rc[i]));
    return 1;
}

/* "0000:18:00.0", "00000000:18:00.0" and "18:00.0" name the same function. */
static int parse_bus(const char *text, unsigned int out[4])
{
    unsigned int a, b, c, d;
    char tail;
    if (sscanf(text, "%x:%x:%x.%x%c", &a, &b, &c, &d, &tail) == 4) {
        out[0] = a, out[1] = b, out[2] = c, out[3] = d;
        return 1;
    }
    if (sscanf(text, "%x:%x.%x%c", &b, &c, &d, &tail) == 3) {
        out[0] = 0, out[1] = b, out[2] = c, out[3] = d;
        return 1;
    }
    return 0;
}

static int id_names(unsigned int i, const char *id)
{
    char buf[96] = "";
    unsigned int want[4], have[4];
    int digits = *id != '\0';
    for (const char *c = id; *c; c++) digits &= isdigit((unsigned char)*c) != 0;
    if (digits && strtoul(id, NULL, 10) < count) return strtoul(id, NULL, 10) == i;
    /* else a serial number, often all digits too */
    if (parse_bus(id, want)) {
        return fakegpu_bus_id(i, buf, sizeof(buf)) == NVML_SUCCESS && parse_bus(buf, have) &&
               !memcmp(want, have, sizeof(want));
    }
    if (handle_rc[i] != NVML_SUCCESS) return 0;  /* a lost GPU has no UUID or serial to read */
    if (nvmlDeviceGetUUID(gpus[i], buf, sizeof(buf)) == NVML_SUCCESS && !strcasecmp(buf, id))
        return 1;
    return nvmlDeviceGetSerial(gpus[i], buf, sizeof(buf)) == NVML_SUCCESS && !strcmp(buf, id);
}

/* -i ID[,ID...]: select those GPUs; 0 when each ID names one, else the exit code. */
static int select_ids(const char *ids)
{
    char list[1024], *save = NULL;
    snprintf(list, sizeof(list), "%s", ids);
    memset(selected, 0, sizeof(selected));
    for (char *id = strtok_r(list, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
        while (*id == ' ') id++;
        int found = 0;
        for (unsigned int i = 0; i < count; i++)
            if (id_names(i, id)) selected[i] = found = 1;
        if (!found) {
            fprintf(stderr, "No devices were found with id \"%s\"\n", id);
            return EXIT_NOT_FOUND;
        }
    }
    return 0;
}

/* The exit code after a command: 15 when a GPU asked for was lost. */
static int lost_any(void)
{
    for (unsigned int i = 0; i < count; i++)
        if (selected[i] && handle_rc[i] != NVML_SUCCESS) return EXIT_GPU_LOST;
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
        if (report_lost(i) || !shown(i)) continue;
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
        nvmlDeviceGetName(gpus[i], name, sizeof(name));
        nvmlDeviceGetUUID(gpus[i], uuid, sizeof(uuid));
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        if (!mig_enabled(gpus[i])) continue;
        unsigned int max = 0;
        nvmlDeviceGetMaxMigDeviceCount(gpus[i], &max);
        for (unsigned int j = 0, listed = 0; j < max; j++) {
            nvmlDevice_t mig;
            if (nvmlDeviceGetMigDeviceHandleByIndex(gpus[i], j, &mig) != NVML_SUCCESS) continue;
            char mname[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
            char muuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
            nvmlDeviceGetName(mig, mname, sizeof(mname));
            nvmlDeviceGetUUID(mig, muuid, sizeof(muuid));
            printf("  MIG %-12s Device %2u: (UUID: %s)\n", mig_profile(mname), listed++, muuid);
        }
    }
    return lost_any();
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
    } else if (!strcmp(f, "compute_mode")) {
        nvmlComputeMode_t mode;
        if (nvmlDeviceGetComputeMode(dev, &mode) != NVML_SUCCESS) snprintf(out, n, "[N/A]");
        else snprintf(out, n, "%s", mode == NVML_COMPUTEMODE_DEFAULT ? "Default"
                                    : mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD ? "Exclusive_Thread"
                                    : mode == NVML_COMPUTEMODE_PROHIBITED ? "Prohibited"
                                    : "Exclusive_Process");
    } else if (!strcmp(f, "count")) {
        snprintf(out, n, "%u", count);
    } else {
        return 0;
    }
    return 1;
}

static int query_gpu(const char *fields, const char *format)
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
    unsigned int first = 0;
    while (first < count && !shown(first)) first++;
    for (int k = 0; k < n; k++) {  /* every field known before anything is printed */
        if (first == count) break;
        if (!field(gpus[first], first, names[k], o, out, sizeof(out))) {
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
        if (report_lost(i) || !shown(i)) continue;
        for (int k = 0; k < n; k++) {
            field(gpus[i], i, names[k], o, out, sizeof(out));
            printf("%s%s", k ? ", " : "", out);
        }
        printf("\n");
    }
    return lost_any();
}

/* --- -q ------------------------------------------------------------------------------------- */

/* NVIDIA's -q layout: keys indented 4 per level, the colon at column 56 whatever the depth;
 * sections and keys in the order driver 580 prints them (tests/nvidiasmi/data/smi-q.txt, a
 * real H200). What the fake NVML answers is shown; what no NVML call of ours backs prints as
 * the real one prints a value its GPU lacks ("N/A"), so the shape stays the real one. */
static nvmlReturn_t memory_v2(nvmlDevice_t dev, nvmlMemory_v2_t *memory);

#define MIB_UP ((1ULL << 20) - 1)

static void q_section(int depth, const char *name)
{
    printf("%*s%s\n", 4 * depth, "", name);
}

static void q_kv(int depth, const char *key, const char *fmt, ...)
{
    va_list ap;
    printf("%*s%-*s: ", 4 * depth, "", 55 - 4 * depth, key);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

static void q_na(int depth, const char *const *keys)
{
    for (; *keys; keys++) q_kv(depth, *keys, "N/A");
}

static const char *enabled(nvmlReturn_t rc, nvmlEnableState_t v)
{
    return rc != NVML_SUCCESS ? "N/A" : v == NVML_FEATURE_ENABLED ? "Enabled" : "Disabled";
}

static const char *brand_name(nvmlBrandType_t b)
{
    switch (b) {
    case NVML_BRAND_TESLA: return "Tesla";
    case NVML_BRAND_QUADRO: return "Quadro";
    case NVML_BRAND_GEFORCE: return "GeForce";
    case NVML_BRAND_NVIDIA: return "NVIDIA";
    default: return "N/A";
    }
}

static const char *arch_name(nvmlDeviceArchitecture_t a)
{
    switch (a) {
    case NVML_DEVICE_ARCH_VOLTA: return "Volta";
    case NVML_DEVICE_ARCH_TURING: return "Turing";
    case NVML_DEVICE_ARCH_AMPERE: return "Ampere";
    case NVML_DEVICE_ARCH_ADA: return "Ada Lovelace";
    case NVML_DEVICE_ARCH_HOPPER: return "Hopper";
    case 10: return "Blackwell";
    default: return "N/A";
    }
}

static const char *addressing_name(nvmlReturn_t rc, unsigned int mode)
{
    if (rc != NVML_SUCCESS) return "N/A";
    return mode == 1 ? "HMM" : mode == 2 ? "ATS" : "None";
}

static const char *compute_mode_name(nvmlReturn_t rc, nvmlComputeMode_t m)
{
    if (rc != NVML_SUCCESS) return "N/A";
    return m == NVML_COMPUTEMODE_DEFAULT ? "Default"
           : m == NVML_COMPUTEMODE_EXCLUSIVE_THREAD ? "Exclusive_Thread"
           : m == NVML_COMPUTEMODE_PROHIBITED ? "Prohibited" : "Exclusive_Process";
}

static void q_clock(int depth, const char *key, nvmlDevice_t d, nvmlClockType_t t, int max)
{
    unsigned int mhz = 0;
    nvmlReturn_t rc = max ? nvmlDeviceGetMaxClockInfo(d, t, &mhz) : nvmlDeviceGetClockInfo(d, t, &mhz);
    if (rc == NVML_SUCCESS) q_kv(depth, key, "%u MHz", mhz);
    else q_kv(depth, key, "N/A");
}

static void q_watts(int depth, const char *key, nvmlReturn_t rc, unsigned int milliwatts)
{
    if (rc == NVML_SUCCESS) q_kv(depth, key, "%u.%02u W", milliwatts / 1000, milliwatts % 1000 / 10);
    else q_kv(depth, key, "N/A");
}

static void q_ecc_counts(int depth, nvmlDevice_t d, nvmlEccCounterType_t counter, int aggregate)
{
    unsigned long long unc = 0;
    nvmlReturn_t rc = nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter, &unc);
    q_kv(depth, "SRAM Correctable", rc == NVML_SUCCESS ? "0" : "N/A");
    q_kv(depth, "SRAM Uncorrectable Parity", rc == NVML_SUCCESS ? "0" : "N/A");
    q_kv(depth, "SRAM Uncorrectable SEC-DED", rc == NVML_SUCCESS ? "0" : "N/A");
    q_kv(depth, "DRAM Correctable", rc == NVML_SUCCESS ? "0" : "N/A");
    if (rc == NVML_SUCCESS) q_kv(depth, "DRAM Uncorrectable", "%llu", unc);
    else q_kv(depth, "DRAM Uncorrectable", "N/A");
    if (aggregate) q_kv(depth, "SRAM Threshold Exceeded", "No");
}

static void q_gpu(nvmlDevice_t d)
{
    char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlPciInfo_t pci;
    nvmlEnableState_t state = NVML_FEATURE_DISABLED, pending_state = NVML_FEATURE_DISABLED;
    unsigned int value = 0, current = 0, pending = 0, lo = 0, hi = 0;
    nvmlReturn_t rc;

    memset(&pci, 0, sizeof(pci));
    nvmlDeviceGetPciInfo(d, &pci);
    printf("GPU %s\n", pci.busId);
    rc = nvmlDeviceGetName(d, text, sizeof(text));
    q_kv(1, "Product Name", "%s", text_or(rc, text));
    nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
    rc = nvmlDeviceGetBrand(d, &brand);
    q_kv(1, "Product Brand", "%s", rc == NVML_SUCCESS ? brand_name(brand) : "N/A");
    nvmlDeviceArchitecture_t arch = 0;
    rc = nvmlDeviceGetArchitecture(d, &arch);
    q_kv(1, "Product Architecture", "%s", rc == NVML_SUCCESS ? arch_name(arch) : "N/A");
    /* driver 580 answers these three so on every data-center part */
    q_kv(1, "Display Mode", "Requested functionality has been deprecated");
    rc = nvmlDeviceGetDisplayActive(d, &state);
    q_kv(1, "Display Attached", "%s", rc == NVML_SUCCESS ? "Yes" : "N/A");
    q_kv(1, "Display Active", "%s", enabled(rc, state));
    rc = nvmlDeviceGetPersistenceMode(d, &state);
    q_kv(1, "Persistence Mode", "%s", enabled(rc, state));
    nvmlDeviceAddressingMode_t addressing = {.version = nvmlDeviceAddressingMode_v1};
    rc = nvmlDeviceGetAddressingMode(d, &addressing);
    q_kv(1, "Addressing Mode", "%s", addressing_name(rc, addressing.value));
    q_section(1, "MIG Mode");
    rc = nvmlDeviceGetMigMode(d, &current, &pending);
    q_kv(2, "Current", "%s", rc != NVML_SUCCESS ? "N/A" : current ? "Enabled" : "Disabled");
    q_kv(2, "Pending", "%s", rc != NVML_SUCCESS ? "N/A" : pending ? "Enabled" : "Disabled");
    q_kv(1, "Accounting Mode", "Disabled");
    q_kv(1, "Accounting Mode Buffer Size", "4000");
    q_section(1, "Driver Model");
    q_na(2, (const char *const[]){"Current", "Pending", NULL});
    rc = nvmlDeviceGetSerial(d, text, sizeof(text));
    q_kv(1, "Serial Number", "%s", text_or(rc, text));
    rc = nvmlDeviceGetUUID(d, text, sizeof(text));
    q_kv(1, "GPU UUID", "%s", text_or(rc, text));
    q_kv(1, "GPU PDI", "N/A");
    rc = nvmlDeviceGetMinorNumber(d, &value);
    if (rc == NVML_SUCCESS) q_kv(1, "Minor Number", "%u", value);
    else q_kv(1, "Minor Number", "N/A");
    rc = nvmlDeviceGetVbiosVersion(d, text, sizeof(text));
    q_kv(1, "VBIOS Version", "%s", text_or(rc, text));
    q_kv(1, "MultiGPU Board", "No");
    q_kv(1, "Board ID", "N/A");
    rc = nvmlDeviceGetBoardPartNumber(d, text, sizeof(text));
    q_kv(1, "Board Part Number", "%s", text_or(rc, text));
    q_na(1, (const char *const[]){"GPU Part Number", "FRU Part Number", NULL});
    q_section(1, "Platform Info");
    q_na(2, (const char *const[]){"Chassis Serial Number", "Slot Number", "Tray Index", "Host ID",
                                  "Peer Type", NULL});
    rc = nvmlDeviceGetModuleId(d, &value);
    if (rc == NVML_SUCCESS) q_kv(2, "Module Id", "%u", value);
    else q_kv(2, "Module Id", "N/A");
    q_kv(2, "GPU Fabric GUID", "N/A");
    q_section(1, "Inforom Version");
    q_na(2, (const char *const[]){"Image Version", "OEM Object", "ECC Object",
                                  "Power Management Object", NULL});
    q_section(1, "Inforom BBX Object Flush");
    q_na(2, (const char *const[]){"Latest Timestamp", "Latest Duration", NULL});
    q_section(1, "GPU Operation Mode");
    q_na(2, (const char *const[]){"Current", "Pending", NULL});
    q_kv(1, "GPU C2C Mode", "%s", addressing.value == 2 ? "Enabled" : "Disabled");
    q_section(1, "GPU Virtualization Mode");
    nvmlGpuVirtualizationMode_t virt = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    rc = nvmlDeviceGetVirtualizationMode(d, &virt);
    q_kv(2, "Virtualization Mode", "%s", rc != NVML_SUCCESS ? "N/A"
         : virt == NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH ? "Pass-Through" : "None");
    q_na(2, (const char *const[]){"Host VGPU Mode", "vGPU Heterogeneous Mode", NULL});
    q_kv(1, "GPU Recovery Action", "None");
    nvmlSystemGetDriverVersion(text, sizeof(text));
    q_kv(1, "GSP Firmware Version", "%s", text);
    q_section(1, "IBMNPU");
    q_kv(2, "Relaxed Ordering Mode", "N/A");

    q_section(1, "PCI");
    q_kv(2, "Bus", "0x%02X", pci.bus);
    q_kv(2, "Device", "0x%02X", pci.device);
    q_kv(2, "Domain", "0x%04X", pci.domain);
    q_kv(2, "Base Classcode", "0x3");
    q_kv(2, "Sub Classcode", "0x2");
    q_kv(2, "Device Id", "0x%08X", pci.pciDeviceId);
    q_kv(2, "Bus Id", "%s", pci.busId);
    q_kv(2, "Sub System Id", "0x%08X", pci.pciSubSystemId);
    q_section(2, "GPU Link Info");
    q_section(3, "PCIe Generation");
    if (nvmlDeviceGetMaxPcieLinkGeneration(d, &hi) == NVML_SUCCESS) q_kv(4, "Max", "%u", hi);
    else q_kv(4, "Max", "N/A");
    if (nvmlDeviceGetCurrPcieLinkGeneration(d, &lo) == NVML_SUCCESS) q_kv(4, "Current", "%u", lo);
    else q_kv(4, "Current", "N/A");
    q_kv(4, "Device Current", "%u", lo);
    q_kv(4, "Device Max", "%u", hi);
    q_kv(4, "Host Max", "N/A");
    q_section(3, "Link Width");
    if (nvmlDeviceGetMaxPcieLinkWidth(d, &hi) == NVML_SUCCESS) q_kv(4, "Max", "%ux", hi);
    else q_kv(4, "Max", "N/A");
    if (nvmlDeviceGetCurrPcieLinkWidth(d, &lo) == NVML_SUCCESS) q_kv(4, "Current", "%ux", lo);
    else q_kv(4, "Current", "N/A");
    q_section(2, "Bridge Chip");
    q_na(3, (const char *const[]){"Type", "Firmware", NULL});
    q_kv(2, "Replays Since Reset", "0");
    q_kv(2, "Replay Number Rollovers", "0");
    q_kv(2, "Tx Throughput", "0 KB/s");
    q_kv(2, "Rx Throughput", "0 KB/s");
    q_na(2, (const char *const[]){"Atomic Caps Outbound", "Atomic Caps Inbound", NULL});
    if (nvmlDeviceGetFanSpeed(d, &value) == NVML_SUCCESS) q_kv(1, "Fan Speed", "%u %%", value);
    else q_kv(1, "Fan Speed", "N/A");
    nvmlPstates_t pstate = NVML_PSTATE_UNKNOWN;
    if (nvmlDeviceGetPerformanceState(d, &pstate) == NVML_SUCCESS && pstate != NVML_PSTATE_UNKNOWN)
        q_kv(1, "Performance State", "P%d", (int)pstate);
    else
        q_kv(1, "Performance State", "N/A");
    unsigned long long reasons = 0;
    int have_reasons = nvmlDeviceGetCurrentClocksEventReasons(d, &reasons) == NVML_SUCCESS;
#define REASON(bit) (!have_reasons ? "N/A" : (reasons & (bit)) ? "Active" : "Not Active")
    q_section(1, "Clocks Event Reasons");
    q_kv(2, "Idle", "%s", REASON(0x1ULL));
    q_kv(2, "Applications Clocks Setting", "%s", REASON(0x2ULL));
    q_kv(2, "SW Power Cap", "%s", REASON(0x4ULL));
    q_kv(2, "HW Slowdown", "%s", REASON(0x8ULL));
    q_kv(3, "HW Thermal Slowdown", "%s", REASON(0x40ULL));
    q_kv(3, "HW Power Brake Slowdown", "%s", REASON(0x80ULL));
    q_kv(2, "Sync Boost", "%s", REASON(0x10ULL));
    q_kv(2, "SW Thermal Slowdown", "%s", REASON(0x20ULL));
    q_kv(2, "Display Clock Setting", "%s", REASON(0x100ULL));
#undef REASON
    q_section(1, "Clocks Event Reasons Counters");
    q_kv(2, "SW Power Capping", "0 us");
    q_kv(2, "Sync Boost", "0 us");
    q_kv(2, "SW Thermal Slowdown", "0 us");
    q_kv(2, "HW Thermal Slowdown", "0 us");
    q_kv(2, "HW Power Braking", "0 us");
    q_kv(1, "Sparse Operation Mode", "Disabled");

    nvmlMemory_v2_t memory;
    rc = memory_v2(d, &memory);
    q_section(1, "FB Memory Usage");
    if (rc == NVML_SUCCESS) {
        /* -q rounds up: a real H200's 644939776 B reserved (615.06 MiB) shows as 616 MiB */
        q_kv(2, "Total", "%llu MiB", (memory.total + MIB_UP) >> 20);
        q_kv(2, "Reserved", "%llu MiB", (memory.reserved + MIB_UP) >> 20);
        q_kv(2, "Used", "%llu MiB", (memory.used + MIB_UP) >> 20);
        q_kv(2, "Free", "%llu MiB", (memory.free + MIB_UP) >> 20);
    } else {
        q_na(2, (const char *const[]){"Total", "Reserved", "Used", "Free", NULL});
    }
    nvmlBAR1Memory_t bar1;
    memset(&bar1, 0, sizeof(bar1));
    rc = nvmlDeviceGetBAR1MemoryInfo(d, &bar1);
    q_section(1, "BAR1 Memory Usage");
    if (rc == NVML_SUCCESS) {
        q_kv(2, "Total", "%llu MiB", bar1.bar1Total >> 20);
        q_kv(2, "Used", "%llu MiB", bar1.bar1Used >> 20);
        q_kv(2, "Free", "%llu MiB", bar1.bar1Free >> 20);
    } else {
        q_na(2, (const char *const[]){"Total", "Used", "Free", NULL});
    }
    q_section(1, "Conf Compute Protected Memory Usage");
    q_kv(2, "Total", "0 MiB");
    q_kv(2, "Used", "0 MiB");
    q_kv(2, "Free", "0 MiB");
    nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
    rc = nvmlDeviceGetComputeMode(d, &mode);
    q_kv(1, "Compute Mode", "%s", compute_mode_name(rc, mode));
    nvmlUtilization_t rates;
    unsigned int period = 0;
    rc = nvmlDeviceGetUtilizationRates(d, &rates);
    q_section(1, "Utilization");
    if (rc == NVML_SUCCESS) {
        q_kv(2, "GPU", "%u %%", rates.gpu);
        q_kv(2, "Memory", "%u %%", rates.memory);
    } else {
        q_na(2, (const char *const[]){"GPU", "Memory", NULL});
    }
    if (nvmlDeviceGetEncoderUtilization(d, &value, &period) == NVML_SUCCESS)
        q_kv(2, "Encoder", "%u %%", value);
    else
        q_kv(2, "Encoder", "N/A");
    if (nvmlDeviceGetDecoderUtilization(d, &value, &period) == NVML_SUCCESS)
        q_kv(2, "Decoder", "%u %%", value);
    else
        q_kv(2, "Decoder", "N/A");
    q_kv(2, "JPEG", "0 %%");
    q_kv(2, "OFA", "0 %%");
    for (int s = 0; s < 2; s++) {
        q_section(1, s ? "FBC Stats" : "Encoder Stats");
        q_kv(2, "Active Sessions", "0");
        q_kv(2, "Average FPS", "0");
        q_kv(2, "Average Latency", "0");
    }
    q_section(1, "DRAM Encryption Mode");
    q_na(2, (const char *const[]){"Current", "Pending", NULL});
    rc = nvmlDeviceGetEccMode(d, &state, &pending_state);
    q_section(1, "ECC Mode");
    q_kv(2, "Current", "%s", enabled(rc, state));
    q_kv(2, "Pending", "%s", enabled(rc, pending_state));
    q_section(1, "ECC Errors");
    q_section(2, "Volatile");
    q_ecc_counts(3, d, NVML_VOLATILE_ECC, 0);
    q_section(2, "Aggregate");
    q_ecc_counts(3, d, NVML_AGGREGATE_ECC, 1);
    q_section(2, "Aggregate Uncorrectable SRAM Sources");
    const char *const sources[] = {"SRAM L2", "SRAM SM", "SRAM Microcontroller", "SRAM PCIE",
                                   "SRAM Other", NULL};
    for (const char *const *k = sources; *k; k++) q_kv(3, *k, "0");
    q_kv(2, "Channel Repair Pending", "No");
    q_kv(2, "TPC Repair Pending", "No");
    q_kv(2, "Unrepairable Memory", "No");
    q_section(1, "Retired Pages");
    q_na(2, (const char *const[]){"Single Bit ECC", "Double Bit ECC", "Pending Page Blacklist", NULL});
    q_section(1, "Remapped Rows");
    const char *const rows[] = {"Correctable Error", "Inactive Correctable Error",
                                "Uncorrectable Error", "Inactive Uncorrectable Error", NULL};
    for (const char *const *k = rows; *k; k++) q_kv(2, *k, "0");
    q_kv(2, "Pending", "No");
    q_kv(2, "Remapping Failure Occurred", "No");
    q_section(2, "Bank Remap Availability Histogram");
    q_kv(3, "Max", "3072 bank(s)");
    const char *const levels[] = {"High", "Partial", "Low", "None", NULL};
    for (const char *const *k = levels; *k; k++) q_kv(3, *k, "0 bank(s)");

    q_section(1, "Temperature");
    nvmlTemperature_t sensor = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
    if (nvmlDeviceGetTemperatureV(d, &sensor) == NVML_SUCCESS)
        q_kv(2, "GPU Current Temp", "%d C", sensor.temperature);
    else
        q_kv(2, "GPU Current Temp", "N/A");
    q_na(2, (const char *const[]){"GPU T.Limit Temp", "GPU Shutdown T.Limit Temp",
                                  "GPU Slowdown T.Limit Temp", "GPU Max Operating T.Limit Temp",
                                  "GPU Target Temperature", "Memory Current Temp",
                                  "Memory Max Operating T.Limit Temp", NULL});
    q_section(1, "GPU Power Readings");
    rc = nvmlDeviceGetPowerUsage(d, &value);
    q_watts(2, "Average Power Draw", rc, value);
    q_watts(2, "Instantaneous Power Draw", rc, value);
    rc = nvmlDeviceGetEnforcedPowerLimit(d, &value);
    q_watts(2, "Current Power Limit", rc, value);
    rc = nvmlDeviceGetPowerManagementLimit(d, &value);
    q_watts(2, "Requested Power Limit", rc, value);
    rc = nvmlDeviceGetPowerManagementDefaultLimit(d, &value);
    q_watts(2, "Default Power Limit", rc, value);
    rc = nvmlDeviceGetPowerManagementLimitConstraints(d, &lo, &hi);
    q_watts(2, "Min Power Limit", rc, lo);
    q_watts(2, "Max Power Limit", rc, hi);
    q_section(1, "GPU Memory Power Readings ");  /* sic: driver 580 ends this title with a space */
    q_na(2, (const char *const[]){"Average Power Draw", "Instantaneous Power Draw", NULL});
    q_section(1, "Module Power Readings");
    q_na(2, (const char *const[]){"Average Power Draw", "Instantaneous Power Draw",
                                  "Current Power Limit", "Requested Power Limit",
                                  "Default Power Limit", "Min Power Limit", "Max Power Limit",
                                  NULL});
    q_kv(1, "Power Smoothing", "N/A");
    q_section(1, "Workload Power Profiles");
    q_na(2, (const char *const[]){"Requested Profiles", "Enforced Profiles", NULL});
    q_section(1, "Clocks");
    q_clock(2, "Graphics", d, NVML_CLOCK_GRAPHICS, 0);
    q_clock(2, "SM", d, NVML_CLOCK_SM, 0);
    q_clock(2, "Memory", d, NVML_CLOCK_MEM, 0);
    q_clock(2, "Video", d, NVML_CLOCK_VIDEO, 0);
    /* application clocks: nothing sets them here, so they are the defaults, the max clocks */
    for (int s = 0; s < 2; s++) {
        q_section(1, s ? "Default Applications Clocks" : "Applications Clocks");
        q_clock(2, "Graphics", d, NVML_CLOCK_GRAPHICS, 1);
        q_clock(2, "Memory", d, NVML_CLOCK_MEM, 1);
    }
    q_section(1, "Deferred Clocks");
    q_kv(2, "Memory", "N/A");
    q_section(1, "Max Clocks");
    q_clock(2, "Graphics", d, NVML_CLOCK_GRAPHICS, 1);
    q_clock(2, "SM", d, NVML_CLOCK_SM, 1);
    q_clock(2, "Memory", d, NVML_CLOCK_MEM, 1);
    q_clock(2, "Video", d, NVML_CLOCK_VIDEO, 1);
    q_section(1, "Max Customer Boost Clocks");
    q_clock(2, "Graphics", d, NVML_CLOCK_GRAPHICS, 1);
    q_section(1, "Clock Policy");
    q_na(2, (const char *const[]){"Auto Boost", "Auto Boost Default", NULL});

    q_section(1, "Fabric");
    nvmlGpuFabricInfoV_t fabric;
    memset(&fabric, 0, sizeof(fabric));
    fabric.version = nvmlGpuFabricInfo_v2;
    rc = nvmlDeviceGetGpuFabricInfoV(d, &fabric);
    /* state 0 (NOT_SUPPORTED) prints as an unsupported call does: all N/A (a real H200) */
    if (rc == NVML_SUCCESS && fabric.state != NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) {
        const char *states[] = {"N/A", "Not Started", "In Progress", "Completed"};
        char uuid[48];
        unsigned char *u = fabric.clusterUuid;
        q_kv(2, "State", "%s", fabric.state < 4 ? states[fabric.state] : "N/A");
        q_kv(2, "Status", "%s", fabric.status == NVML_SUCCESS ? "Success" : "Failure");
        q_kv(2, "CliqueId", "%u", fabric.cliqueId);
        snprintf(uuid, sizeof(uuid), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
                 u[13], u[14], u[15]);
        q_kv(2, "ClusterUUID", "%s", uuid);
    } else {
        q_na(2, (const char *const[]){"State", "Status", "CliqueId", "ClusterUUID", NULL});
    }
    q_section(2, "Health");
    q_na(3, (const char *const[]){"Summary", "Bandwidth", "Route Recovery in progress",
                                  "Route Unhealthy", "Access Timeout Recovery",
                                  "Incorrect Configuration", "Partition Assigned", NULL});
    nvmlProcessInfo_t procs[64];
    unsigned int n = 64;
    if (nvmlDeviceGetComputeRunningProcesses(d, &n, procs) == NVML_SUCCESS && n > 0) {
        q_section(1, "Processes");
        for (unsigned int p = 0; p < n && p < 64; p++) {
            char pname[256] = "N/A";
            nvmlSystemGetProcessName(procs[p].pid, pname, sizeof(pname));
            q_kv(2, "Process ID", "%u", procs[p].pid);
            q_kv(3, "Type", "C");
            q_kv(3, "Name", "%s", pname);
            q_kv(3, "Used GPU Memory", "%llu MiB", procs[p].usedGpuMemory >> 20);
        }
    } else {
        q_kv(1, "Processes", "None");
    }
    q_section(1, "Capabilities");
    q_kv(2, "EGM", "disabled");
}

static int query_all(void)
{
    char version[96] = "N/A", date[64] = "";
    int cuda = 0;
    time_t now = time(NULL);
    strftime(date, sizeof(date), "%a %b %e %H:%M:%S %Y", localtime(&now));
    nvmlSystemGetDriverVersion(version, sizeof(version));
    printf("\n==============NVSMI LOG==============\n\n");
    q_kv(0, "Timestamp", "%s", date);
    q_kv(0, "Driver Version", "%s", version);
    if (nvmlSystemGetCudaDriverVersion(&cuda) == NVML_SUCCESS)
        q_kv(0, "CUDA Version", "%d.%d", cuda / 1000, cuda % 1000 / 10);
    else
        q_kv(0, "CUDA Version", "N/A");
    printf("\n");
    q_kv(0, "Attached GPUs", "%u", count);
    for (unsigned int i = 0; i < count; i++) {
        if (report_lost(i) || !shown(i)) continue;
        q_gpu(gpus[i]);
        printf("\n");
    }
    return lost_any();
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
    for (unsigned int i = 0; i < count; i++) report_lost(i);
    printf("\t");
    for (unsigned int j = 0; j < count; j++)
        if (shown(j)) printf("GPU%u\t", j);
    printf("\n");
    for (unsigned int i = 0; i < count; i++) {
        if (!shown(i)) continue;
        printf("GPU%u\t", i);
        for (unsigned int j = 0; j < count; j++) {
            if (!shown(j)) continue;
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
    return lost_any();
}

/* --- mig -lgi / -lci ------------------------------------------------------------------------ */

/* A GPU-instance profile by NVML_GPU_INSTANCE_PROFILE_* index, with NVML's name ("MIG 1g.18gb",
 * the name nvidia-smi prints); 0 when the GPU lacks it. */
static int gi_profile(nvmlDevice_t dev, unsigned int index, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    memset(info, 0, sizeof(*info));
    info->version = nvmlGpuInstanceProfileInfo_v2;
    return nvmlDeviceGetGpuInstanceProfileInfoV(dev, index, info) == NVML_SUCCESS;
}

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
        if (report_lost(i) || !shown(i) || !mig_enabled(gpus[i])) continue;
        for (unsigned int p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
            nvmlGpuInstanceProfileInfo_v2_t info;
            if (!gi_profile(gpus[i], p, &info)) continue;
            nvmlGpuInstance_t gis[16];
            unsigned int n = 16;  /* in: room in gis (as fakegpu's NVML reads it), out: found */
            if (nvmlDeviceGetGpuInstances(gpus[i], info.id, gis, &n) != NVML_SUCCESS) continue;
            for (unsigned int g = 0; g < n && g < 16; g++) {
                nvmlGpuInstanceInfo_t gi;
                memset(&gi, 0, sizeof(gi));
                if (nvmlGpuInstanceGetInfo(gis[g], &gi) != NVML_SUCCESS) continue;
                const char *gname = info.name;
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
    return lost_any();
}

/* --- mig -lgip / -lgipp: GPU-instance profiles, as read on a real H200 (driver 580.159.04) -- */

/* NVIDIA's order: by compute slices, then memory, then profile index (1g.18gb, 1g.18gb+me,
 * 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb on an H200) */
struct gi_row { unsigned int index; nvmlGpuInstanceProfileInfo_v2_t info; };

static int gi_row_order(const void *a, const void *b)
{
    const struct gi_row *x = a, *y = b;
    if (x->info.sliceCount != y->info.sliceCount)
        return x->info.sliceCount < y->info.sliceCount ? -1 : 1;
    if (x->info.memorySizeMB != y->info.memorySizeMB)
        return x->info.memorySizeMB < y->info.memorySizeMB ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

#define LGIP_RULE "+-------------------------------------------------------------------------------+\n"

static int mig_profiles(int placements)
{
    if (!placements)
        printf(LGIP_RULE
               "| GPU instance profiles:                                                        |\n"
               "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |\n"
               "|                                Free/Total   GiB              CE    JPEG  OFA  |\n"
               "|===============================================================================|\n");
    for (unsigned int i = 0; i < count; i++) {
        if (report_lost(i) || !shown(i)) continue;
        struct gi_row rows[NVML_GPU_INSTANCE_PROFILE_COUNT];
        unsigned int found = 0;
        for (unsigned int p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++)
            if (gi_profile(gpus[i], p, &rows[found].info)) rows[found++].index = p;
        qsort(rows, found, sizeof(rows[0]), gi_row_order);
        for (unsigned int r = 0; r < found; r++) {
            const nvmlGpuInstanceProfileInfo_v2_t info = rows[r].info;
            if (placements) {
                nvmlGpuInstancePlacement_t where[32];
                unsigned int n = 32;
                if (nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpus[i], info.id, where, &n)
                    != NVML_SUCCESS || n == 0) continue;
                char starts[160] = "";
                size_t used = 0;
                for (unsigned int k = 0; k < n && k < 32 && used < sizeof(starts); k++)
                    used += snprintf(starts + used, sizeof(starts) - used, "%s%u", k ? "," : "",
                                     where[k].start);
                printf("GPU %2u Profile ID %2u %s: {%s}:%u\n", i, info.id,
                       n == 1 ? "Placement " : "Placements", starts, where[0].size);
                continue;
            }
            unsigned int free = info.instanceCount;  /* MIG off: every instance is free */
            nvmlDeviceGetGpuInstanceRemainingCapacity(gpus[i], info.id, &free);
            char memory[16];
            snprintf(memory, sizeof(memory), "%.2f", info.memorySizeMB / 1024.0);
            printf("|%4u  %-18s%4u%6u/%-2u%7s%-11s%-7s%-7u%-6u%-4u|\n", i, info.name, info.id,
                   free, info.instanceCount, "", memory, info.isP2pSupported ? "Yes" : "No",
                   info.multiprocessorCount, info.decoderCount, info.encoderCount);
            printf("|%63s%-6u%-6u%-4u|\n" LGIP_RULE, "", info.copyEngineCount, info.jpegCount,
                   info.ofaCount);
        }
    }
    return lost_any();
}

/* --- --version -------------------------------------------------------------------------- */

static int versions(void)
{
    char driver[96] = "N/A", nvml[96] = "N/A";
    int cuda = 0;
    nvmlSystemGetDriverVersion(driver, sizeof(driver));
    /* NVIDIA's tool prints the NVML branch ("580.159"): the driver version's first two parts */
    const char *second = strchr(driver, '.');
    const char *third = second ? strchr(second + 1, '.') : NULL;
    snprintf(nvml, sizeof(nvml), "%.*s", third ? (int)(third - driver) : (int)strlen(driver),
             driver);
    printf("NVIDIA-SMI version  : %s\n", driver);
    printf("NVML version        : %s\n", nvml);
    printf("DRIVER version      : %s\n", driver);
    if (nvmlSystemGetCudaDriverVersion(&cuda) == NVML_SUCCESS)
        printf("CUDA Version        : %d.%d\n", cuda / 1000, cuda % 1000 / 10);
    return 0;
}

/* --- the summary (nvidia-smi without arguments) ------------------------------------------ */

/* NVIDIA's table is 91 columns: three GPU columns of 41, 24 and 22 characters, the MIG table
 * four of 18, 34, 11 and 23, the header and the processes one box of 89. */
#define RULE "-----------------------------------------------------------------------------------------"
#define GPU_RULE(c) c "-----------------------------------------+------------------------+" \
                    "----------------------+\n"
#define MIG_RULE "+------------------+----------------------------------+-----------+" \
                 "-----------------------+\n"

static const char *on_off(nvmlReturn_t rc, nvmlEnableState_t v)
{
    return rc != NVML_SUCCESS ? "N/A" : v == NVML_FEATURE_ENABLED ? "On" : "Off";
}

/* "NVIDIA H100 80GB HBM3" as is; a longer name cut to fit its 27 characters, as NVIDIA's. */
static void fit(const char *text, char *out, size_t width)
{
    if (strlen(text) <= width) snprintf(out, width + 1, "%s", text);
    else snprintf(out, width + 1, "%.*s...", (int)(width - 3), text);
}

/* Memory as nvidia-smi shows it: v2, whose "used" leaves out the driver's reservation (a real
 * idle H200 shows 0MiB used; v1 counts the reservation as used). */
static nvmlReturn_t memory_v2(nvmlDevice_t dev, nvmlMemory_v2_t *memory)
{
    memset(memory, 0, sizeof(*memory));
    memory->version = nvmlMemory_v2;
    return nvmlDeviceGetMemoryInfo_v2(dev, memory);
}

static void mib(nvmlReturn_t rc, unsigned long long bytes, char *out, size_t n)
{
    if (rc == NVML_SUCCESS) snprintf(out, n, "%lluMiB", bytes >> 20);
    else snprintf(out, n, "N/A");
}

static void gpu_block(unsigned int i)
{
    nvmlDevice_t d = gpus[i];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "", shortname[32], ecc[24] = "N/A";
    char temp[16] = "N/A", fan[16] = "N/A", perf[8] = "N/A", usage[16] = "N/A", cap[16] = "N/A";
    char used[24], total[24], util[16] = "N/A";
    const char *compute = "N/A", *mig = "N/A";
    nvmlEnableState_t persistence = NVML_FEATURE_DISABLED, display = NVML_FEATURE_DISABLED;
    nvmlEnableState_t ecc_now = NVML_FEATURE_DISABLED, ecc_pending;
    nvmlPciInfo_t pci;
    nvmlMemory_v2_t memory;
    nvmlUtilization_t rates;
    nvmlPstates_t pstate;
    nvmlComputeMode_t mode;
    unsigned int value = 0, current = 0, pending = 0;
    unsigned long long errors = 0;

    memset(&pci, 0, sizeof(pci));
    nvmlDeviceGetName(d, name, sizeof(name));
    fit(name, shortname, 27);
    nvmlReturn_t persistence_rc = nvmlDeviceGetPersistenceMode(d, &persistence);
    nvmlReturn_t pci_rc = nvmlDeviceGetPciInfo(d, &pci);
    nvmlReturn_t display_rc = nvmlDeviceGetDisplayActive(d, &display);
    if (nvmlDeviceGetEccMode(d, &ecc_now, &ecc_pending) == NVML_SUCCESS) {
        if (ecc_now != NVML_FEATURE_ENABLED) snprintf(ecc, sizeof(ecc), "Off");
        else if (nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                             NVML_VOLATILE_ECC, &errors) == NVML_SUCCESS)
            snprintf(ecc, sizeof(ecc), "%llu", errors);
    }
    if (nvmlDeviceGetFanSpeed(d, &value) == NVML_SUCCESS) snprintf(fan, sizeof(fan), "%u%%", value);
    nvmlTemperature_t sensor = {.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_GPU};
    if (nvmlDeviceGetTemperatureV(d, &sensor) == NVML_SUCCESS)
        snprintf(temp, sizeof(temp), "%dC", sensor.temperature);
    if (nvmlDeviceGetPerformanceState(d, &pstate) == NVML_SUCCESS && pstate != NVML_PSTATE_UNKNOWN)
        snprintf(perf, sizeof(perf), "P%d", (int)pstate);
    if (nvmlDeviceGetPowerUsage(d, &value) == NVML_SUCCESS)
        snprintf(usage, sizeof(usage), "%uW", value / 1000);
    if (nvmlDeviceGetEnforcedPowerLimit(d, &value) == NVML_SUCCESS)
        snprintf(cap, sizeof(cap), "%uW", value / 1000);
    nvmlReturn_t memory_rc = memory_v2(d, &memory);
    mib(memory_rc, memory.used, used, sizeof(used));
    mib(memory_rc, memory.total, total, sizeof(total));
    if (nvmlDeviceGetUtilizationRates(d, &rates) == NVML_SUCCESS)
        snprintf(util, sizeof(util), "%u%%", rates.gpu);
    if (nvmlDeviceGetComputeMode(d, &mode) == NVML_SUCCESS)
        compute = mode == NVML_COMPUTEMODE_DEFAULT ? "Default"
                  : mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD ? "E. Thread"
                  : mode == NVML_COMPUTEMODE_PROHIBITED ? "Prohibited" : "E. Process";
    if (nvmlDeviceGetMigMode(d, &current, &pending) == NVML_SUCCESS)
        mig = current == NVML_DEVICE_MIG_ENABLE ? (pending == current ? "Enabled" : "Enabled*")
                                                : (pending == current ? "Disabled" : "Disabled*");

    printf("|%4u  %-27s%6s  |%19s %3s |%21s |\n", i, shortname,
           on_off(persistence_rc, persistence), text_or(pci_rc, pci.busId),
           on_off(display_rc, display), ecc);
    printf("| %3s   %3s    %-3s%15s / %5s |%11s / %9s |%8s %12s |\n", fan, temp, perf, usage, cap,
           used, total, util, compute);
    printf("|%41s|%24s|%21s |\n", "", "", mig);
    printf(GPU_RULE("+"));
}

static void mig_block(void)
{
    int header = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (!shown(i) || !mig_enabled(gpus[i])) continue;
        unsigned int max = 0;
        nvmlDeviceGetMaxMigDeviceCount(gpus[i], &max);
        for (unsigned int j = 0, listed = 0; j < max; j++) {
            nvmlDevice_t m;
            if (nvmlDeviceGetMigDeviceHandleByIndex(gpus[i], j, &m) != NVML_SUCCESS) continue;
            if (!header) {
                printf("+" RULE "+\n| %-88s|\n" MIG_RULE, "MIG devices:");
                printf("| GPU  GI  CI  MIG |%33s |%11s|%23s|\n", "Memory-Usage", "Vol",
                       "Shared         ");
                printf("|      ID  ID  Dev |%33s | SM     Unc| CE ENC  DEC  OFA  JPG |\n",
                       "BAR1-Usage");
                printf("|                  |%34s|        ECC|%23s|\n", "", "");
                printf("|==================+==================================+===========+"
                       "=======================|\n");
                header = 1;
            }
            unsigned int gi = 0, ci = 0;
            char used[24], total[24], bar_used[24], bar_total[24], sm[8] = "N/A", unc[24] = "N/A";
            nvmlMemory_t memory;
            nvmlBAR1Memory_t bar1;
            nvmlDeviceAttributes_t attr;
            unsigned long long errors = 0;
            memset(&memory, 0, sizeof(memory));
            memset(&bar1, 0, sizeof(bar1));
            memset(&attr, 0, sizeof(attr));
            nvmlDeviceGetGpuInstanceId(m, &gi);
            nvmlDeviceGetComputeInstanceId(m, &ci);
            nvmlReturn_t memory_rc = nvmlDeviceGetMemoryInfo(m, &memory);
            mib(memory_rc, memory.used, used, sizeof(used));
            mib(memory_rc, memory.total, total, sizeof(total));
            nvmlReturn_t bar_rc = nvmlDeviceGetBAR1MemoryInfo(m, &bar1);
            mib(bar_rc, bar1.bar1Used, bar_used, sizeof(bar_used));
            mib(bar_rc, bar1.bar1Total, bar_total, sizeof(bar_total));
            int attr_ok = nvmlDeviceGetAttributes(m, &attr) == NVML_SUCCESS;
            if (attr_ok) snprintf(sm, sizeof(sm), "%u", attr.multiprocessorCount);
            if (nvmlDeviceGetTotalEccErrors(m, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                            NVML_VOLATILE_ECC, &errors) == NVML_SUCCESS)
                snprintf(unc, sizeof(unc), "%llu", errors);
            printf("|%3u  %3u %3u %3u  |%19s / %-12s|%3s%7s | ", i, gi, ci, listed++, used, total,
                   sm, unc);
            if (attr_ok)
                printf("%2u %3u  %3u  %3u  %3u |\n", attr.sharedCopyEngineCount,
                       attr.sharedEncoderCount, attr.sharedDecoderCount, attr.sharedOfaCount,
                       attr.sharedJpegCount);
            else
                printf("%21s |\n", "N/A");
            printf("|%18s|%21s / %-10s|%11s|%23s|\n", "", bar_used, bar_total, "", "");
            printf(MIG_RULE);
        }
    }
    if (header) printf("\n");
}

static void processes_block(void)
{
    printf("+" RULE "+\n| %-88s|\n", "Processes:");
    printf("|  GPU   GI   CI              PID   Type   Process name%23s GPU Memory |\n", "");
    printf("|        ID   ID%62s Usage      |\n", "");
    printf("|" "=========================================================================================" "|\n");
    int any = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (!shown(i)) continue;
        nvmlProcessInfo_t procs[64];
        unsigned int n = 64;
        if (nvmlDeviceGetComputeRunningProcesses(gpus[i], &n, procs) != NVML_SUCCESS) continue;
        for (unsigned int p = 0; p < n && p < 64; p++) {
            char pname[256] = "N/A", gi[16] = "N/A", ci[16] = "N/A";
            nvmlSystemGetProcessName(procs[p].pid, pname, sizeof(pname));
            if (procs[p].gpuInstanceId != 0xFFFFFFFFu)
                snprintf(gi, sizeof(gi), "%u", procs[p].gpuInstanceId);
            if (procs[p].computeInstanceId != 0xFFFFFFFFu)
                snprintf(ci, sizeof(ci), "%u", procs[p].computeInstanceId);
            printf("|  %3u   %3s  %3s  %15u      C   %-34.34s %8lluMiB |\n", i, gi, ci,
                   procs[p].pid, pname, procs[p].usedGpuMemory >> 20);
            any = 1;
        }
    }
    if (!any) printf("|  %-87s|\n", "No running processes found");
    printf("+" RULE "+\n");
}

static int summary(void)
{
    char version[96] = "N/A", cuda_text[16] = "N/A", date[64] = "";
    int cuda = 0;
    for (unsigned int i = 0; i < count; i++) report_lost(i);  /* NVIDIA's prints these first */
    time_t now = time(NULL);
    strftime(date, sizeof(date), "%a %b %e %H:%M:%S %Y", localtime(&now));
    nvmlSystemGetDriverVersion(version, sizeof(version));
    if (nvmlSystemGetCudaDriverVersion(&cuda) == NVML_SUCCESS)
        snprintf(cuda_text, sizeof(cuda_text), "%d.%d", cuda / 1000, cuda % 1000 / 10);
    printf("%s       \n", date);
    printf("+" RULE "+\n");
    printf("| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n", version, version,
           cuda_text);
    printf(GPU_RULE("+"));
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    printf("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n");
    printf("|%41s|%24s|%22s|\n", "", "", "MIG M. ");
    printf("|=========================================+========================+======================|\n");
    int any = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (!shown(i)) continue;
        gpu_block(i);
        any = 1;
    }
    if (!any) printf("|%41s|%24s|%22s|\n" GPU_RULE("+"), "", "", "");
    printf("\n");
    mig_block();
    processes_block();
    return lost_any();
}

static const char *const COMPUTE_MODES[] = {"DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED",
                                             "EXCLUSIVE_PROCESS"};
static const char *const TIMESLICES[] = {"DEFAULT", "SHORT", "MEDIUM", "LONG"};
/* as -l prints them ("Default" read on a real H200; the others in the same case) */
static const char *const TIMESLICE_VALUES[] = {"Default", "Short", "Medium", "Long"};

/* A name (any case) or its number; -1 when it is neither. */
static int choice(const char *text, const char *const *names, int n)
{
    for (int k = 0; k < n; k++)
        if (!strcasecmp(text, names[k]) || (text[0] == '0' + k && text[1] == '\0')) return k;
    return -1;
}

static int mode_arg = -1, timeslice_arg = -1;

/* One line per GPU as NVIDIA's tool prints it (read on an H200, driver 580.159.04: "Compute
 * mode is already set to DEFAULT for GPU 00000000:00:06.0." and "All done."). */
static int set_compute_mode(void)
{
    int rc = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (report_lost(i)) continue;
        if (!shown(i)) continue;
        nvmlPciInfo_t pci;
        nvmlComputeMode_t now;
        nvmlReturn_t r = nvmlDeviceGetPciInfo(gpus[i], &pci);
        if (r == NVML_SUCCESS) r = nvmlDeviceGetComputeMode(gpus[i], &now);
        if (r == NVML_SUCCESS && (int)now == mode_arg) {
            printf("Compute mode is already set to %s for GPU %s.\n", COMPUTE_MODES[mode_arg],
                   pci.busId);
            continue;
        }
        if (r == NVML_SUCCESS) r = nvmlDeviceSetComputeMode(gpus[i], (nvmlComputeMode_t)mode_arg);
        if (r != NVML_SUCCESS) {
            printf("Unable to set the compute mode of GPU %u: %s\n", i, nvmlErrorString(r));
            rc = 3;
            continue;
        }
        printf("Set compute mode to %s for GPU %s.\n", COMPUTE_MODES[mode_arg], pci.busId);
    }
    if (rc == 0) rc = lost_any();
    printf("All done.\n");
    return rc;
}

/* compute-policy: the wording of these lines was not read on real hardware (docs/nvidia-smi.md);
 * the exit codes are what callers (NVIDIA's plugin) look at. */
static int timeslice_command(void)
{
    int rc = 0, listed = 0;
    for (unsigned int i = 0; i < count; i++) {
        if (report_lost(i)) continue;
        if (!shown(i)) continue;
        nvmlPciInfo_t pci;
        unsigned int now = 0;
        nvmlReturn_t r = nvmlDeviceGetPciInfo(gpus[i], &pci);
        if (r == NVML_SUCCESS && timeslice_arg >= 0)
            r = fakegpu_device_set_timeslice(gpus[i], (unsigned int)timeslice_arg);
        if (r == NVML_SUCCESS) r = fakegpu_device_timeslice(gpus[i], &now);
        if (r != NVML_SUCCESS) {
            printf("Unable to %s the compute policy of GPU %u: %s\n",
                   timeslice_arg >= 0 ? "set" : "read", i, nvmlErrorString(r));
            rc = 3;
            continue;
        }
        if (timeslice_arg >= 0) {
            printf("Set timeslice to %s for GPU %s.\n", TIMESLICES[now], pci.busId);
            continue;
        }
        if (!listed++)  /* -l: the real one's box (an H200, driver 580.159.04) */
            printf("+-------------------------------------+\n"
                   "| GPU compute policies:               |\n"
                   "| GPU     Name           Value        |\n"
                   "|=====================================|\n");
        printf("|%4u   Timeslice       %-14s|\n", i, TIMESLICE_VALUES[now]);
    }
    if (listed) printf("+-------------------------------------+\n");
    if (rc == 0) rc = lost_any();
    if (timeslice_arg >= 0) printf("All done.\n");
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: nvidia-smi [-i ID[,ID...]] [-L | -q | --query-gpu=F,... "
                    "--format=csv[,noheader][,nounits]] | --version | topo -m | "
                    "mig -lgi | -lci | -lgip | -lgipp | -c MODE | "
                    "compute-policy [-i ID] --set-timeslice N | -l\n");
    return 2;
}

/* Opens NVML, applies -i, runs one command, closes NVML. */
static int run(int (*command)(void), const char *ids)
{
    int rc = open_nvml();
    if (rc == 0 && ids != NULL) rc = select_ids(ids);
    if (rc == 0) rc = command();
    nvmlShutdown();
    return rc;
}

static const char *query, *format;

static int query_command(void)
{
    return query_gpu(query, format);
}

static int lgi(void) { return mig_list(0); }
static int lci(void) { return mig_list(1); }
static int lgip(void) { return mig_profiles(0); }
static int lgipp(void) { return mig_profiles(1); }

/* nvidia-smi compute-policy [-i ID] (--set-timeslice N | -l | -h) */
static int compute_policy(int argc, char **argv)
{
    const char *ids = NULL;
    int list = 0;
    for (int i = 2; i < argc; i++) {
        const char *value = NULL;
        if ((!strcmp(argv[i], "-i") || !strcmp(argv[i], "--id")) && i + 1 < argc) ids = argv[++i];
        else if (!strncmp(argv[i], "--id=", 5)) ids = argv[i] + 5;
        else if (!strcmp(argv[i], "-l") || !strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--set-timeslice") && i + 1 < argc) value = argv[++i];
        else if (!strncmp(argv[i], "--set-timeslice=", 16)) value = argv[i] + 16;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("nvidia-smi compute-policy [-i ID[,ID...]] --set-timeslice N | -l\n"
                   "  --set-timeslice N  the time slice of the GPUs' scheduler: 0 DEFAULT, "
                   "1 SHORT, 2 MEDIUM, 3 LONG\n"
                   "  -l, --list         each GPU's time slice\n");
            return 0;
        } else return usage();
        if (value != NULL && (timeslice_arg = choice(value, TIMESLICES, 4)) < 0) {
            fprintf(stderr, "Invalid timeslice \"%s\": expected 0 (DEFAULT), 1 (SHORT), "
                            "2 (MEDIUM) or 3 (LONG)\n", value);
            return 2;
        }
    }
    if (list == (timeslice_arg >= 0)) return usage();  /* exactly one of the two */
    return run(timeslice_command, ids);
}

int main(int argc, char **argv)
{
    const char *ids = NULL, *mode = NULL;
    int list = 0, full = 0;
    if (argc >= 2 && !strcmp(argv[1], "topo")) {
        if (argc != 3 || strcmp(argv[2], "-m")) return usage();
        return run(topo, NULL);
    }
    if (argc >= 2 && !strcmp(argv[1], "mig")) {
        if (argc != 3) return usage();
        if (!strcmp(argv[2], "-lgi")) return run(lgi, NULL);
        if (!strcmp(argv[2], "-lci")) return run(lci, NULL);
        if (!strcmp(argv[2], "-lgip")) return run(lgip, NULL);
        if (!strcmp(argv[2], "-lgipp")) return run(lgipp, NULL);
        return usage();
    }
    if (argc == 2 && !strcmp(argv[1], "--version")) return run(versions, NULL);
    if (argc >= 2 && !strcmp(argv[1], "compute-policy")) return compute_policy(argc, argv);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-L") || !strcmp(argv[i], "--list-gpus")) list = 1;
        else if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--query")) full = 1;
        else if (!strncmp(argv[i], "--query-gpu=", 12)) query = argv[i] + 12;
        else if (!strncmp(argv[i], "--format=", 9)) format = argv[i] + 9;
        else if ((!strcmp(argv[i], "-i") || !strcmp(argv[i], "--id")) && i + 1 < argc)
            ids = argv[++i];
        else if (!strncmp(argv[i], "--id=", 5)) ids = argv[i] + 5;
        else if (!strncmp(argv[i], "-i", 2) && argv[i][2] != '\0') ids = argv[i] + 2;
        else if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--compute-mode")) && i + 1 < argc)
            mode = argv[++i];
        else if (!strncmp(argv[i], "--compute-mode=", 15)) mode = argv[i] + 15;
        else return usage();
    }
    if (mode != NULL && (mode_arg = choice(mode, COMPUTE_MODES, 4)) < 0) {
        fprintf(stderr, "Invalid compute mode \"%s\": expected DEFAULT, EXCLUSIVE_THREAD, "
                        "PROHIBITED or EXCLUSIVE_PROCESS (or 0-3)\n", mode);
        return 2;
    }
    if (list + full + (query != NULL) + (mode != NULL) > 1) return usage();
    return run(list ? list_gpus : full ? query_all : query ? query_command
               : mode ? set_compute_mode : summary, ids);
}
