#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV4
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7)
#endif
#define ETH_P_TEB_ 0x6558
#define OUTER_LEN (sizeof(struct iphdr) + 4)          /* outer IPv4 + basic GRE header */

struct gre_cfg { __u32 saddr, daddr; __u8 smac[6], dmac[6]; __u32 out_ifindex, in_ifindex; };
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, struct gre_cfg); } cfg SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 4); __type(key, __u32); __type(value, __u64); } cnt SEC(".maps");

static __always_inline void count(__u32 i, __u64 v) { __u64 *c = bpf_map_lookup_elem(&cnt, &i); if (c) __sync_fetch_and_add(c, v); }
static __always_inline int drop(void) { count(2, 1); return TC_ACT_SHOT; }

/* Egress of the bridge's GRE port: wrap the whole Ethernet frame, send it out of the wire. */
SEC("tc_gre_encap") int gre_encap(struct __sk_buff *skb) {
    __u32 k = 0; struct gre_cfg *c = bpf_map_lookup_elem(&cfg, &k);
    if (!c || !c->out_ifindex) return drop();
    struct ethhdr inner;
    if (bpf_skb_load_bytes(skb, 0, &inner, sizeof(inner))) return drop();
    int len = sizeof(struct ethhdr) + OUTER_LEN;             /* room inserted: outer IP + GRE + (inner) Ethernet */
    if (skb->protocol == bpf_htons(ETH_P_IP) || skb->protocol == bpf_htons(ETH_P_IPV6)) {
        __u64 flags = BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_GRE |
                      BPF_F_ADJ_ROOM_ENCAP_L2(sizeof(struct ethhdr)) | BPF_F_ADJ_ROOM_ENCAP_L2_ETH;
        if (bpf_skb_adjust_room(skb, len, BPF_ADJ_ROOM_MAC, flags)) return drop();
    } else {                                                   /* ARP and the like: small, never GSO */
        if (bpf_skb_change_head(skb, len, 0)) return drop();
    }
    struct ethhdr eth = {}; struct iphdr ip = {}; __be16 gre[2] = {0, bpf_htons(ETH_P_TEB_)};
    __builtin_memcpy(eth.h_dest, c->dmac, 6); __builtin_memcpy(eth.h_source, c->smac, 6);
    eth.h_proto = bpf_htons(ETH_P_IP);
    __u32 tot = skb->len - sizeof(struct ethhdr);
    ip.version = 4; ip.ihl = 5; ip.ttl = 64; ip.protocol = IPPROTO_GRE;
    ip.tot_len = bpf_htons(tot > 0xffff ? 0xffff : tot); ip.frag_off = bpf_htons(0x4000);
    ip.saddr = c->saddr; ip.daddr = c->daddr;
    __u32 sum = 0; __u16 *w = (__u16 *)&ip;
    #pragma unroll
    for (int i = 0; i < 10; i++) sum += w[i];
    sum = (sum & 0xffff) + (sum >> 16); sum = (sum & 0xffff) + (sum >> 16);
    ip.check = ~sum;
    if (bpf_skb_store_bytes(skb, 0, &eth, sizeof(eth), 0) ||
        bpf_skb_store_bytes(skb, sizeof(eth), &ip, sizeof(ip), 0) ||
        bpf_skb_store_bytes(skb, sizeof(eth) + sizeof(ip), gre, sizeof(gre), 0) ||
        bpf_skb_store_bytes(skb, sizeof(eth) + OUTER_LEN, &inner, sizeof(inner), 0)) return drop();
    count(0, 1); count(1, skb->len);
    return bpf_redirect(c->out_ifindex, 0);
}

/* Ingress of the wire: unwrap GRE/TEB frames addressed to us and hand them to the bridge's GRE port. */
SEC("tc_gre_decap") int gre_decap(struct __sk_buff *skb) {
    __u32 k = 0; struct gre_cfg *c = bpf_map_lookup_elem(&cfg, &k);
    if (!c || !c->in_ifindex) return TC_ACT_OK;
    __be16 proto; struct iphdr ip; __be16 gre[2]; struct ethhdr inner;
    if (bpf_skb_load_bytes(skb, 12, &proto, 2) || proto != bpf_htons(ETH_P_IP) ||
        bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &ip, sizeof(ip)) ||
        ip.protocol != IPPROTO_GRE || ip.ihl != 5 || ip.daddr != c->saddr ||
        bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + sizeof(ip), gre, sizeof(gre)) ||
        gre[0] != 0 || gre[1] != bpf_htons(ETH_P_TEB_) ||
        bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + OUTER_LEN, &inner, sizeof(inner))) { count(3, 1); return TC_ACT_OK; }
    if (bpf_skb_adjust_room(skb, -(int)(OUTER_LEN + sizeof(struct ethhdr)), BPF_ADJ_ROOM_MAC, 0)) return drop();
    if (bpf_skb_store_bytes(skb, 0, &inner, sizeof(inner), 0)) return drop();
    count(0, 1); count(1, skb->len);
    return bpf_redirect(c->in_ifindex, BPF_F_INGRESS);
}
char _license[] SEC("license") = "GPL";
