/* NVML calls per CPU-second from C, for any libnvidia-ml.so.1 given by path (see nvml_peers.py).
 *
 * The library is dlopen()ed, so one binary drives fakegpu's library, a peer and the no-op
 * library alike. Each call is repeated in batches until it has used --seconds of this
 * process's CPU time (all threads: a library that works on other threads pays for it too).
 *
 * usage: nvml_calls LIBRARY SECONDS   -> one JSON object {call: calls per CPU-second}
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <nvml.h>

#define BATCH 10000

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *sym(void *lib, const char *name)
{
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "%s: missing\n", name);
        exit(2);
    }
    return f;
}

static nvmlDevice_t dev;
static char text[96];
static nvmlMemory_t mem;
static unsigned cur, pend;

static nvmlReturn_t (*get_handle)(unsigned, nvmlDevice_t *);
static nvmlReturn_t (*get_name)(nvmlDevice_t, char *, unsigned);
static nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned);
static nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t *);
static nvmlReturn_t (*get_mig)(nvmlDevice_t, unsigned *, unsigned *);

static nvmlReturn_t call(int which)
{
    switch (which) {
    case 0: return get_handle(0, &dev);
    case 1: return get_name(dev, text, sizeof(text));
    case 2: return get_uuid(dev, text, sizeof(text));
    case 3: return get_memory(dev, &mem);
    default: return get_mig(dev, &cur, &pend);
    }
}

int main(int argc, char **argv)
{
    static const char *names[] = {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName",
                                  "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo",
                                  "nvmlDeviceGetMigMode"};
    if (argc != 3) {
        fprintf(stderr, "usage: nvml_calls LIBRARY SECONDS\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    double target = atof(argv[2]);
    nvmlReturn_t (*init)(void) = (nvmlReturn_t (*)(void))sym(lib, "nvmlInit_v2");
    get_handle = (nvmlReturn_t (*)(unsigned, nvmlDevice_t *))sym(lib, names[0]);
    get_name = (nvmlReturn_t (*)(nvmlDevice_t, char *, unsigned))sym(lib, names[1]);
    get_uuid = (nvmlReturn_t (*)(nvmlDevice_t, char *, unsigned))sym(lib, names[2]);
    get_memory = (nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t *))sym(lib, names[3]);
    get_mig = (nvmlReturn_t (*)(nvmlDevice_t, unsigned *, unsigned *))sym(lib, names[4]);
    nvmlReturn_t rc = init();
    if (rc != NVML_SUCCESS) {
        fprintf(stderr, "nvmlInit_v2: %d\n", rc);
        return 1;
    }
    printf("{");
    for (int which = 0; which < 5; which++) {
        /* A library that answers an error takes another path than the one measured. */
        rc = call(which);
        if (rc != NVML_SUCCESS) {
            fprintf(stderr, "%s: %d\n", names[which], rc);
            return 1;
        }
        long n = 0;
        double start = cpu_now(), used = 0;
        do {
            for (int i = 0; i < BATCH; i++) call(which);
            n += BATCH;
            used = cpu_now() - start;
        } while (used < target);
        printf("%s\"%s\": %.0f", which ? ", " : "", names[which], n / used);
    }
    printf("}\n");
    return 0;
}
