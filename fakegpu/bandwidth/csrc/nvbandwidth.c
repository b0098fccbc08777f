/* A small nvbandwidth-like program for fake GPUs: a SIMULATION. It moves no data; it reports,
 * for every pair of GPUs of a job, the bandwidth the real hardware is rated for, derived from
 * what NVML shows it (NVLink versions and link states, P2P status, fabric cluster UUID, clique,
 * state and health) and from the job's ComputeDomain (FAKEGPU_COMPUTE_DOMAIN, the IMEX channel
 * FAKEGPU_IMEX_CHANNEL and its device node, and whether the node's IMEX daemon at
 * FAKEGPU_IMEX_DAEMON answers). The rules are fakegpu/bandwidth/model.py's.
 * Not NVIDIA's code.
 *
 * One process per node (rank), MPI style: rank 0 listens on --port, every other rank connects
 * to the first of --peers, sends its GPUs and gets everybody's back (an allgather over the pod
 * network). Each rank then prints one JSON object with its rows of the matrix.
 *
 *   nvbandwidth [--rank R --peers HOST:PORT,...] [--port P] [--node NAME]
 *               [--network-gbps G] [--nic-gbps UUID=GBPS,...] [--link-gbps GEN=GBPS,...]
 *               [--timeout S]
 *
 * --nic-gbps: the link speed of the compute NIC each GPU sends GPUDirect RDMA through (the
 * launcher reads it from the topology's PCIe tree); a GPU not named goes at --network-gbps.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <nvml.h>

#ifndef FG_LINK_TABLE
#error "build with -DFG_LINK_TABLE=\"GEN=GBPS,...\" (fakegpu.bandwidth.program, from the catalog)"
#endif
#ifndef FG_NETWORK_GBPS
#error "build with -DFG_NETWORK_GBPS=N (fakegpu.topology.model.DEFAULT_NETWORK_GBPS_PER_GPU)"
#endif

#define MAX_GPUS 16
#define MAX_RANKS 128
#define MAX_ALL (MAX_GPUS * MAX_RANKS)
#define CHANNEL_DIR "/dev/nvidia-caps-imex-channels"
#define EXIT_USAGE 2
#define EXIT_FAIL 1
#define IMEX_PROBE_MS 500 /* a daemon on the node's pod network answers far sooner */

struct gpu {
    int rank;
    int index;
    char uuid[96];
    char name[96];
    char node[64];
    char domain[64];        /* "-" when none */
    int has_channel;
    int imex_daemon;        /* 1 answers, 0 does not, -1 not told where it is */
    char clique[64];        /* "<clusterUuid>.<cliqueId>" or "-" */
    int fabric_completed;
    int degraded;
    int nvlink_version;
    int links_up;
};

static struct gpu all[MAX_ALL];
static int nall;
static nvmlDevice_t handles[MAX_GPUS];
static int nlocal;
static double link_gbps[16]; /* per NVLink generation, GB/s both directions */
static double network_gbps = FG_NETWORK_GBPS;
static int timeout_s = 60;
static struct nic_rate {
    char uuid[96];
    double gbps;
} nic_rates[MAX_ALL];
static int n_nic_rates;

static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("nvbandwidth: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static void parse_link_table(const char *text)
{
    char *copy = strdup(text), *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        int gen;
        double gbps;
        if (sscanf(item, "%d=%lf", &gen, &gbps) != 2 || gen < 1 || gen > 15 || gbps <= 0)
            die(EXIT_USAGE, "--link-gbps: '%s' is not GEN=GBPS (e.g. 5=100)", item);
        link_gbps[gen] = gbps;
    }
    free(copy);
}

