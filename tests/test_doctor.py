"researchkit.doctor: the testbed probes plus every container runtime, really tried on this machine, and the report with the data paths."
import re, pytest
from researchkit.testbed.inventory import Testbed
from researchkit.testbed.capabilities import probe, AREAS
from researchkit.runtimes.adapters import RUNTIMES
from researchkit.networks.datapaths import DATAPATHS
from researchkit.testbed.tools import FABRIC_TOOLS, go_tools
from researchkit.doctor import doctor, format_doctor


@pytest.fixture(scope='module')
def report():
    with Testbed() as tb:
        caps = doctor(tb, refresh=True)
        node = tb['node0']
        return caps, format_doctor(caps, testbed=tb.name), node


def test_rows_are_the_testbed_probes_plus_the_runtimes(report):
    caps, _, node = report
    assert list(caps) == ['node0']
    c = caps['node0']
    assert c.node == 'node0' and c.has('cores')
    assert list(dict.fromkeys(r.area for r in c.rows)) == ['host', 'cpu', 'virt', 'network', 'bpf', 'runtimes', 'policy', 'tools']
    probe_only = lambda rows: [r for r in rows if r.area not in ('host', 'runtimes', 'policy') and not (r.area == 'tools' and r.item in FABRIC_TOOLS)]
    assert probe_only(c.rows) == probe_only(probe(node).rows)   # the probes, as the testbed measured them (peer/orderer: see below)
    assert {r.area for r in probe(node).rows} == set(AREAS) and 'runtimes' not in AREAS
    rt = [r for r in c.rows if r.area == 'runtimes']
    assert [r.item for r in rt] == list(RUNTIMES) and all(r.detail.strip() for r in rt)


def test_runtimes_are_really_tried(report):
    c = report[0]['node0']
    assert c.has('runtimes.process'), c.reason('runtimes.process')
    assert c.has('runtimes.runc') == c.has('tools.runc')                            # the runc binary here runs a container
    assert c.detail('runc') == c.detail('runtimes.runc') != c.detail('tools.runc')  # a bare name is the runtime row
    if not c.has('kvm'):
        assert not c.has('runtimes.kata') and 'kvm' in c.reason('kata').lower(), c.reason('kata')


def test_policy_mechanisms_are_really_tried(report):
    "One row per policy mechanism; where the kernel refuses LSM programs the row carries the measured errno."
    c = report[0]['node0']
    pol = [r for r in c.rows if r.area == 'policy']
    assert [r.item for r in pol] == ['lsm', 'cgroup-connect', 'landlock', 'tp-openat'] and all(r.detail for r in pol)
    if not c.has('bpf.lsm'): assert not c.has('policy.lsm') and 'EPERM' in c.reason('policy.lsm'), c.reason('policy.lsm')
    assert c.has('policy.cgroup-connect') == c.has('bpf.cgroup_sock_addr')


def test_report_text(report):
    caps, text, _ = report
    c = caps['node0']
    lines = text.splitlines()
    assert lines[0] == 'researchkit doctor — testbed local'
    assert re.search(r'^  runtimes$', text, re.M) and re.search(r'[✓✗] runc\s', text) and re.search(r'[✓✗] 8021q\s', text)
    n_ok = sum(r.available for r in c.rows)
    i = lines.index(f'  {n_ok}/{len(c.rows)} available on node0')
    assert lines[i + 1:i + 3] == ['', 'data paths on node0 (paper name: what is built here)']
    rows = lines[i + 3:]
    assert rows == [f"  {d.name:<14} {d.paper_name + ':':<15} {d.variant(c)}" for d in DATAPATHS.values()]
    vlan = DATAPATHS['ovs-vlan']   # its real variant is what the bridge-vlan-filtering probe measured
    assert any(r.endswith(vlan.real if c.has('bridge-vlan-filtering') else vlan.standin) for r in rows if r.startswith('  ovs-vlan '))


