"Capability probing: measured by trying, on this host and over SSH; nothing left behind."
import os, re, shlex, subprocess, pytest
from researchkit.core import current_run_id, NotMeasurable
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import LocalNode
from researchkit.testbed.capabilities import probe, Capabilities, Cap, AREAS, LINK_TRIES, BPF_PROG_TYPES, TOOLS
from _ssh_fixtures import ssh_hosts, ssh_host  # noqa: F401  (fixtures)

# Expectations measured on the reference VM described in /work/shared/PLATFORM.md (Firecracker, kernel 6.18,
# /dev/kvm backed by kvm_pvm). Elsewhere the host-independent checks below still run.
REFERENCE_HOST = os.uname().release.startswith('6.18.') and os.path.isdir('/sys/module/kvm_pvm')
reference = pytest.mark.skipif(not REFERENCE_HOST, reason='expectations of the reference VM (PLATFORM.md)')


def our_namespaces():
    out = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    return {l.split()[0] for l in out.splitlines() if l.startswith(current_run_id())}


@pytest.fixture(scope='module')
def local_caps():
    before = our_namespaces()
    caps = probe(LocalNode('probe-local'), refresh=True)
    assert our_namespaces() == before, 'probing left a namespace behind'
    return caps


def test_every_row_is_measured(local_caps):
    assert {r.area for r in local_caps.rows} == set(AREAS)
    items = {r.item for r in local_caps.rows}
    assert {i for i, *_ in LINK_TRIES} <= items and set(BPF_PROG_TYPES) <= items and set(TOOLS) <= items
    assert {'cores', 'cpu-model', 'hw-virt', 'kvm', 'netns', 'tbf', 'htb', 'netem', 'clsact', 'tc-bpf', 'openvswitch',
            'sriov', 'bpf-lsm', '8021q', 'bridge-vlan-filtering'} <= items
    assert 'vlan' not in local_caps   # one name per device kind: 8021q (a vlan device), bridge-vlan-filtering (a filtering bridge)
    for r in local_caps.rows:
        assert r.detail.strip(), f'{r.item}: no detail'
        if not r.available: assert local_caps.reason(f'{r.area}.{r.item}') == r.detail
    assert int(local_caps.detail('cores')) == os.cpu_count()


def test_probe_agrees_with_an_independent_attempt(local_caps):
    "For each link type, doing it again by hand in our own namespace gives the probe's verdict and error."
    rid = current_run_id(); ns = f"{rid}-tcap"
    with Teardown() as td:
        td.add(f'netns {ns}', lambda: subprocess.run(['ip', 'netns', 'del', ns], capture_output=True),
               undo=f'ip netns del {ns} 2>/dev/null || true')
        subprocess.run(['ip', 'netns', 'add', ns], check=True)
        run = lambda c: subprocess.run(['ip', 'netns', 'exec', ns, 'sh', '-c', c], capture_output=True, text=True)
        assert run(f'ip link add {rid}a type veth peer name {rid}b').returncode == 0 or not local_caps.has('veth')
        for item, args, _ in LINK_TRIES[1:]:
            if item == 'macvlan-passthru' and not local_caps.has('macvlan'): continue
            r = run('ip link add ' + args.replace('{p}v0', f'{rid}a').replace('{p}v1', f'{rid}b').format(p=rid + 'x'))
            assert (r.returncode == 0) == local_caps.has(f'network.{item}'), (item, r.stderr, local_caps.detail(item))
            if r.returncode: assert r.stderr.strip().split('\n')[-1] in local_caps.reason(item)
    assert ns not in our_namespaces()


def test_virt_rows_are_consistent(local_caps):
    hw = bool(re.search(r'\b(vmx|svm)\b', open('/proc/cpuinfo').read()))
    assert local_caps.has('hw-virt') == hw
    assert local_caps.has('kvm') <= hw
    if not local_caps.has('kvm'):
        assert 'Kata and KVM VMs cannot run' in local_caps.reason('kvm')