static void parse_nic_rates(const char *text)
{
    char *copy = strdup(text), *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strrchr(item, '='), *end = NULL;
        double gbps = eq ? strtod(eq + 1, &end) : 0;
        size_t len = eq ? (size_t)(eq - item) : 0;
        if (!eq || len == 0 || len >= sizeof(nic_rates[0].uuid) || strpbrk(item, " \"\\") ||
            eq[1] == '\0' || *end != '\0' || gbps <= 0)
            die(EXIT_USAGE, "--nic-gbps: '%s' is not UUID=GBPS (e.g. GPU-...=400)", item);
        if (n_nic_rates == MAX_ALL) die(EXIT_USAGE, "--nic-gbps: more than %d GPUs", MAX_ALL);
        snprintf(nic_rates[n_nic_rates].uuid, sizeof(nic_rates[0].uuid), "%.*s", (int)len, item);
        nic_rates[n_nic_rates++].gbps = gbps;
    }
    free(copy);
}

/* The GPU's compute NIC speed in Gb/s, -1 when --nic-gbps does not name it. */
static double nic_gbps(const struct gpu *g)
{
    for (int i = 0; i < n_nic_rates; i++)
        if (strcmp(nic_rates[i].uuid, g->uuid) == 0) return nic_rates[i].gbps;
    return -1;
}

/* ---- what NVML and the environment show ---- */

static void clique_of(nvmlDevice_t dev, struct gpu *g)
{
    nvmlGpuFabricInfoV_t info;
    memset(&info, 0, sizeof(info));
    info.version = nvmlGpuFabricInfo_v3;
    strcpy(g->clique, "-");
    g->fabric_completed = 1;
    if (nvmlDeviceGetGpuFabricInfoV(dev, &info) != NVML_SUCCESS) return; /* no fabric */
    g->fabric_completed = info.state == NVML_GPU_FABRIC_STATE_COMPLETED;
    unsigned bw = (info.healthMask >> NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW) &
                  NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW;
    g->degraded = bw == NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE;
    const unsigned char *u = info.clusterUuid;
    snprintf(g->clique, sizeof(g->clique),
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x.%u", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15], info.cliqueId);
}

static void links_of(nvmlDevice_t dev, struct gpu *g)
{
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
        nvmlEnableState_t active;
        if (nvmlDeviceGetNvLinkState(dev, l, &active) != NVML_SUCCESS) continue;
        if (active != NVML_FEATURE_ENABLED) continue;
        unsigned version = 0;
        if (nvmlDeviceGetNvLinkVersion(dev, l, &version) == NVML_SUCCESS && version < 16)
            g->nvlink_version = (int)version;
        g->links_up++;
    }
}

static void channel_of(char *domain, size_t size, int *has_channel)
{
    const char *d = getenv("FAKEGPU_COMPUTE_DOMAIN");
    const char *c = getenv("FAKEGPU_IMEX_CHANNEL");
    snprintf(domain, size, "%s", d && *d && !strpbrk(d, " \t\n\"\\") ? d : "-");
    *has_channel = 0;
    /* where the channel device nodes are: NVIDIA's path, unless a test names a directory */
    const char *dir = getenv("FAKEGPU_IMEX_CHANNEL_DIR");
    if (!dir || !*dir) dir = CHANNEL_DIR;
    if (c && *c && strcmp(domain, "-") != 0) {
        char *end;
        long n = strtol(c, &end, 10);
        char path[512];
        snprintf(path, sizeof(path), "%s/channel%ld", dir, n);
        *has_channel = *end == '\0' && n >= 0 && access(path, F_OK) == 0;
    }
}

/* The node's IMEX daemon endpoint, FAKEGPU_IMEX_DAEMON (HOST:PORT or [IPV6]:PORT: the
 * compute-domain plugin puts the daemon pod's there); imex_host empty when not set. */
static char imex_host[256], imex_port[8];

