"Tests of researchkit.networks.tcbpf: the programs compile, load, tag/untag, isolate VLANs and carry Ethernet over GRE."
import json, time, struct, pytest
from researchkit.core import current_run_id
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import LocalNode
from researchkit.networks.netdev import add_netns, batch, veth_line
from researchkit.networks import tcbpf
from _net_fixtures import tcp_bytes, leftovers

def test_compile_is_cached():
    o = tcbpf.compile_bpf('gre')
    assert o.read_bytes()[:4] == b'\x7fELF' and tcbpf.compile_bpf('gre') == o
    assert o.parent.name == 'bpf'

def test_cfg_packing():
    assert tcbpf.vlan_cfg(4094) == struct.pack('<I', 4094)
    with pytest.raises(ValueError): tcbpf.vlan_cfg(0)
    c = tcbpf.gre_cfg(saddr='198.19.0.1', daddr='198.19.0.2', smac='02:00:00:00:00:01', out_ifindex=7)
    assert len(c) == 28 and c[:8] == bytes([198, 19, 0, 1, 198, 19, 0, 2]) and c[20:24] == struct.pack('<I', 7)

@pytest.fixture
def wire():
    "Two namespaces joined by a veth, no addresses yet."
    rid = current_run_id()
    with Teardown() as td:
        a, b = add_netns([f'{rid}-tta', f'{rid}-ttb'], teardown=td)
        batch(LocalNode(), [veth_line('w', 'w', a_ns=a.netns, b_ns=b.netns)])
        batch(a, ['link set dev w up']); batch(b, ['link set dev w up'])
        yield a, b
    assert leftovers(f'{rid}-tt') == []

def _vlan(node, vid):
    node.run('tc qdisc del dev w clsact 2>/dev/null; true')
    return tcbpf.attach(node, [('w', 'egress', 'vlan_push', tcbpf.vlan_cfg(vid)), ('w', 'ingress', 'vlan_pop', tcbpf.vlan_cfg(vid))])

def test_vlan_tagging_and_isolation(wire):
    a, b = wire
    batch(a, ['addr add 198.18.220.1/24 dev w']); batch(b, ['addr add 198.18.220.2/24 dev w'])
    pa, pb = _vlan(a, 100), _vlan(b, 100)
    assert tcp_bytes(b, a, '198.18.220.2', n=1_000_000) == 1_000_000
    push, pop = pa[0].counters(), pb[1].counters()
    assert push['packets'] > 0 and pop['bytes'] >= 1_000_000   # (pop may drop stray untagged IPv6 sent before push was attached)
    # frames on the wire really carry the tag: a program popping a different VID drops them all
    pb = _vlan(b, 200)
    assert tcp_bytes(b, a, '198.18.220.2', n=10_000, timeout=2) == 0
    assert pb[1].counters()['dropped'] > 0 and pb[1].counters()['packets'] == 0
    assert {x.program for x in tcbpf.find_attachments(b)} == {'vlan_push', 'vlan_pop'}

SNIFF = ("import socket,sys,time;s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW,socket.htons(3));s.bind(('w',0));s.settimeout(0.5)\n"
         "end=time.time()+float(sys.argv[1]);gre=other=0\n"
         "while time.time()<end:\n try: f=s.recv(65535)\n except OSError: continue\n"
         " if f[12:14]==b'\\x08\\x00' and f[23]==47 and f[36:38]==b'\\x65\\x58': gre+=1\n else: other+=1\n"
         "print(gre,other)")

@pytest.mark.exclusive   # the 2 MB must cross the wire within the sniffer's 4 s (it starts after a 0.3-s sleep)
def test_gre_encap_decap(wire):
    "Inner interfaces g (198.18.221.x) talk through Ethernet-over-GRE on the wire (198.19.0.x)."
    a, b = wire
    for i, n in enumerate((a, b)):
        batch(n, [f'addr add 198.19.0.{i+1}/24 dev w', 'link add name g type veth peer name gp',
                  'link set dev g mtu 1462 up', 'link set dev gp up', f'addr add 198.18.221.{i+1}/24 dev g'])
    idx = lambda n, d: json.loads(n.run(f'ip -j link show dev {d}').stdout)[0]['ifindex']
    mac = lambda n: json.loads(n.run('ip -j link show dev w').stdout)[0]['address']
    att = {}
    for i, (n, o) in enumerate(((a, b), (b, a))):
        att[i] = tcbpf.attach(n, [
            ('g', 'egress', 'gre_encap', tcbpf.gre_cfg(saddr=f'198.19.0.{i+1}', daddr=f'198.19.0.{2-i}', smac=mac(n), dmac=mac(o), out_ifindex=idx(n, 'w'))),
            ('w', 'ingress', 'gre_decap', tcbpf.gre_cfg(saddr=f'198.19.0.{i+1}', in_ifindex=idx(n, 'g')))])
    sniff = b.spawn(['python3', '-c', SNIFF, '4'])
    time.sleep(0.3)
    assert tcp_bytes(b, a, '198.18.221.2', n=2_000_000) == 2_000_000
    sniff.wait(10)
    gre, other = map(int, sniff.output().split())
    assert gre > 10, (gre, other)                      # frames on the wire are IPv4 proto 47, GRE 0x6558
    enc, dec = att[0][0].counters(), att[1][1].counters()
    assert enc['packets'] > 0 and dec['packets'] > 0 and dec['bytes'] >= 2_000_000
    # host traffic on the wire is not touched by the decap program
    before = att[1][1].counters()['passed']
    assert tcp_bytes(b, a, '198.19.0.2', n=100_000) == 100_000
    assert att[1][1].counters()['passed'] > before
