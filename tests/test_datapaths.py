"Tests of researchkit.networks.datapaths: every data path × placement builds, carries TCP through its devices, and leaves nothing."
import os, sys, json, time, signal, subprocess, pytest
from researchkit.core import ConfigError, current_run_id, new_run_id
from researchkit.teardown import Teardown, reap
from researchkit.networks.datapaths import Topology, DATAPATHS, PLACEMENTS, Host
from researchkit.networks.netdev import link_stats, link_info, kind_of
from researchkit.networks import tcbpf
from _net_fixtures import tcp_bytes, all_pairs, leftovers, SERVER

MTU = {'flannel-vxlan': 1450, 'ovs-vxlan': 1450, 'ovs-gre': 1462}

@pytest.fixture
def td():
    with Teardown() as t: yield t

def _tx(node, dev): return link_stats(node, dev)['tx_bytes']
def _rx(node, dev): return link_stats(node, dev)['rx_bytes']

def _path_devices(t):
    "(node, dev, 'rx'|'tx') whose counters must grow when pod0 sends to pod1 over this path."
    h0, two = t.hosts[0].node, t.placement == 'different-host'
    d = {'bridge': [(h0, t.dev('v0'), 'rx')] + ([(h0, t.wire, 'tx')] if two else []),
         'flannel-vxlan': [(h0, t.dev('v0'), 'rx')] + ([(h0, t.dev('flan'), 'tx')] if two else []),
         'ovs-vxlan': [(h0, t.dev('v0'), 'rx')] + ([(h0, t.dev('vx'), 'tx')] if two else []),
         'ovs-vlan': [(h0, t.dev('v0'), 'rx')] + ([(h0, t.wire, 'tx')] if two else []),
         'ovs-gre': [(h0, t.dev('v0'), 'rx')] + ([(h0, t.wire, 'tx')] if two else []),   # the GRE port's own tx is bypassed by the redirect: BPF counters prove it
         'macvlan': [(t.pods[0].node, 'eth0', 'tx')] + ([(h0, t.wire, 'tx')] if two else []),
         'ipvlan': [(h0, t.dev('v0'), 'rx')] + ([(h0, t.wire, 'tx')] if two else []),
         'sriov': [(h0, t.dev('u0'), 'rx')] + ([(h0, t.wire, 'tx')] if two else [])}
    return d[t.datapath]

@pytest.mark.parametrize('placement', PLACEMENTS)
@pytest.mark.parametrize('datapath', list(DATAPATHS))
def test_datapath_carries_tcp_through_its_devices(datapath, placement, td):
    t = Topology(datapath, placement=placement, teardown=td).up()
    a, b = t.pods
    assert (a.host, b.host) == ((0, 1) if placement == 'different-host' else (0, 0))
    for p in (a, b):   # eth0 with the pod address and the path's MTU
        info = link_info(p.node, 'eth0')
        assert info['mtu'] == MTU.get(datapath, 1500) == p.mtu
        assert p.ip in p.node.run('ip -br addr show dev eth0').stdout
    devs = _path_devices(t)
    before = [(_rx if w == 'rx' else _tx)(n, d) for n, d, w in devs]
    bpf_before = [x.counters()['packets'] for x in t.attachments]
    assert tcp_bytes(b.node, a.node, b.ip, n=1_000_000) == 1_000_000
    after = [(_rx if w == 'rx' else _tx)(n, d) for n, d, w in devs]
    for (n, d, w), x, y in zip(devs, before, after):
        assert y - x >= 1_000_000, f'{d} on {n.name}: {w} grew by {y - x} bytes only'
    for x, c in zip(t.attachments, bpf_before):
        if x.program in ('vlan_push', 'vlan_pop') and x.dev not in (t.dev('v0'), t.dev('v1')): continue
        assert x.counters()['packets'] > c, f'{x.program} on {x.dev} saw no packets'
    # the devices really are what the path says
    eth0 = kind_of(link_info(a.node, 'eth0'))
    assert eth0 == {'macvlan': 'macvlan', 'sriov': 'macvlan'}.get(datapath, 'veth')
    if datapath == 'sriov': assert link_info(a.node, 'eth0')['linkinfo']['info_data']['mode'] == 'passthru'
    if datapath == 'ipvlan': assert f'{a.ip}/32' in a.node.run('ip -br addr show dev eth0').stdout
    if datapath in ('bridge', 'ovs-vlan', 'ovs-gre', 'ovs-vxlan'):
        assert link_info(t.hosts[0].node, t.dev('v0'))['master'] == t.dev('br')
    if datapath == 'ovs-vlan': assert {x.program for x in t.attachments} == {'vlan_push', 'vlan_pop'}
    if datapath == 'ovs-gre' and placement == 'different-host':
        assert {x.program for x in t.attachments} == {'gre_encap', 'gre_decap'}
    d = t.describe()
    assert d['datapath'] == datapath and d['variant'] == DATAPATHS[datapath].variant(t.caps, t.hosts) and d['pod_mtu'] == a.mtu
    assert json.dumps(d) and '<table>' in t._repr_html_()
    t.down(); t.down()                                  # idempotent
    assert leftovers(t.tag) == []