static void imex_daemon_endpoint(void)
{
    const char *ep = getenv("FAKEGPU_IMEX_DAEMON");
    if (!ep || !*ep) return;
    char host[256] = "";
    const char *port = NULL;
    if (ep[0] == '[') {
        const char *end = strchr(ep, ']');
        if (end && end[1] == ':' && end - ep - 1 < (long)sizeof(host)) {
            snprintf(host, sizeof(host), "%.*s", (int)(end - ep - 1), ep + 1);
            port = end + 2;
        }
    } else {
        const char *colon = strchr(ep, ':');
        /* one colon only: a bare IPv6 address would be ambiguous */
        if (colon && strchr(colon + 1, ':') == NULL && colon - ep < (long)sizeof(host)) {
            snprintf(host, sizeof(host), "%.*s", (int)(colon - ep), ep);
            port = colon + 1;
        }
    }
    char *end = NULL;
    long number = port ? strtol(port, &end, 10) : 0;
    if (!*host || !port || !*port || *end != '\0' || number < 1 || number > 65535)
        die(EXIT_USAGE, "FAKEGPU_IMEX_DAEMON: '%s' is not HOST:PORT or [IPV6]:PORT", ep);
    snprintf(imex_host, sizeof(imex_host), "%s", host);
    snprintf(imex_port, sizeof(imex_port), "%ld", number);
}

/* Whether the node's IMEX daemon answers, as a channel user depends on it: something accepts
 * a TCP connection at its endpoint within IMEX_PROBE_MS; -1 when not told where it is. */
static int imex_daemon_answers(void)
{
    if (!*imex_host) return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(imex_host, imex_port, &hints, &res) != 0) return 0;
    int ok = 0;
    for (struct addrinfo *ai = res; ai && !ok; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            ok = 1;
        } else if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int err = 0;
            socklen_t len = sizeof(err);
            ok = poll(&p, 1, IMEX_PROBE_MS) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
        }
        close(fd);
    }
    freeaddrinfo(res);
    return ok;
}

static void read_local(int rank, const char *node)
{
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc != NVML_SUCCESS) die(EXIT_FAIL, "NVML: %s", nvmlErrorString(rc));
    unsigned count = 0;
    if ((rc = nvmlDeviceGetCount_v2(&count)) != NVML_SUCCESS)
        die(EXIT_FAIL, "NVML device count: %s", nvmlErrorString(rc));
    if (count > MAX_GPUS) die(EXIT_FAIL, "%u GPUs, at most %d supported", count, MAX_GPUS);
    char domain[64];
    int has_channel;
    channel_of(domain, sizeof(domain), &has_channel);
    int imex = imex_daemon_answers(); /* once per node: every GPU here shares the daemon */
    for (unsigned i = 0; i < count; i++) {
        struct gpu *g = &all[nall++];
        memset(g, 0, sizeof(*g));
        if ((rc = nvmlDeviceGetHandleByIndex_v2(i, &handles[i])) != NVML_SUCCESS)
            die(EXIT_FAIL, "NVML handle of GPU %u: %s", i, nvmlErrorString(rc));
        g->rank = rank;
        g->index = (int)i;
        nvmlDeviceGetUUID(handles[i], g->uuid, sizeof(g->uuid));
        nvmlDeviceGetName(handles[i], g->name, sizeof(g->name));
        for (char *p = g->name; *p; p++)
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '?';
        snprintf(g->node, sizeof(g->node), "%s", node);
        snprintf(g->domain, sizeof(g->domain), "%s", domain);
        g->has_channel = has_channel;
        g->imex_daemon = imex;
        clique_of(handles[i], g);
        links_of(handles[i], g);
    }
    nlocal = (int)count;
}

/* ---- the allgather: one text line per GPU, "E" at the end ---- */

static void send_line(FILE *f, const struct gpu *g)
{
    fprintf(f, "G %d %d %s %s %s %d %d %s %d %d %d %d %s\n", g->rank, g->index, g->uuid,
            g->node, g->domain, g->has_channel, g->imex_daemon, g->clique, g->fabric_completed,
            g->degraded, g->nvlink_version, g->links_up, g->name);
}

