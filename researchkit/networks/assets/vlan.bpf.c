#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, __u32); } cfg SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 4); __type(key, __u32); __type(value, __u64); } cnt SEC(".maps");

static __always_inline void count(__u32 i, __u64 v) { __u64 *c = bpf_map_lookup_elem(&cnt, &i); if (c) __sync_fetch_and_add(c, v); }
static __always_inline int ok(struct __sk_buff *skb) { count(0, 1); count(1, skb->len); return TC_ACT_OK; }
static __always_inline int drop(void) { count(2, 1); return TC_ACT_SHOT; }

SEC("tc_vlan_push") int vlan_push(struct __sk_buff *skb) {
    __u32 k = 0, *vid = bpf_map_lookup_elem(&cfg, &k);
    if (!vid || !*vid) return drop();
    if (bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), *vid & 0xfff)) return drop();
    return ok(skb);
}

SEC("tc_vlan_pop") int vlan_pop(struct __sk_buff *skb) {
    __u32 k = 0, *want = bpf_map_lookup_elem(&cfg, &k), vid;
    if (!want || !*want) return drop();
    if (skb->vlan_present) vid = skb->vlan_tci & 0xfff;
    else {
        __u16 proto, tci;
        if (bpf_skb_load_bytes(skb, 12, &proto, 2) || proto != bpf_htons(ETH_P_8021Q)) return drop();
        if (bpf_skb_load_bytes(skb, 14, &tci, 2)) return drop();
        vid = bpf_ntohs(tci) & 0xfff;
    }
    if (vid != *want) return drop();
    if (bpf_skb_vlan_pop(skb)) return drop();
    return ok(skb);
}
char _license[] SEC("license") = "GPL";
