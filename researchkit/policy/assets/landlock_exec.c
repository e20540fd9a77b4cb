/* rk-landlock-exec SPEC -- argv...: restrict this process with a Landlock ruleset read from SPEC, then exec argv.
   SPEC: first line "handled <mask>", then one rule per line "<allowed mask> <absolute path>" (paths as this process sees them). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CREATE_RULESET 444
#define ADD_RULE 445
#define RESTRICT_SELF 446
#define VERSION_FLAG 1u
#define FILE_RIGHTS ((1ull << 0) | (1ull << 1) | (1ull << 2) | (1ull << 14))   /* execute, write, read, truncate */

struct ruleset_attr { uint64_t handled_access_fs, handled_access_net, scoped; };
struct path_beneath { uint64_t allowed_access; int32_t parent_fd; } __attribute__((packed));

static int die(const char *what, int code) { fprintf(stderr, "rk-landlock-exec: %s: %s\n", what, strerror(errno)); return code; }

int main(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--")) { fprintf(stderr, "usage: rk-landlock-exec SPEC -- PROGRAM [ARGS...]\n"); return 125; }
    long abi = syscall(CREATE_RULESET, NULL, 0, VERSION_FLAG);
    if (abi < 1) return die("landlock is not available", 126);
    FILE *f = fopen(argv[1], "r");
    if (!f) return die(argv[1], 125);
    unsigned long long handled = 0;
    if (fscanf(f, "handled %llu\n", &handled) != 1) { fprintf(stderr, "rk-landlock-exec: %s: no 'handled' line\n", argv[1]); return 125; }
    if (abi < 3) handled &= ~(1ull << 14);                 /* TRUNCATE is ABI 3 */
    struct ruleset_attr attr = { .handled_access_fs = handled };
    size_t sz = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;
    int rfd = syscall(CREATE_RULESET, &attr, sz, 0);
    if (rfd < 0) return die("landlock_create_ruleset", 126);
    unsigned long long allow; char path[4096]; int rules = 0, skipped = 0;
    while (fscanf(f, "%llu %4095[^\n]\n", &allow, path) == 2) {
        int fd = open(path, O_PATH | O_CLOEXEC);
        if (fd < 0) { skipped++; continue; }
        struct stat st; fstat(fd, &st);
        struct path_beneath pb = { .allowed_access = allow & handled & (S_ISDIR(st.st_mode) ? ~0ull : FILE_RIGHTS), .parent_fd = fd };
        if (pb.allowed_access && syscall(ADD_RULE, rfd, 1, &pb, 0)) { close(fd); return die(path, 126); }
        close(fd); rules++;
    }
    fclose(f);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return die("prctl(PR_SET_NO_NEW_PRIVS)", 126);
    if (syscall(RESTRICT_SELF, rfd, 0)) return die("landlock_restrict_self", 126);
    close(rfd);
    if (getenv("RK_LANDLOCK_VERBOSE")) fprintf(stderr, "rk-landlock-exec: ABI %ld, %d rules, %d paths missing\n", abi, rules, skipped);
    execvp(argv[3], argv + 3);
    return die(argv[3], 127);
}