static int read_lines(FILE *f)
{
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        if (strcmp(line, "E\n") == 0) return 0;
        if (nall >= MAX_ALL) return -1;
        struct gpu *g = &all[nall];
        memset(g, 0, sizeof(*g));
        int used = 0;
        if (sscanf(line, "G %d %d %95s %63s %63s %d %d %63s %d %d %d %d %n", &g->rank,
                   &g->index, g->uuid, g->node, g->domain, &g->has_channel, &g->imex_daemon,
                   g->clique, &g->fabric_completed, &g->degraded, &g->nvlink_version,
                   &g->links_up, &used) != 12)
            return -1;
        snprintf(g->name, sizeof(g->name), "%s", line + used);
        g->name[strcspn(g->name, "\n")] = '\0';
        nall++;
    }
    return -1;
}

static FILE *stream(int fd)
{
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    FILE *f = fdopen(fd, "r+");
    if (!f) die(EXIT_FAIL, "fdopen: %s", strerror(errno));
    return f;
}

static void gather_root(int port, int world)
{
    int srv = socket(AF_INET6, SOCK_STREAM, 0), one = 1, zero = 0;
    if (srv < 0) die(EXIT_FAIL, "socket: %s", strerror(errno));
    setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(srv, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)); /* IPv4 peers too */
    struct sockaddr_in6 addr = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                                .sin6_addr = in6addr_any};
    if (bind(srv, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(srv, MAX_RANKS) < 0)
        die(EXIT_FAIL, "listen on port %d: %s", port, strerror(errno));
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(srv, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    FILE *peers[MAX_RANKS];
    for (int i = 1; i < world; i++) {
        int fd = accept(srv, NULL, NULL);
        if (fd < 0)
            die(EXIT_FAIL, "rank 0: %d of %d ranks reached it within %d s (%s)", i, world,
                timeout_s, strerror(errno));
        peers[i] = stream(fd);
        if (read_lines(peers[i]) < 0) die(EXIT_FAIL, "rank 0: a peer sent a malformed list");
    }
    close(srv);
    for (int i = 1; i < world; i++) {
        for (int k = 0; k < nall; k++) send_line(peers[i], &all[k]);
        fputs("E\n", peers[i]);
        fclose(peers[i]);
    }
}

static void gather_peer(const char *root)
{
    char host[256];
    snprintf(host, sizeof(host), "%s", root);
    char *colon = strrchr(host, ':');
    if (!colon) die(EXIT_USAGE, "--peers: '%s' is not HOST:PORT", root);
    *colon = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    time_t deadline = time(NULL) + timeout_s;
    int fd = -1;
    /* rank 0 may start later than this rank: retry until the deadline */
    while (fd < 0) {
        if (getaddrinfo(host, colon + 1, &hints, &res) == 0) {
            fd = socket(res->ai_family, SOCK_STREAM, 0);
            if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
                close(fd);
                fd = -1;
            }
            freeaddrinfo(res);
        }
        if (fd < 0) {
            if (time(NULL) >= deadline)
                die(EXIT_FAIL, "rank 0 at %s not reachable within %d s", root, timeout_s);
            usleep(100 * 1000);
        }
    }
    FILE *f = stream(fd);
    for (int k = 0; k < nall; k++) send_line(f, &all[k]);
    fputs("E\n", f);
    fflush(f);
    nall = 0;
    if (read_lines(f) < 0) die(EXIT_FAIL, "rank 0 sent a malformed or short list");
    fclose(f);
}

static int by_rank(const void *x, const void *y)
{
    const struct gpu *a = x, *b = y;
    return a->rank != b->rank ? a->rank - b->rank : a->index - b->index;
}

/* ---- the figures (fakegpu/bandwidth/model.py states the same rules) ---- */

static double nvlink_speed(const struct gpu *g)
{
    double v = g->links_up * link_gbps[g->nvlink_version & 15] / 2;
    return g->degraded ? v / 2 : v;
}

static double min2(double a, double b) { return a < b ? a : b; }