def test_bpf_and_tools(local_caps):
    for t in ('socket_filter', 'sched_cls'):  # loadable on any kernel recent enough for researchkit
        assert local_caps.has(t), local_caps.reason(t)
    for t in BPF_PROG_TYPES:
        if not local_caps.has(t): assert re.search(r'try-load.*E[A-Z]+ \(', local_caps.reason(t)), local_caps.reason(t)
    assert local_caps.detail('bpf-lsm').startswith('active LSMs:') or not local_caps.has('bpf-lsm')
    assert local_caps.has('iperf3') and re.search(r'\b3\.\d+', local_caps.detail('iperf3'))
    assert local_caps.has('tc') and local_caps.has('sshd')


@reference
def test_reference_host_expectations(local_caps):
    c = local_caps
    for item in ('netns', 'veth', 'bridge', 'vxlan', 'macvlan', 'macvlan-passthru', 'tbf', 'htb', 'clsact', 'tc-bpf'):
        assert c.has(item), f'{item}: {c.reason(item)}'
    for item, kind in (('8021q', 'vlan'), ('ipvlan', 'ipvlan'), ('gre', 'gre'), ('gretap', 'gretap'), ('geneve', 'geneve'), ('dummy', 'dummy')):
        assert not c.has(item)
        assert f'type {kind}' in c.reason(item) and 'Error: Unknown device type.' in c.reason(item), c.reason(item)
    assert not c.has('bridge-vlan-filtering') and 'vlan_filtering 1' in c.reason('bridge-vlan-filtering')
    assert not c.has('netem') and 'Specified qdisc kind is unknown' in c.reason('netem')
    assert not c.has('openvswitch') and not c.has('sriov')
    assert not c.has('kvm') and 'kvm_pvm (software)' in c.reason('kvm') and 'no vmx/svm flag' in c.reason('kvm')
    assert not c.has('lsm') and 'EPERM' in c.reason('lsm')
    assert not c.has('tracing') and 'EPERM' in c.reason('tracing')
    for item in ('sched_cls', 'cgroup_sock_addr', 'tracepoint', 'raw_tracepoint', 'socket_filter'):
        assert c.has(item), c.reason(item)
    assert c.has('bpf-lsm') and 'bpf' in c.detail('bpf-lsm')


def test_outputs(local_caps):
    df = local_caps.table()
    assert df.columns == ['node', 'area', 'item', 'available', 'detail'] and df.height == len(local_caps.rows)
    assert Capabilities.from_dict(local_caps.to_dict()).rows == local_caps.rows
    h = local_caps._repr_html_()
    assert 'color:green' in h and ('color:red' in h) == (not all(r.available for r in local_caps.rows))
    s = str(local_caps)
    assert s.splitlines()[0] == 'probe-local' and re.search(r'[✓✗] veth\s', s)
    with pytest.raises(KeyError, match='no such capability'): local_caps.has('warp-drive')
    with pytest.raises(ValueError, match='unknown area'): probe(LocalNode(), areas=('gpu',))
    if not local_caps.has('gre'):
        with pytest.raises(NotMeasurable, match='gre'): local_caps.require('gre', 'gre data path')


def test_cache():
    n = LocalNode('cache-node')
    a = probe(n, areas=('cpu',))
    assert probe(n, areas=('cpu',)) is a and probe(n, areas=('cpu',), refresh=True) is not a
    with pytest.raises(ValueError, match="unknown area 'runtimes'"): probe(n, areas=('runtimes',))   # measured above the testbed layer


def test_probe_over_ssh(ssh_host, local_caps):
    n = ssh_host.ssh_node('probe-remote')
    before = our_namespaces()
    caps = probe(n, areas=('cpu', 'virt', 'network', 'bpf'), refresh=True)
    assert our_namespaces() == before
    assert caps.node == 'probe-remote'
    # the "remote" is this machine's kernel: the verdicts must agree with the local probe
    for r in caps.rows:
        if r.area in ('network', 'bpf', 'virt') and r.item != 'bpf-lsm':
            assert r.available == local_caps.has(f'{r.area}.{r.item}'), (r, local_caps.detail(r.item))
    for item, *_ in LINK_TRIES:
        if not caps.has(item): assert 'ip link add' in caps.reason(item)
    assert caps.has('bpf-lsm') == local_caps.has('bpf-lsm')
    assert int(caps.detail('cores')) == os.cpu_count()
