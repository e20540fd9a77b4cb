// rk-trigger: per-call cost of one hooked system call, in the spirit of the kernel's bench_trigger.
// usage: rk-trigger MODE TARGET WARMUP_S SECONDS [SLICE_MS]
//   getpgid     (TARGET '-')          syscall(getpgid): the floor, no hook of interest
//   open        (TARGET /abs/path)    open(O_RDONLY) + close: file_open / sys_enter_openat
//   udpconnect  (TARGET ip:port)      connect() of one UDP socket: cgroup/connect4|6, socket_connect; sends nothing
//   tcpconnect  (TARGET ip:port)      socket + connect + close to a closed port: ECONNREFUSED expected
// Prints one JSON line: calls, per-errno counts, the calls and ns of every 1-s interval of the measured phase, and of every
// SLICE_MS slice it is made of (default 10 ms; 0: no slices): interference only adds time to a slice, so the fastest slices
// show the call's own cost.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAXIV 4096
#define MAXERR 256

static long long now_ns(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int mode_id; static const char *path;
static struct sockaddr_storage sa; static socklen_t salen; static int udp_fd = -1;
static unsigned long long errs[MAXERR];

static int parse_addr(const char *s) {
    char host[128]; const char *colon; int port;
    if (s[0] == '[') {
        const char *e = strchr(s, ']'); if (!e || e[1] != ':') return -1;
        if ((size_t)(e - s - 1) >= sizeof host) return -1;
        memcpy(host, s + 1, e - s - 1); host[e - s - 1] = 0; port = atoi(e + 2);
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa; memset(a, 0, sizeof *a);
        a->sin6_family = AF_INET6; a->sin6_port = htons(port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1) return -1;
        salen = sizeof *a;
    } else {
        colon = strrchr(s, ':'); if (!colon || (size_t)(colon - s) >= sizeof host) return -1;
        memcpy(host, s, colon - s); host[colon - s] = 0; port = atoi(colon + 1);
        struct sockaddr_in *a = (struct sockaddr_in *)&sa; memset(a, 0, sizeof *a);
        a->sin_family = AF_INET; a->sin_port = htons(port);
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1) return -1;
        salen = sizeof *a;
    }
    return port > 0 && port < 65536 ? 0 : -1;
}

static inline void one_call(void) {
    int rc = 0, fd;
    switch (mode_id) {
    case 0: rc = (int)syscall(SYS_getpgid, 0); break;
    case 1: fd = open(path, O_RDONLY | O_CLOEXEC); if (fd >= 0) close(fd); rc = fd; break;
    case 2: rc = connect(udp_fd, (struct sockaddr *)&sa, salen); break;
    case 3:
        fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) { rc = -1; break; }
        rc = connect(fd, (struct sockaddr *)&sa, salen);
        { int e = errno; close(fd); errno = e; }
        break;
    }
    if (rc < 0) errs[errno < MAXERR ? errno : 0]++;
}

int main(int argc, char **argv) {
    static const char *modes[] = {"getpgid", "open", "udpconnect", "tcpconnect"};
    if (argc != 5 && argc != 6) { fprintf(stderr, "usage: %s MODE TARGET WARMUP_S SECONDS [SLICE_MS]\n", argv[0]); return 2; }
    mode_id = -1;
    for (int i = 0; i < 4; i++) if (!strcmp(argv[1], modes[i])) mode_id = i;
    if (mode_id < 0) { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
    int warm = atoi(argv[3]), secs = atoi(argv[4]);
    int slice_ms = argc == 6 ? atoi(argv[5]) : 10;
    if (warm < 0 || secs < 1 || secs > MAXIV) { fprintf(stderr, "bad WARMUP_S or SECONDS\n"); return 2; }
    if (slice_ms < 0 || slice_ms > 1000) { fprintf(stderr, "bad SLICE_MS (0..1000)\n"); return 2; }
    if (mode_id == 1) path = argv[2];
    if (mode_id >= 2 && parse_addr(argv[2])) { fprintf(stderr, "bad address %s (ip:port or [ip6]:port)\n", argv[2]); return 2; }
    if (mode_id == 2 && (udp_fd = socket(sa.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) { perror("socket"); return 3; }

    static unsigned long long iv_calls[MAXIV]; static long long iv_ns[MAXIV];
    long long slice_ns = slice_ms ? slice_ms * 1000000LL : 1000000000LL;
    size_t max_sl = (size_t)secs * (1000000000LL / slice_ns + 2), nsl = 0;
    unsigned long long *sl_calls = malloc(max_sl * sizeof *sl_calls); long long *sl_ns = malloc(max_sl * sizeof *sl_ns);
    if (!sl_calls || !sl_ns) { perror("malloc"); return 3; }
    long long t = now_ns(), end_warm = t + warm * 1000000000LL;
    while (now_ns() < end_warm) for (int i = 0; i < BATCH; i++) one_call();
    memset(errs, 0, sizeof errs);
    unsigned long long total = 0;
    for (int iv = 0; iv < secs; iv++) {
        long long t0 = now_ns(), stop = t0 + 1000000000LL, t1 = t0; unsigned long long n = 0;
        do {   // slices until the second is over: each its own calls and ns
            long long s0 = t1, s_stop = s0 + slice_ns; unsigned long long k = 0;
            do { for (int i = 0; i < BATCH; i++) one_call(); k += BATCH; } while ((t1 = now_ns()) < s_stop && t1 < stop);
            if (nsl < max_sl) { sl_calls[nsl] = k; sl_ns[nsl] = t1 - s0; nsl++; }
            n += k;
        } while (t1 < stop);
        iv_calls[iv] = n; iv_ns[iv] = t1 - t0; total += n;
    }
    printf("{\"mode\":\"%s\",\"target\":\"%s\",\"warmup_s\":%d,\"seconds\":%d,\"calls\":%llu,\"errors\":{",
           argv[1], mode_id ? argv[2] : "-", warm, secs, total);
    int first = 1;
    for (int e = 0; e < MAXERR; e++) if (errs[e]) {
        const char *name = e ? strerrorname_np(e) : NULL;
        if (name) printf("%s\"%s\":%llu", first ? "" : ",", name, errs[e]);
        else printf("%s\"E%d\":%llu", first ? "" : ",", e, errs[e]);
        first = 0;
    }
    printf("},\"intervals\":[");
    for (int iv = 0; iv < secs; iv++) printf("%s[%llu,%lld]", iv ? "," : "", iv_calls[iv], iv_ns[iv]);
    printf("],\"slice_ms\":%d,\"slices\":[", slice_ms);
    if (slice_ms) for (size_t s = 0; s < nsl; s++) printf("%s[%llu,%lld]", s ? "," : "", sl_calls[s], sl_ns[s]);
    printf("]}\n");
    return 0;
}