/* GPUDirect RDMA through the GPU's own NIC, else the topology's network speed per GPU */
static double rdma_gbps(const struct gpu *g)
{
    double nic = nic_gbps(g);
    return nic > 0 ? nic : network_gbps;
}

static const char *pair(const struct gpu *a, const struct gpu *b, double *value)
{
    *value = -1;
    if (a->rank == b->rank && a->index == b->index) return "self";
    if (a->rank == b->rank) {
        nvmlGpuP2PStatus_t st = NVML_P2P_STATUS_UNKNOWN;
        int ok = nvmlDeviceGetP2PStatus(handles[a->index], handles[b->index],
                                        NVML_P2P_CAPS_INDEX_NVLINK, &st) == NVML_SUCCESS &&
                 st == NVML_P2P_STATUS_OK && a->fabric_completed && b->fabric_completed;
        if (!ok) return "pcie";
        *value = min2(nvlink_speed(a), nvlink_speed(b));
        return "nvlink-local";
    }
    int fabric = strcmp(a->clique, "-") != 0 && strcmp(a->clique, b->clique) == 0 &&
                 a->fabric_completed && b->fabric_completed && a->links_up && b->links_up &&
                 strcmp(a->domain, "-") != 0 && strcmp(a->domain, b->domain) == 0 &&
                 a->has_channel && b->has_channel &&
                 /* a channel is usable only while the node's IMEX daemon runs */
                 a->imex_daemon != 0 && b->imex_daemon != 0;
    if (fabric) {
        *value = min2(nvlink_speed(a), nvlink_speed(b));
        return "nvlink-fabric";
    }
    *value = min2(rdma_gbps(a), rdma_gbps(b)) / 8;
    return "network";
}

static void print_json(int rank, int world)
{
    printf("{\"format\": \"fakegpu-nvbandwidth/1\", \"simulation\": true,\n"
           " \"note\": \"simulated by fakegpu: no data was moved; each figure is the rated "
           "one-direction bandwidth of the path NVML shows\",\n"
           " \"unit\": \"GB/s\", \"rank\": %d, \"world\": %d, \"network_gbps_per_gpu\": %g,\n"
           " \"gpus\": [", rank, world, network_gbps);
    for (int k = 0; k < nall; k++) {
        const struct gpu *g = &all[k];
        printf("%s\n  {\"rank\": %d, \"node\": \"%s\", \"index\": %d, \"uuid\": \"%s\", "
               "\"name\": \"%s\", \"clique\": %s%s%s, \"compute_domain\": %s%s%s, "
               "\"imex_channel\": %s, \"imex_daemon\": %s, \"nvlink_version\": %d, "
               "\"links_up\": %d, \"fabric_degraded\": %s, \"nic_gbps\": ", k ? "," : "",
               g->rank, g->node,
               g->index, g->uuid,
               g->name, strcmp(g->clique, "-") ? "\"" : "", strcmp(g->clique, "-") ? g->clique
               : "null", strcmp(g->clique, "-") ? "\"" : "", strcmp(g->domain, "-") ? "\"" : "",
               strcmp(g->domain, "-") ? g->domain : "null", strcmp(g->domain, "-") ? "\"" : "",
               g->has_channel ? "true" : "false",
               g->imex_daemon < 0 ? "null" : g->imex_daemon ? "true" : "false",
               g->nvlink_version, g->links_up,
               g->degraded ? "true" : "false");
        double nic = nic_gbps(g);
        if (nic > 0) printf("%g}", nic);
        else printf("null}");
    }
    printf("],\n \"rows\": [");
    int first = 1;
    for (int i = 0; i < nall; i++) {
        if (all[i].rank != rank) continue;
        printf("%s\n  {\"from\": %d, \"bandwidth\": [", first ? "" : ",", i);
        static char paths[MAX_ALL * 24]; /* ", \"nvlink-fabric\"" per GPU at most */
        paths[0] = '\0';
        for (int j = 0; j < nall; j++) {
            double v;
            const char *p = pair(&all[i], &all[j], &v);
            if (v < 0) printf("%snull", j ? ", " : "");
            else printf("%s%.1f", j ? ", " : "", v);
            strcat(paths, j ? ", \"" : "\"");
            strcat(paths, p);
            strcat(paths, "\"");
        }
        printf("], \"paths\": [%s]}", paths);
        first = 0;
    }
    printf("]}\n");
}

