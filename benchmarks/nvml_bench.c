/* NVML calls per second from C through the fake libnvidia-ml.so.1 (see nvml_bench.py). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <nvml.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    if (nvmlInit_v2() != NVML_SUCCESS) return 1;
    unsigned count = 0;
    nvmlDeviceGetCount_v2(&count);
    nvmlDevice_t dev;
    nvmlDeviceGetHandleByIndex_v2(0, &dev);
    char name[96];
    nvmlMemory_t mem;
    unsigned cur, pend;
    double t0 = now();
    for (long i = 0; i < n; i++) nvmlDeviceGetHandleByIndex_v2((unsigned)i % count, &dev);
    double t1 = now();
    for (long i = 0; i < n; i++) nvmlDeviceGetName(dev, name, sizeof(name));
    double t2 = now();
    for (long i = 0; i < n; i++) nvmlDeviceGetMemoryInfo(dev, &mem);
    double t3 = now();
    for (long i = 0; i < n; i++) nvmlDeviceGetMigMode(dev, &cur, &pend);
    double t4 = now();
    printf("{\"GetHandleByIndex\": %.0f, \"GetName\": %.0f, \"GetMemoryInfo\": %.0f, "
           "\"GetMigMode\": %.0f}\n", n / (t1 - t0), n / (t2 - t1), n / (t3 - t2), n / (t4 - t3));
    nvmlShutdown();
    return 0;
}
