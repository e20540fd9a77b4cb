"""The cni-net sweeps on a two-host SSH testbed: real sshd hosts (one behind a jump host), pods as namespaces on them,
the data path's wire is the link between the two hosts. Proves the "run it on a testbed that can" path end to end."""
import pathlib, subprocess, yaml
import polars as pl
import pytest
from researchkit.core import current_run_id
from researchkit.teardown import Teardown
from researchkit.testbed.ssh import SSHTestHost
from researchkit.testbed.inventory import load_inventory, Testbed
from researchkit.results.store import ResultStore
from researchkit.studies.campaign import Campaign
from researchkit.studies import cni_net
from researchkit.networks.datapaths import testbed_hosts
from researchkit.networks.topologies import topologies
from researchkit.workloads.webserver import WebServers, check_host

@pytest.fixture(scope='module')
def ssh_testbed(tmp_path_factory):
    d = tmp_path_factory.mktemp('sshbed')
    with Teardown() as td:
        a = SSHTestHost(td); b = SSHTestHost(td, behind=a)
        # the data-plane NIC of each host ("eth1"), apart from the management link ssh uses, as on a real testbed
        da, db = f'{current_run_id()}d1a', f'{current_run_id()}d1b'
        undo = f'ip netns exec {a.netns} ip link del {da} 2>/dev/null || true'
        td.add(f'data link {da}', lambda: subprocess.run(['sh', '-c', undo]), undo=undo)
        subprocess.run(['ip', 'link', 'add', da, 'netns', a.netns, 'type', 'veth', 'peer', 'name', db, 'netns', b.netns], check=True)
        a.node.run(f'ip addr add 198.18.255.1/24 dev {da} && ip link set {da} up')
        b.node.run(f'ip addr add 198.18.255.2/24 dev {db} && ip link set {db} up')
        kh = a.known_hosts(str(d/'known_hosts')); b.known_hosts(kh)
        common = {'kind': 'ssh', 'user': 'root', 'port': 22, 'known_hosts': kh, 'roles': ['host']}
        inv = {'name': 'sshbed', 'description': 'two sshd hosts in namespaces, B reachable only through A',
               'nodes': [{'name': 'hosta', 'host': a.addr, 'key': a.key, **common,
                          'underlay': {'ifname': da, 'ip': '198.18.255.1'}},
                         {'name': 'hostb', 'host': b.addr, 'key': b.key, 'jump': 'hosta', **common,
                          'underlay': {'ifname': db, 'ip': '198.18.255.2'}}]}
        path = d/'sshbed.yaml'; path.write_text(yaml.safe_dump(inv))
        tb = Testbed(load_inventory(path))
        td.callback('close testbed', tb.close)
        yield tb

def test_every_data_path_between_two_ssh_hosts(ssh_testbed, tmp_path):
    tb = ssh_testbed
    assert not tb.is_local and [n.name for n in tb.hosts()] == ['hosta', 'hostb']
    hosts = testbed_hosts(tb)
    assert [(h.underlay_ip is not None, h.underlay_if is not None) for h in hosts] == [(True, True)] * 2
    # a campaign on the SSH testbed like any study's, its data-path inventory and throughput sweep only (the rest of the method is
    # the local smoke's: the same calls)
    run = Campaign('cni-net', profile='smoke', testbed=str(tb.inventory.path), results_dir=tmp_path, figures_dir=tmp_path/'figures', progress=False,
                   params={'datapaths': list(cni_net.DATAPATH_NAMES), 'scenarios': ['BMP2BMP'], 'placements': ['different-host', 'same-host'],
                           'throughput': {'protocols': ['tcp'], 'msg_bytes': [16384], 'seconds': 1}})
    try:
        P = run.P
        topos = topologies(run.testbed, run.teardown)   # the layer gives the SSH variant from the testbed's kind
        n = cni_net.datapath_inventory(run, P, topos)
        s = run.sweep('throughput', cni_net.plan(P)['throughput'], cni_net.measure_fn('throughput', P, topos, run.teardown, testbed=run.testbed))
    finally: run.close()
    assert n == 2 * len(cni_net.DATAPATH_NAMES) * 2 and s.measured == len(cni_net.plan(P)['throughput']) and s.not_measurable == 0
    df = ResultStore(tmp_path).load('cni-net').filter(pl.col('metric') == 'throughput_mbit')
    assert set(df['testbed']) == {'sshbed'} and set(df['hostname']) <= {'vm', *[h.node.facts()['hostname'] for h in hosts]}
    tput = df.group_by('datapath', 'placement').agg(pl.col('value').min())
    assert tput.height == (len(cni_net.DATAPATH_NAMES) + 1) * 2 and (tput['value'] > 10).all()  # every path carried real traffic
    # pods were namespaces on the remote hosts, and none of this run's is left there (the hosts here share one
    # machine, where another researchkit process may hold its own rkXXXX namespaces at the same time)
    for h in tb.hosts():
        left = h.run(f"ip netns list | grep '^{current_run_id()}-' | grep -vc -- '-ssh' || true").stdout.strip()
        assert left == '0', h.run('ip netns list').stdout

