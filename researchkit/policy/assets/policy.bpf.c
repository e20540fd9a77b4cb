#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#define PATH_LEN 128
#define EPERM_ 1
#define AF_INET_ 2
#define AF_INET6_ 10
enum { C_CONNECT4, C_CONNECT4_DENIED, C_CONNECT6, C_CONNECT6_DENIED, C_SENDMSG4, C_SENDMSG4_DENIED, C_SENDMSG6, C_SENDMSG6_DENIED,
       C_OPENAT_HOST, C_OPENAT, C_OPENAT_MATCHED, C_FILE_OPEN, C_FILE_OPEN_DENIED, C_SOCKET_CONNECT, C_SOCKET_CONNECT_DENIED, C_N };

struct ip6_key { __u32 a[4]; };
struct path_key { char p[PATH_LEN]; };
struct inode_key { __u64 ino; __u32 dev; __u32 pad; };

struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 131072); __type(key, __u32); __type(value, __u8); } rk_deny4 SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 131072); __type(key, struct ip6_key); __type(value, __u8); } rk_deny6 SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 131072); __type(key, struct path_key); __type(value, __u8); } rk_deny_path SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 131072); __type(key, struct inode_key); __type(value, __u8); } rk_deny_inode SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, C_N); __type(key, __u32); __type(value, __u64); } rk_cnt SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_CGROUP_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, __u32); } rk_scope SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, struct path_key); } rk_scratch SEC(".maps");

static __always_inline void count(__u32 i) { __u64 *c = bpf_map_lookup_elem(&rk_cnt, &i); if (c) *c += 1; }
static __always_inline int in_scope(void) { return bpf_current_task_under_cgroup(&rk_scope, 0) == 1; }

static __always_inline int denied4(__u32 a) { return bpf_map_lookup_elem(&rk_deny4, &a) != 0; }
static __always_inline int denied6(struct ip6_key *k) {
    if (k->a[0] == 0 && k->a[1] == 0 && k->a[2] == bpf_htonl(0xffff)) return denied4(k->a[3]);   /* ::ffff:a.b.c.d */
    return bpf_map_lookup_elem(&rk_deny6, k) != 0;
}

/* socket_connect stand-in: cgroup programs on the container's cgroup2 directory (1 allows, 0 fails the call with EPERM) */
SEC("cgroup/connect4") int rk_connect4(struct bpf_sock_addr *ctx) {
    count(C_CONNECT4);
    if (denied4(ctx->user_ip4)) { count(C_CONNECT4_DENIED); return 0; }
    return 1;
}
SEC("cgroup/connect6") int rk_connect6(struct bpf_sock_addr *ctx) {
    struct ip6_key k = {{ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]}};
    count(C_CONNECT6);
    if (denied6(&k)) { count(C_CONNECT6_DENIED); return 0; }
    return 1;
}
SEC("cgroup/sendmsg4") int rk_sendmsg4(struct bpf_sock_addr *ctx) {
    count(C_SENDMSG4);
    if (denied4(ctx->user_ip4)) { count(C_SENDMSG4_DENIED); return 0; }
    return 1;
}
SEC("cgroup/sendmsg6") int rk_sendmsg6(struct bpf_sock_addr *ctx) {
    struct ip6_key k = {{ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3]}};
    count(C_SENDMSG6);
    if (denied6(&k)) { count(C_SENDMSG6_DENIED); return 0; }
    return 1;
}

/* file_open cost stand-in: the same lookup on the openat tracepoint (host-wide, filtered by cgroup; cannot deny) */
struct sys_enter_ctx { __u64 common; long id; unsigned long args[6]; };
SEC("tracepoint/syscalls/sys_enter_openat") int rk_openat(struct sys_enter_ctx *ctx) {
    count(C_OPENAT_HOST);
    if (!in_scope()) return 0;
    count(C_OPENAT);
    __u32 z = 0; struct path_key *k = bpf_map_lookup_elem(&rk_scratch, &z);
    if (!k) return 0;
    __builtin_memset(k, 0, sizeof(*k));
    if (bpf_probe_read_user_str(k->p, PATH_LEN, (const char *)ctx->args[1]) <= 0) return 0;
    if (bpf_map_lookup_elem(&rk_deny_path, k)) count(C_OPENAT_MATCHED);
    return 0;
}

/* The paper's mechanism: BPF LSM programs (CO-RE; load only where the kernel allows LSM programs) */
struct super_block { __u32 s_dev; } __attribute__((preserve_access_index));
struct inode { unsigned long i_ino; struct super_block *i_sb; } __attribute__((preserve_access_index));
struct file { struct inode *f_inode; } __attribute__((preserve_access_index));

SEC("lsm/file_open") int rk_file_open(unsigned long long *ctx) {
    struct file *f = (struct file *)ctx[0]; int ret = (int)ctx[1];
    if (ret) return ret;
    if (!in_scope()) return 0;
    count(C_FILE_OPEN);
    struct inode_key k = {};
    struct inode *ino = BPF_CORE_READ(f, f_inode);
    k.ino = BPF_CORE_READ(ino, i_ino); k.dev = BPF_CORE_READ(ino, i_sb, s_dev);
    if (bpf_map_lookup_elem(&rk_deny_inode, &k)) { count(C_FILE_OPEN_DENIED); return -EPERM_; }
    return 0;
}
SEC("lsm/socket_connect") int rk_sock_connect(unsigned long long *ctx) {
    void *addr = (void *)ctx[1]; int ret = (int)ctx[3];
    if (ret) return ret;
    if (!in_scope()) return 0;
    count(C_SOCKET_CONNECT);
    __u16 fam = 0; bpf_probe_read_kernel(&fam, sizeof(fam), addr);
    int deny = 0;
    if (fam == AF_INET_) { __u32 a = 0; bpf_probe_read_kernel(&a, 4, addr + 4); deny = denied4(a); }
    else if (fam == AF_INET6_) { struct ip6_key k = {}; bpf_probe_read_kernel(&k, 16, addr + 8); deny = denied6(&k); }
    if (deny) { count(C_SOCKET_CONNECT_DENIED); return -EPERM_; }
    return 0;
}
char _license[] SEC("license") = "GPL";
