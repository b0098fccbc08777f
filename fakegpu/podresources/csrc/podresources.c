/* podresources: ask the kubelet's PodResources API (the socket a monitoring agent such as a GPU
 * exporter reads to map devices to pods) what each pod holds, and print the answer as JSON.
 * Written for fakegpu's busybox workload image, which has no Python and no gRPC library: it
 * speaks just enough HTTP/2 (RFC 9113) and gRPC framing for one unary call over a unix socket,
 * and decodes the reply with the message shapes of k8s.io/kubelet/pkg/apis/podresources/v1
 * (field numbers below). Not Kubernetes' code.
 *
 *   podresources [--socket PATH] [--timeout S] list
 *   podresources [--socket PATH] [--timeout S] get NAMESPACE POD
 *   podresources [--socket PATH] [--timeout S] allocatable
 *
 * Output: one JSON object, field names as protojson writes them (lowerCamelCase), empty and
 * absent fields left out. Exit 0 on an answer; 1 with one line on stderr otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_SOCKET "/var/lib/kubelet/pod-resources/kubelet.sock"
#define STREAM 1u

static void die(const char *fmt, const char *arg) {
    fputs("podresources: ", stderr);
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(1);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "podresources: no answer from the kubelet in time\n";
    if (write(2, msg, sizeof msg - 1) < 0) { /* nothing left to report to */ }
    _exit(1);
}

/* --- a growable byte buffer -------------------------------------------------------------- */

typedef struct { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) die("%s", "out of memory");
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_byte(buf *b, uint8_t v) { put(b, &v, 1); }

static void put_varint(buf *b, uint64_t v) {
    while (v >= 0x80) { put_byte(b, (uint8_t)(v | 0x80)); v >>= 7; }
    put_byte(b, (uint8_t)v);
}

/* --- the connection: HTTP/2 frames over the unix socket ---------------------------------- */

static int conn;

static void send_all(const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        ssize_t w = write(conn, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("writing to the kubelet: %s", strerror(errno));
        p += w; n -= (size_t)w;
    }
}