SNIFF = ("import socket,sys,time;s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW,socket.htons(3));s.bind((sys.argv[2],0));s.settimeout(0.5)\n"
         "end=time.time()+float(sys.argv[1]);gre=other=0\n"
         "while time.time()<end:\n try: f=s.recv(65535)\n except OSError: continue\n"
         " if f[12:14]==b'\\x08\\x00' and f[23]==47: gre+=1\n else: other+=1\n"
         "print(gre,other)")

@pytest.mark.exclusive   # the 2 MB must cross the wire within the sniffer's 4 s (it starts after a 0.3-s sleep)
def test_ovs_gre_frames_on_the_wire_are_gre(td):
    t = Topology('ovs-gre', teardown=td).up()
    a, b = t.pods
    sniff = t.hosts[1].node.spawn(['python3', '-c', SNIFF, '4', t.wire])
    time.sleep(0.3)
    assert tcp_bytes(b.node, a.node, b.ip, n=2_000_000) == 2_000_000
    sniff.wait(10)
    gre, other = map(int, sniff.output().split())
    assert gre > 10 and gre > other, (gre, other)

def test_ovs_vlan_isolation(td):
    t = Topology('ovs-vlan', pods=4, vlans=[100, 200, 100, 200], teardown=td).up()
    assert [p.host for p in t.pods] == [0, 0, 1, 1]
    ok = all_pairs(t.pods, timeout=4)   # every blocked pair is tried for the whole timeout (each client's in parallel)
    for (i, j), reach in ok.items():
        assert reach == (t.pods[i].vlan == t.pods[j].vlan), (i, j, reach)

@pytest.mark.parametrize('placement', PLACEMENTS)
@pytest.mark.parametrize('datapath', list(DATAPATHS))
def test_eight_pods_all_reach_each_other(datapath, placement, td):
    t = Topology(datapath, placement=placement, pods=8, teardown=td).up()
    assert [p.host for p in t.pods] == ([0] * 4 + [1] * 4 if placement == 'different-host' else [0] * 8)
    assert len({p.ip for p in t.pods}) == 8 and all(p.ifname == 'eth0' for p in t.pods)
    ok = all_pairs(t.pods)
    assert all(ok.values()), [k for k, v in ok.items() if not v]

@pytest.mark.parametrize('kw, field', [({'datapath': 'ovs'}, 'datapath'), ({'datapath': 'bridge', 'placement': 'same'}, 'placement'),
                                       ({'datapath': 'bridge', 'pods': 1}, 'pods'), ({'datapath': 'bridge', 'pods': '2'}, 'pods'),
                                       ({'datapath': 'bridge', 'wire_rate_mbit': -5}, 'wire_rate_mbit'),
                                       ({'datapath': 'bridge', 'vlans': [100, 100]}, 'vlans'),
                                       ({'datapath': 'ovs-vlan', 'vlans': [100]}, 'vlans')])
def test_bad_config_fails_before_creating_anything(kw, field, td):
    rid = current_run_id()
    before = leftovers(rid)
    dp = kw.pop('datapath')
    with pytest.raises(ConfigError) as e: Topology(dp, teardown=td, **kw).up()
    assert e.value.where == field
    assert leftovers(rid) == before and len(td) == 0
    if field in ('datapath', 'placement'):
        assert ('ovs-vxlan' if field == 'datapath' else 'different-host') in str(e.value)