int main(int argc, char **argv)
{
    int rank = 0, port = 29500;
    const char *peers = NULL, *node = getenv("NODE_NAME"), *table = FG_LINK_TABLE;
    char host[64] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            puts("nvbandwidth (fakegpu): a SIMULATION of NVIDIA's nvbandwidth; no data is moved.\n"
                 "usage: nvbandwidth [--rank R --peers HOST:PORT,...] [--port P] [--node NAME]\n"
                 "                   [--network-gbps G] [--nic-gbps UUID=GBPS,...]\n"
                 "                   [--link-gbps GEN=GBPS,...] [--timeout S]");
            return 0;
        }
        if (!v) die(EXIT_USAGE, "%s needs a value (see --help)", a);
        i++;
        if (strcmp(a, "--peers") == 0) { peers = v; continue; }
        if (strcmp(a, "--node") == 0) { node = v; continue; }
        if (strcmp(a, "--link-gbps") == 0) { table = v; continue; }
        if (strcmp(a, "--nic-gbps") == 0) { parse_nic_rates(v); continue; }
        char *end;
        if (strcmp(a, "--rank") == 0) rank = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--port") == 0) port = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--timeout") == 0) timeout_s = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--network-gbps") == 0) network_gbps = strtod(v, &end);
        else die(EXIT_USAGE, "unknown option %s (see --help)", a);
        if (*v == '\0' || *end != '\0') die(EXIT_USAGE, "%s: '%s' is not a number", a, v);
    }
    parse_link_table(table);
    if (network_gbps <= 0) die(EXIT_USAGE, "--network-gbps must be above 0");
    if (port < 1 || port > 65535) die(EXIT_USAGE, "--port must be 1..65535");
    if (timeout_s < 1) die(EXIT_USAGE, "--timeout must be at least 1 second");
    int world = 1;
    const char *root = peers;
    char first[256] = "";
    if (peers && *peers) {
        for (const char *p = peers; *p; p++) world += *p == ',';
        snprintf(first, sizeof(first), "%.*s", (int)strcspn(peers, ","), peers);
        root = first;
    }
    if (world > MAX_RANKS) die(EXIT_USAGE, "--peers: %d ranks, at most %d", world, MAX_RANKS);
    if (rank < 0 || rank >= world) die(EXIT_USAGE, "--rank %d: expected 0..%d", rank, world - 1);
    if (!node || !*node) {
        gethostname(host, sizeof(host) - 1);
        node = host;
    }
    if (strpbrk(node, " \t\n\"\\")) die(EXIT_USAGE, "--node: '%s' has blanks or quotes", node);
    imex_daemon_endpoint();
    fprintf(stderr, "nvbandwidth (fakegpu): SIMULATION, rank %d of %d on %s: figures are the "
                    "rated bandwidth of each path, no data is moved\n", rank, world, node);
    read_local(rank, node);
    if (world > 1 && rank == 0) gather_root(port, world);
    else if (world > 1) gather_peer(root);
    qsort(all, (size_t)nall, sizeof(all[0]), by_rank);
    int ranks_seen = 0;
    for (int k = 0; k < nall; k++) ranks_seen += k == 0 || all[k].rank != all[k - 1].rank;
    if (ranks_seen != world && nall > 0)
        die(EXIT_FAIL, "the allgather saw %d ranks with GPUs, expected %d", ranks_seen, world);
    print_json(rank, world);
    nvmlShutdown();
    return 0;
}