static void recv_all(uint8_t *p, size_t n) {
    while (n) {
        ssize_t r = read(conn, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("reading from the kubelet: %s", strerror(errno));
        if (r == 0) die("%s", "the kubelet closed the connection before answering");
        p += r; n -= (size_t)r;
    }
}

enum { DATA = 0, HEADERS = 1, RST_STREAM = 3, SETTINGS = 4, PING = 6, GOAWAY = 7,
       WINDOW_UPDATE = 8 };
enum { END_STREAM = 0x1, ACK = 0x1, END_HEADERS = 0x4, PADDED = 0x8, PRIORITY = 0x20 };

static void send_frame(uint8_t type, uint8_t flags, uint32_t stream, const void *payload,
                       size_t n) {
    uint8_t h[9] = {(uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n, type, flags,
                    (uint8_t)(stream >> 24), (uint8_t)(stream >> 16), (uint8_t)(stream >> 8),
                    (uint8_t)stream};
    send_all(h, sizeof h);
    if (n) send_all(payload, n);
}

/* HPACK (RFC 7541) string literal without Huffman coding; a 7-bit-prefix length. */
static void hpack_string(buf *b, const char *s) {
    size_t n = strlen(s);
    if (n < 127) { put_byte(b, (uint8_t)n); }
    else { put_byte(b, 127); n -= 127;
           while (n >= 128) { put_byte(b, (uint8_t)(n | 0x80)); n >>= 7; }
           put_byte(b, (uint8_t)n); n = strlen(s); }
    put(b, s, n);
}

/* One unary call: returns the reply message (gRPC framing removed). */
static buf call(const char *socket_path, const char *method, const buf *request) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof addr.sun_path) die("socket path too long: %s", socket_path);
    strcpy(addr.sun_path, socket_path);
    conn = socket(AF_UNIX, SOCK_STREAM, 0);
    if (conn < 0 || connect(conn, (struct sockaddr *)&addr, sizeof addr) < 0)
        die("cannot connect to %s", socket_path);

    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    send_all(preface, sizeof preface - 1);
    send_frame(SETTINGS, 0, 0, NULL, 0);

    buf hdr = {0};
    put_byte(&hdr, 0x83);                                   /* :method POST (static 3) */
    put_byte(&hdr, 0x86);                                   /* :scheme http (static 6) */
    put_byte(&hdr, 0x04); hpack_string(&hdr, method);       /* :path, name static 4 */
    put_byte(&hdr, 0x01); hpack_string(&hdr, "localhost");  /* :authority, name static 1 */
    put_byte(&hdr, 0x0f); put_byte(&hdr, 31 - 15);          /* content-type, name static 31 */
    hpack_string(&hdr, "application/grpc");
    put_byte(&hdr, 0x00); hpack_string(&hdr, "te"); hpack_string(&hdr, "trailers");
    send_frame(HEADERS, END_HEADERS, STREAM, hdr.p, hdr.n);

    buf body = {0};
    uint32_t len = (uint32_t)request->n;
    uint8_t prefix[5] = {0, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                         (uint8_t)len};
    put(&body, prefix, sizeof prefix);
    if (request->n) put(&body, request->p, request->n);
    send_frame(DATA, END_STREAM, STREAM, body.p, body.n);

    buf reply = {0};
    for (;;) {
        uint8_t h[9];
        recv_all(h, sizeof h);
        size_t n = (size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2];
        uint8_t type = h[3], flags = h[4];
        uint32_t stream = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 |
                           h[8]) & 0x7fffffffu;
        uint8_t *payload = malloc(n ? n : 1);
        if (!payload) die("%s", "out of memory");
        recv_all(payload, n);
        if (type == SETTINGS && !(flags & ACK)) {
            send_frame(SETTINGS, ACK, 0, NULL, 0);
        } else if (type == PING && !(flags & ACK)) {
            send_frame(PING, ACK, 0, payload, n);
        } else if (type == GOAWAY) {
            die("%s", "the kubelet sent GOAWAY");
        } else if (type == RST_STREAM && stream == STREAM) {
            die("%s", "the kubelet reset the call");
        } else if (type == DATA && stream == STREAM) {
            size_t off = 0, pad = 0;
            if (flags & PADDED) { pad = n ? payload[0] : 0; off = 1; }
            if (off + pad <= n) put(&reply, payload + off, n - off - pad);
            if (n) {  /* give back what was read, so a long reply never stalls */
                uint8_t inc[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8),
                                  (uint8_t)n};
                send_frame(WINDOW_UPDATE, 0, 0, inc, 4);
                if (!(flags & END_STREAM)) send_frame(WINDOW_UPDATE, 0, STREAM, inc, 4);
            }
        }
        free(payload);
        if (stream == STREAM && (type == DATA || type == HEADERS) && (flags & END_STREAM)) break;
    }
    close(conn);
    /* The trailers' grpc-status is HPACK-coded (Huffman, dynamic table): not decoded here. A
     * failed call carries no message, which is what tells it apart. */
    if (reply.n < 5) die("%s", "the call failed (no reply message; see the kubelet's log)");
    if (reply.p[0] != 0) die("%s", "the reply is compressed, which was not asked for");
    size_t mlen = (size_t)reply.p[1] << 24 | (size_t)reply.p[2] << 16 |
                  (size_t)reply.p[3] << 8 | reply.p[4];
    if (mlen > reply.n - 5) die("%s", "the reply message is truncated");
    buf msg = {0};
    put(&msg, reply.p + 5, mlen);
    return msg;
}

/* --- protobuf decoding by schema, printed as JSON ---------------------------------------- */