def test_runtimes_web_load_generator_and_server_on_two_ssh_hosts(ssh_testbed, tmp_path):
    "runtimes-web's sweep with the container runtime driven over SSH on host A and vegeta on host B, across the data link."
    from researchkit.networks.datapaths import Topology
    from researchkit.runtimes.rootfs import rootfs_image
    from researchkit.studies import runtimes_web as rw
    tb = ssh_testbed
    run = Campaign('runtimes-web', profile='smoke', testbed=str(tb.inventory.path), results_dir=tmp_path, figures_dir=tmp_path/'figures', progress=False,
                   params={'runtimes': ['runc'], 'endpoints': ['cpu', 'io'],
                           'rates': {'cpu': {'log10_from': 0.5, 'log10_to': 0.5}, 'io': {'log10_from': 0, 'log10_to': 0}}})
    try:
        P, (a, b) = run.P, run.testbed.hosts()
        check_host(P, int(a.facts()["cores"]))
        topo = Topology('bridge', placement='different-host', pods=2, teardown=run.teardown, hosts=testbed_hosts(run.testbed)).up()
        servers = WebServers(run.teardown, P, topology=topo, configs=rw.configs(P), image=rootfs_image(node=a))
        assert servers.node is a and servers.client_pod.node.parent is b       # runtime over SSH on A, vegeta on B
        s = run.sweep('load', rw.plan(P)['load'], rw.measure_fn(P, servers))
        cid = servers.inst.id if servers.inst else None
    finally: run.close()
    a = tb.hosts()[0]   # (the campaign's own connections are closed)
    assert s.measured == 2 and s.not_measurable == 0
    df = ResultStore(tmp_path).load('runtimes-web')
    ok = df.filter(pl.col('metric') == 'success_rate')
    assert ok['value'].to_list() == [1.0, 1.0] and set(ok['testbed']) == {'sshbed'}
    assert (df.filter(pl.col('metric') == 'cpu_s_per_request')['value'] > 0).all()
    # the container is gone on the remote host too: none of this process's run (host A shares this machine's runc state, where
    # another xdist worker's containers come and go)
    listed = a.run('runc list -q', check=False).stdout.split()
    assert cid not in listed and not [c for c in listed if c.startswith(f'{current_run_id()}-')], (cid, listed)

def test_lsm_bpf_smoke_on_an_ssh_host_runs_its_policy_there(ssh_testbed, tmp_path):
    "lsm-bpf's smoke profile on host A over SSH: pods, web server, runc containers and the BPF/Landlock policy (held by an agent) all on A."
    import sys, pathlib
    from researchkit.results.store import ResultStore
    from researchkit.policy.bpfprog import bpf_ids
    from _bpf_holders import bpf_leftovers_of
    from _cli import run_ids
    root = pathlib.Path(__file__).resolve().parent.parent
    before = bpf_ids('rk_')
    current_run_id()   # the CLI inherits this process's run id (what it starts itself carries it)
    r = subprocess.run([str(pathlib.Path(sys.executable).parent/'researchkit'), 'run', 'lsm-bpf', '--profile', 'smoke',
                        '--testbed', str(ssh_testbed.inventory.path), '--results', str(tmp_path/'results'),
                        '--figures', str(tmp_path/'figures'), '--no-progress'], capture_output=True, text=True, cwd=root, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    df = ResultStore(tmp_path/'results').load('lsm-bpf')
    assert set(df['testbed']) == {'sshbed'}
    proof = df.filter(pl.col('experiment') == 'enforcement')
    val = lambda m, metric: proof.filter((pl.col('mechanism') == m) & (pl.col('metric') == metric))['value'][0]
    for m in ('landlock', 'cgroup-connect'):
        assert val(m, 'denied') == 1 and val(m, 'allowed') == 1 and val(m, 'outside_allowed') == 1, m
    lsm = proof.filter((pl.col('mechanism') == 'lsm') & (pl.col('metric') == 'not_measurable'))
    assert lsm.height and lsm['note'].str.contains('on hosta').all() and lsm['note'].str.contains('EPERM').all(), lsm['note'].to_list()
    # nothing of this run stays loaded, nor does its agent's socket stay on host A (another xdist worker's programs and agents
    # come and go meanwhile: a program counts as another run's only when all its holders are; agent sockets are <run id>-policy-*)
    ids = run_ids(r.stderr, records=df['run_id'].unique())
    assert bpf_leftovers_of(before, ids) == {}
    a = ssh_testbed.hosts()[0]
    socks = a.run("ls /run/researchkit-agents/ 2>/dev/null || true").stdout.split()
    assert not [s for s in socks if s.startswith(tuple(f'{rid}-policy' for rid in ids))], socks