def test_baseline(td):
    t = Topology('bridge', teardown=td).up()
    srv, cli, ip = t.baseline()
    assert (srv.name, cli.name, ip) == (t.hosts[1].name, t.hosts[0].name, '198.19.0.2')
    assert tcp_bytes(srv, cli, ip, n=500_000) == 500_000
    s = Topology('macvlan', placement='same-host', teardown=td).up()
    srv, cli, ip = s.baseline()
    assert srv is cli and ip == '127.0.0.1' and tcp_bytes(srv, cli, ip, n=500_000) == 500_000

@pytest.mark.parametrize('placement', PLACEMENTS)
def test_no_veth_end_shares_its_peers_index(placement, td):
    """A veth end whose ifindex equals its peer's gets its carrier change batched by linkwatch (up to 1 s): a fresh topology then
    drops its first packets. Every cross-namespace end of the topology has an index different from its peer's."""
    topo = Topology('bridge', placement=placement, pods=3, teardown=td).up()
    seen = 0
    for node in [h.node for h in topo.hosts] + [p.node for p in topo.pods]:
        for l in json.loads(node.run('ip -j link show type veth').stdout or '[]'):
            if 'link_index' in l:
                assert l['ifindex'] != l['link_index'], (node.name, l['ifname'], l['ifindex'])
                seen += 1
    assert seen >= 6 + (2 if placement == 'different-host' else 0)  # 3 pod pairs (+ the wire)

def test_without_capabilities_the_testbed_probe_decides(td):
    "capabilities=None: the testbed's own probe of host 0's machine (one vocabulary, one cache per machine and process)."
    from researchkit.testbed.capabilities import probe
    from researchkit.testbed.nodes import LocalNode
    t = Topology('ovs-vlan', teardown=td).up()
    caps = probe(LocalNode(), areas=('network',))
    assert t.caps is caps
    vf = caps.has('bridge-vlan-filtering')   # what the real OVS-VLAN variant builds; an 802.1Q device (8021q) is not it
    assert t.variant == (DATAPATHS['ovs-vlan'].real if vf else DATAPATHS['ovs-vlan'].standin)
    assert {x.program for x in t.attachments} == (set() if vf else {'vlan_push', 'vlan_pop'})
    assert DATAPATHS['sriov'].variant(caps, t.hosts) == DATAPATHS['sriov'].standin   # our own host namespaces declare no PF

def test_two_topologies_at_once(td):
    t1 = Topology('bridge', teardown=td).up(); t2 = Topology('bridge', teardown=td).up()
    assert t1.tag != t2.tag and t1.hosts[0].name != t2.hosts[0].name
    assert tcp_bytes(t2.pods[1].node, t2.pods[0].node, t2.pods[1].ip, n=100_000) == 100_000

def test_context_manager_and_teardown_cover_down():
    with Teardown() as td:
        with Topology('ovs-vxlan', teardown=td) as t: tag = t.tag
        assert leftovers(tag) == []
        t2 = Topology('macvlan', teardown=td).up(); tag2 = t2.tag
    assert leftovers(tag2) == []

def test_wire_rate_limit_binds(td):
    t = Topology('bridge', wire_rate_mbit=100, teardown=td).up()
    a, b = t.pods
    srv = b.node.spawn(['iperf3', '-s', '-1', '-B', b.ip])
    time.sleep(0.4)
    out = json.loads(a.node.run(['iperf3', '-c', b.ip, '-t', '2', '-J'], timeout=30).stdout)
    srv.stop()
    mbit = out['end']['sum_received']['bits_per_second'] / 1e6
    assert 10 < mbit < 130, mbit

KILLED = """
import time, sys
from researchkit.teardown import Teardown
from researchkit.networks.datapaths import Topology
td = Teardown()
t = Topology(sys.argv[1], teardown=td, pods=4).up()
t.pods[0].node.spawn('sleep 300', teardown=td)
print(t.tag, flush=True)
time.sleep(120)
"""

@pytest.mark.parametrize('datapath', ['ovs-gre', 'flannel-vxlan'])
def test_sigkill_mid_run_then_reap_leaves_nothing(datapath, tmp_path):
    rid = new_run_id()
    env = {**os.environ, 'RESEARCHKIT_RUN_ID': rid}
    p = subprocess.Popen([sys.executable, '-c', KILLED, datapath], stdout=subprocess.PIPE, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        tag = p.stdout.readline().strip()
        assert tag.startswith(rid) and leftovers(rid)            # it is really there
    finally:
        p.send_signal(signal.SIGKILL); p.wait(10)
    undone = reap(rid)
    assert undone and leftovers(rid) == []