typedef struct message message;
typedef struct {
    unsigned num;
    const char *name;
    char kind;  /* 's' string, 'i' int64, 'u' uint64, 'm' message */
    int repeated;
    const message *sub;
} field;
struct message { const field *fields; size_t count; };

#define MSG(name, ...) \
    static const field name##_f[] = {__VA_ARGS__}; \
    static const message name = {name##_f, sizeof name##_f / sizeof name##_f[0]};

MSG(NUMANode, {1, "ID", 'i', 0, NULL})
MSG(TopologyInfo, {1, "nodes", 'm', 1, &NUMANode})
MSG(ContainerDevices, {1, "resourceName", 's', 0, NULL}, {2, "deviceIds", 's', 1, NULL},
    {3, "topology", 'm', 0, &TopologyInfo})
MSG(ContainerMemory, {1, "memoryType", 's', 0, NULL}, {2, "size", 'u', 0, NULL},
    {3, "topology", 'm', 0, &TopologyInfo})
MSG(CDIDevice, {1, "name", 's', 0, NULL})
MSG(ClaimResource, {1, "cdiDevices", 'm', 1, &CDIDevice}, {2, "driverName", 's', 0, NULL},
    {3, "poolName", 's', 0, NULL}, {4, "deviceName", 's', 0, NULL},
    {5, "shareId", 's', 0, NULL})
MSG(DynamicResource, {2, "claimName", 's', 0, NULL}, {3, "claimNamespace", 's', 0, NULL},
    {4, "claimResources", 'm', 1, &ClaimResource})
MSG(ContainerResources, {1, "name", 's', 0, NULL}, {2, "devices", 'm', 1, &ContainerDevices},
    {3, "cpuIds", 'i', 1, NULL}, {4, "memory", 'm', 1, &ContainerMemory},
    {5, "dynamicResources", 'm', 1, &DynamicResource})
MSG(PodResources, {1, "name", 's', 0, NULL}, {2, "namespace", 's', 0, NULL},
    {3, "containers", 'm', 1, &ContainerResources}, {4, "cpuIds", 'i', 1, NULL},
    {5, "memory", 'm', 1, &ContainerMemory})
MSG(ListPodResourcesResponse, {1, "podResources", 'm', 1, &PodResources})
MSG(GetPodResourcesResponse, {1, "podResources", 'm', 0, &PodResources})
MSG(AllocatableResourcesResponse, {1, "devices", 'm', 1, &ContainerDevices},
    {2, "cpuIds", 'i', 1, NULL}, {3, "memory", 'm', 1, &ContainerMemory})

typedef struct { const uint8_t *p, *end; } cursor;

static uint64_t varint(cursor *c) {
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (c->p >= c->end) die("%s", "malformed reply (varint)");
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    die("%s", "malformed reply (varint too long)");
    return 0;
}

/* Skip or read one field; returns 0 at the end. */
static int next_field(cursor *c, unsigned *num, unsigned *wire, cursor *value, uint64_t *scalar) {
    if (c->p >= c->end) return 0;
    uint64_t key = varint(c);
    *num = (unsigned)(key >> 3);
    *wire = (unsigned)(key & 7);
    switch (*wire) {
    case 0: *scalar = varint(c); break;
    case 1: if (c->end - c->p < 8) die("%s", "malformed reply"); c->p += 8; break;
    case 5: if (c->end - c->p < 4) die("%s", "malformed reply"); c->p += 4; break;
    case 2: {
        uint64_t n = varint(c);
        if (n > (uint64_t)(c->end - c->p)) die("%s", "malformed reply (length)");
        value->p = c->p; value->end = c->p + n; c->p += n; break;
    }
    default: die("%s", "malformed reply (wire type)");
    }
    return 1;
}

static void print_string(cursor v) {
    putchar('"');
    for (const uint8_t *p = v.p; p < v.end; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static void print_message(const message *m, cursor msg);

static void print_scalar(const field *f, uint64_t v) {
    if (f->kind == 'i') printf("%lld", (long long)(int64_t)v);
    else printf("%llu", (unsigned long long)v);
}

/* Every occurrence of field f in msg, in order (repeated fields may interleave on the wire;
 * packed numbers arrive as one length-delimited run). */
static int print_field(const field *f, cursor msg, int first) {
    int seen = 0;
    cursor c = msg, v = {0};
    unsigned num, wire;
    uint64_t scalar = 0;
    while (next_field(&c, &num, &wire, &v, &scalar)) {
        if (num == f->num) seen++;
    }
    if (!seen) return 0;
    printf("%s\"%s\":", first ? "" : ",", f->name);
    if (f->repeated) putchar('[');
    int out = 0;
    cursor last = {0};
    uint64_t last_scalar = 0;
    c = msg;
    while (next_field(&c, &num, &wire, &v, &scalar)) {
        if (num != f->num) continue;
        /* a field that is not repeated: the last occurrence wins, as in protobuf */
        if (!f->repeated) { last = v; last_scalar = scalar; continue; }
        if ((f->kind == 'i' || f->kind == 'u') && wire == 2) {
            cursor packed = v;
            while (packed.p < packed.end) {
                printf("%s", out++ ? "," : "");
                print_scalar(f, varint(&packed));
            }
            continue;
        }
        printf("%s", out++ ? "," : "");
        if (f->kind == 's') print_string(v);
        else if (f->kind == 'm') print_message(f->sub, v);
        else print_scalar(f, scalar);
    }
    if (f->repeated) putchar(']');
    else if (f->kind == 's') print_string(last);
    else if (f->kind == 'm') print_message(f->sub, last);
    else print_scalar(f, last_scalar);
    return 1;
}

static void print_message(const message *m, cursor msg) {
    putchar('{');
    int first = 1;
    for (size_t i = 0; i < m->count; i++)
        if (print_field(&m->fields[i], msg, first)) first = 0;
    putchar('}');
}

/* --- command line ------------------------------------------------------------------------- */

static void usage(void) {
    fputs("usage: podresources [--socket PATH] [--timeout S] list | get NAMESPACE POD | "
          "allocatable\n", stderr);
    exit(2);
}

int main(int argc, char **argv) {
    const char *socket_path = DEFAULT_SOCKET;
    unsigned timeout = 10;
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) socket_path = argv[++i];
        else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
            timeout = (unsigned)strtoul(argv[++i], NULL, 10);
        else usage();
    }
    if (i >= argc) usage();
    const char *cmd = argv[i++];
    buf request = {0};
    const char *method;
    const message *reply;
    if (strcmp(cmd, "list") == 0 && i == argc) {
        method = "/v1.PodResourcesLister/List";
        reply = &ListPodResourcesResponse;
    } else if (strcmp(cmd, "allocatable") == 0 && i == argc) {
        method = "/v1.PodResourcesLister/GetAllocatableResources";
        reply = &AllocatableResourcesResponse;
    } else if (strcmp(cmd, "get") == 0 && i + 2 == argc) {
        method = "/v1.PodResourcesLister/Get";
        reply = &GetPodResourcesResponse;
        /* GetPodResourcesRequest{string pod_name = 1; string pod_namespace = 2} */
        put_byte(&request, 0x0a); put_varint(&request, strlen(argv[i + 1]));
        put(&request, argv[i + 1], strlen(argv[i + 1]));
        put_byte(&request, 0x12); put_varint(&request, strlen(argv[i]));
        put(&request, argv[i], strlen(argv[i]));
    } else {
        usage();
        return 2;
    }
    signal(SIGALRM, on_alarm);
    signal(SIGPIPE, SIG_IGN);
    alarm(timeout ? timeout : 10);
    buf msg = call(socket_path, method, &request);
    cursor c = {msg.p, msg.p + msg.n};
    print_message(reply, c);
    putchar('\n');
    return fflush(stdout) == 0 ? 0 : 1;
}
