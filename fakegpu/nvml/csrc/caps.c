/*
 * MIG capability files, written when NVML creates or destroys an instance.
 *
 * The real driver creates /proc/driver/nvidia/capabilities/gpu<m>/mig/gi<g>/access (and
 * .../ci<c>/access) with the instance, so a caller that creates a GPU and compute instance and
 * reads their access files at once (NVIDIA's gpu-kubelet-plugin, dynamic MIG) finds them. Here
 * the NVIDIA host's directory plays that /proc tree: where FAKEGPU_NVML_CAPS_DIR names it, the
 * library writes a file before the create returns and removes it with the destroy. Other
 * processes' changes reach it through the host's poller (cluster/embedded/pluginhost.py), which
 * renders the same files (nvidiahost.py: the minors' layout must stay the same in both).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "caps.h"

/* The nvidia-caps minors (the driver's mig-minors table): 1 config, 2 monitor, then per GPU
 * 15 GPU instances of one access minor followed by 8 compute instances each. */
enum { FIRST_GI_MINOR = 3, GIS_PER_GPU = 15, CIS_PER_GI = 8, CAP_MODE = 0444 };

unsigned int fg_caps_gi_minor(unsigned int gpu_minor, unsigned int gi)
{
    return FIRST_GI_MINOR + gpu_minor * GIS_PER_GPU * (1 + CIS_PER_GI) + gi * (1 + CIS_PER_GI);
}

/* dir of the instance, relative to the caps dir; ci < 0 for the GPU instance itself */
static int instance_dir(char *out, size_t n, unsigned int gpu_minor, unsigned int gi, int ci)
{
    const char *root = getenv("FAKEGPU_NVML_CAPS_DIR");
    if (root == NULL || root[0] != '/') return -1;
    int len = ci < 0 ? snprintf(out, n, "%s/gpu%u/mig/gi%u", root, gpu_minor, gi)
                     : snprintf(out, n, "%s/gpu%u/mig/gi%u/ci%d", root, gpu_minor, gi, ci);
    return len > 0 && (size_t)len < n ? 0 : -1;
}

static void mkdirs(char *path)
{
    for (char *p = strchr(path + 1, '/'); p != NULL; p = strchr(p + 1, '/')) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    mkdir(path, 0755);
}

void fg_caps_write(unsigned int gpu_minor, unsigned int gi, int ci)
{
    char dir[4096], file[4200], tmp[4300];
    if (instance_dir(dir, sizeof(dir), gpu_minor, gi, ci) != 0) return;
    unsigned int minor = fg_caps_gi_minor(gpu_minor, gi) + (ci < 0 ? 0 : 1 + (unsigned int)ci);
    mkdirs(dir);
    snprintf(file, sizeof(file), "%s/access", dir);
    snprintf(tmp, sizeof(tmp), "%s/.access.%ld.tmp", dir, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) return;  /* best effort: the host's poller renders it too */
    /* as the driver writes it; the plugin reads the minor from it */
    fprintf(f, "DeviceFileMinor: %u\nDeviceFileMode: %u\nDeviceFileModify: 1\n", minor, CAP_MODE);
    if (fclose(f) != 0 || chmod(tmp, CAP_MODE) != 0 || rename(tmp, file) != 0) unlink(tmp);
}

void fg_caps_remove(unsigned int gpu_minor, unsigned int gi, int ci)
{
    char dir[4096], file[4200];
    if (instance_dir(dir, sizeof(dir), gpu_minor, gi, ci) != 0) return;
    snprintf(file, sizeof(file), "%s/access", dir);
    unlink(file);
    rmdir(dir);  /* left if anything else is in it */
}