def test_given_the_testbed_the_sriov_line_knows_the_declared_pfs():
    "SR-IOV's real variant needs a NIC with VFs (measured) and every host declared with its PF (inventory)."
    from researchkit.testbed.inventory import inventory_from_dict
    from researchkit.testbed.capabilities import Capabilities, Cap
    inv = inventory_from_dict({'name': 'pf', 'nodes': [{'name': 'a', 'kind': 'ssh', 'host': '192.0.2.1', 'sriov_pf': 'eth2'},
                                                        {'name': 'b', 'kind': 'ssh', 'host': '192.0.2.2'}]})
    vf = lambda n: Capabilities(n, [Cap('network', i, i == 'sriov', 'eth2: 8 VFs' if i == 'sriov' else 'Error: Unknown device type.')
                                    for i in ('bridge-vlan-filtering', 'gretap', 'ipvlan', 'sriov')])
    with Testbed(inv) as tb:
        by_tb, by_name = format_doctor({'a': vf('a'), 'b': vf('b')}, testbed=tb), format_doctor({'a': vf('a'), 'b': vf('b')}, testbed='pf')
    sr = DATAPATHS['sriov']
    line = lambda text, n: next(l for l in text.split(f'data paths on {n} ')[1].splitlines() if l.startswith('  sriov '))
    assert line(by_tb, 'a').endswith(sr.real) and line(by_tb, 'b').endswith(sr.standin)
    assert line(by_name, 'a').endswith(sr.standin)            # by name only, no host is known to declare a PF
    assert by_tb.splitlines()[0] == by_name.splitlines()[0] == 'researchkit doctor — testbed pf'


def test_one_row_per_ledger_tool(report):
    "The pinned Fabric, fabric-ca, rk-load and rk-kv builds close the tools area, one row each, read from `go version -m`."
    caps, text, _ = report
    c = caps['node0']
    rows = [r for r in c.rows if r.item in FABRIC_TOOLS]
    assert [r.item for r in rows] == list(FABRIC_TOOLS) and c.rows[-len(rows):] == rows and {r.area for r in rows} == {'tools'}
    pins = go_tools()
    for r in rows:   # built by `make setup` (tools/install-go-tools) before the tests run
        assert r.available and r.detail.endswith(f"/{pins[r.item].subdir}/{r.item})"), r
    fabric = f"(github.com/hyperledger/fabric {pins['peer'].version}, go1."
    assert c.detail('tools.peer').startswith(f"2.5.0-main-695dd57e {fabric}") and c.detail('tools.orderer').startswith(f"2.5.0-main-695dd57e {fabric}")
    assert c.detail('tools.fabric-ca-server').startswith('v1.5.13 (github.com/hyperledger/fabric-ca v1.5.13, cgo, go1.')
    assert c.detail('tools.rk-load').startswith(f"{pins['rk-load'].key} (github.com/hyperledger/fabric-gateway v1.7.0, ")
    assert re.search(r'^    ✓ peer\s+2\.5\.0-main-695dd57e ', text, re.M) and re.search(r'^    ✓ rk-kv\s+local-[0-9a-f]{12} ', text, re.M)


def test_host_facts_open_each_node(report):
    "The facts records carry to tell hosts apart (kernel release and build, CPU signature, microcode, mitigations, virtualization), as read on the node."
    import os, glob
    from researchkit.results.records import host_facts, mitigations_text
    caps, text, node = report
    c = caps['node0']
    host = {r.item: r for r in c.rows if r.area == 'host'}
    assert list(host) == ['hostname', 'kernel', 'kernel-build', 'cpu-signature', 'microcode', 'mitigations', 'virtualization']
    f = host_facts(node)
    assert c.detail('host.kernel') == f['kernel'] == os.uname().release and c.detail('kernel-build') == os.uname().version
    assert c.detail('microcode') == f['microcode'] or not c.has('microcode') and 'no microcode line' in c.reason('microcode')
    assert c.has('mitigations') == bool(glob.glob('/sys/devices/system/cpu/vulnerabilities/*'))
    if c.has('mitigations'): assert c.detail('mitigations') == mitigations_text(f['mitigations'])
    assert c.has('virtualization') and c.detail('virtualization') == f['virtualization']
    lines = text.splitlines()
    assert lines[2:4] == ['node0', '  host'] and re.search(rf"^    ✓ kernel-build\s+{re.escape(os.uname().version)}$", text, re.M)
