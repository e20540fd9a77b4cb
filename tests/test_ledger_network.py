"""A real Fabric network on the runtime layer, under runc and runsc: up → ready, a transaction committed and read back through
fabric-sdk-py, a live CPU quota on a peer enforced under rk-load's load, down with nothing left; and teardown after an exception
raised once the peers run, after SIGINT to a process running `up()`, and after SIGKILL + `reap()`.
Skips with the measured reason when the Fabric binaries are not built (tools/install-go-tools)."""
import os, sys, glob, json, time, select, signal, subprocess, textwrap, pytest
from researchkit.core import NotMeasurable, current_run_id, new_run_id
from researchkit.teardown import Teardown, Ledger, reap, state_dir
from researchkit.testbed.tools import tool_path
from researchkit.runtimes.adapters import get_runtime
from researchkit.runtimes.container import SCRATCH_ROOT, CGROUP_PARENT
from researchkit.ledger.spec import NetworkSpec, OrgSpec, FABRIC_ROOT, FABRIC_VERSION
from researchkit.ledger.network import Network, NetworkError, sdk_version, SDK_INSTALL

from _fabric_fixtures import fabric_missing as _missing

MISSING = _missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"Fabric not built: {MISSING}")
SMALL = dict(orgs=[OrgSpec('org1')], batch_timeout_s=0.2)   # the smallest real network: 1 CA, 1 orderer, 1 peer, 1 chaincode

# ---- what a run leaves behind -------------------------------------------------------------------
def _listed(prefix:str) -> list[str]:
    out = []
    for rt in ('runc', 'runsc'):
        try: cli = get_runtime(rt)._cli('list', '--format', 'json')
        except NotMeasurable: continue
        r = subprocess.run(['sh', '-c', cli], capture_output=True, text=True)
        try: out += [c['id'] for c in json.loads(r.stdout or '[]') or [] if c['id'].startswith(prefix)]
        except json.JSONDecodeError: pass
    return out

def _procs(rid:str) -> list[str]:
    "Processes whose command line, environment or cgroup names this run's containers or network directory."
    marks = (f'{FABRIC_ROOT}/{rid}-'.encode(), f'{SCRATCH_ROOT}/{rid}-'.encode(), f'{CGROUP_PARENT}/{rid}-'.encode())
    out = []
    for p in os.listdir('/proc'):
        if not p.isdigit() or int(p) == os.getpid(): continue
        try:
            with open(f'/proc/{p}/stat') as f:
                if f.read().rsplit(')', 1)[1].split()[0] == 'Z': continue
            blob = b''.join(open(f'/proc/{p}/{x}', 'rb').read() for x in ('cmdline', 'environ', 'cgroup'))
        except (OSError, IndexError): continue
        if any(m in blob for m in marks): out.append(p + ' ' + open(f'/proc/{p}/cmdline', 'rb').read().replace(b'\0', b' ').decode()[:120])
    return out

def leftovers(rid:str) -> dict:
    "Containers, cgroups, namespaces, overlay mounts, scratch and network directories, and processes of run `rid` still there (the SSH test hosts' own namespaces aside)."
    ns = [n for n in subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout.split() if n.startswith(rid) and '-ssh' not in n]
    left = {'containers': _listed(f'{rid}-'), 'cgroups': glob.glob(f'/sys/fs/cgroup/*{CGROUP_PARENT}/{rid}-*'),
            'netns': ns, 'mounts': [m for l in open('/proc/self/mountinfo') if f'/{rid}-' in (m := l.split()[4]) and '-ssh' not in m],
            'scratch': glob.glob(f'{SCRATCH_ROOT}/{rid}-*'), 'dirs': glob.glob(f'{FABRIC_ROOT}/{rid}-*'), 'processes': _procs(rid)}
    return {k: v for k, v in left.items() if v}

def _wait_gone(rid:str, timeout:float=15) -> dict:
    deadline = time.monotonic() + timeout
    while (left := leftovers(rid)) and time.monotonic() < deadline: time.sleep(0.2)
    return left

# ---- up → ready → sdk → quota → down ---------------------------------------------------------------
def _quota_under_load(net, td, peer='peer0-org1', quota=0.25):
    "A live quota on `peer` while rk-load offers 150 tx/s through it: cpuacct over wall time ≈ quota, and the cgroup was throttled."
    i = net.nodes[peer].instance; cg = i.cgroup('cpu')
    assert net.set_limits(peer, cpus=quota) == [peer]
    assert open(f'{cg}/cpu.cfs_quota_us').read().strip() == str(int(quota * 100_000))
    g = net.gateway(net.nodes[peer].org)
    load = net.client.spawn([tool_path('rk-load'), '-peer', g['peer'], '-tlsca', g['tlsca'], '-msp', g['msp'], '-mspid', g['mspid'],
                             '-channel', g['channel'], '-cc', g['chaincode'], '-rate', '150', '-duration', '5s'], teardown=td, label='rk-load')
    throttled = lambda: int(dict(l.split() for l in open(f'{cg}/cpu.stat'))['nr_throttled'])
    time.sleep(1.5)
    c0, n0, t0 = i.cpu_seconds(), throttled(), time.monotonic()
    time.sleep(2.5)
    c1, n1, t1 = i.cpu_seconds(), throttled(), time.monotonic()
    assert load.wait(60) == 0, load.output()[-1500:]
    summary = json.loads(load.output().strip().splitlines()[-1])
    net.set_limits(peer, cpus=None)
    assert open(f'{cg}/cpu.cfs_quota_us').read().strip() == '-1'
    return (c1 - c0) / (t1 - t0), n1 - n0, summary

@pytest.mark.parametrize('runtime', ['runc', 'runsc'])
@pytest.mark.exclusive   # a live 0.25-core quota measured at 0.22-0.275 cores under rk-load (an unpinned peer)
def test_up_ready_sdk_quota_down(runtime):
    rid, steps = current_run_id(), []
    with Teardown() as td:
        net = Network(NetworkSpec(runtime=runtime, batch_timeout_s=0.2), teardown=td, on_step=lambda s, t: steps.append((s, t)))
        net.up(timeout=150)
        print(f"\n{runtime} up {net.timings['up']:.2f} s:", ', '.join(f"{s} {t:.2f}" for s, t in steps))
        # the paper's topology: 1 orderer, 2 peers of 2 orgs, 2 CAs, 2 chaincode containers, each running in its own pod
        inst = net.instances()
        assert sorted(inst) == ['ca-org1', 'ca-org2', 'cc-peer0-org1', 'cc-peer0-org2', 'orderer0', 'peer0-org1', 'peer0-org2']
        assert all(i.alive() and i.runtime.name == runtime for i in inst.values())
        assert len({net.nodes[k].pod.netns for k in inst}) == 7 and not net.nodes['ca-orderer'].instance.alive()  # setup CA gone
        assert sorted(net.discovered) == ['Org1MSP', 'Org2MSP'] and net.raft_leader() == 'orderer0'
        # each container binds only its own node directory read-write, never the admin area or another node's keys
        for name, i in inst.items():
            binds = [m for m in json.load(open(i.bundle.config_path))['mounts'] if m['type'] == 'bind']
            rw = [m['source'] for m in binds if 'rw' in m['options']]
            assert rw == ([] if name.startswith('cc-') else [net.nodes[name].dir]), (name, rw)
            assert not any(m['source'].startswith(net.layout.admin) for m in binds)
        # a transaction committed and read back through fabric-sdk-py, and found by its id
        if sdk_version() is None: pytest.fail(f"fabric-sdk-py is not installed: {SDK_INSTALL}")
        r = net.sdk_check()
        assert r['ok'] and r['tx_validation_code'] == 0 and r['tx_id_matches'] and len(r['tx_id']) == 64, r
        assert set(r['reads']) == {'peer0-org1', 'peer0-org2'} and net.height('peer0-org2') == r['height']
        assert net.query('get', r['key'], peer='peer0-org2') == r['value']   # the peer CLI sees what the SDK wrote
        # the peers' block files are on the host
        assert os.path.getsize(f"{net.ledger_dir('peer0-org1')}/blockfile_000000") > 0
        # a live CPU quota on a peer is enforced under load
        ratio, throttled, load = _quota_under_load(net, td)
        print(f"{runtime}: quota 0.25 → {ratio:.3f} cores, throttled in {throttled} periods; rk-load {load['ok']} ok, {load['throughput']:.0f} tx/s, errors {load['errors']}")
        assert 0.25 * 0.88 <= ratio <= 0.25 * 1.10, ratio
        assert throttled >= 10 and load['ok'] > 0
        d = net.describe()
        assert json.loads(json.dumps(d)) == d   # plain data, for records
        assert d['fabric'] == FABRIC_VERSION and 'not buildable' in d['paper_fabric'] and d['runtime'] == runtime and d['containers'] == 7
        assert 'v1.4.0-rc1.0.20230405174026-695dd57e01c2' in d['fabric_module'] and 'v1.5.13' in d['fabric_ca']
        root = net.layout.root
    assert not os.path.exists(root)
    print(f"{runtime} down {net.timings['down']:.2f} s")
    assert not _wait_gone(rid), leftovers(rid)

# ---- teardown paths ---------------------------------------------------------------------------------
def test_teardown_after_an_exception_once_the_peers_run():
    rid, seen = current_run_id(), {}
    def hook(step, seconds):
        if step == 'peers':
            seen.update({k: i.alive() for k, i in net.instances().items()}, root=os.path.isdir(net.layout.root))
            raise RuntimeError('raised by a test hook after the peers started')
    with Teardown() as td:
        net = Network(NetworkSpec(**SMALL), teardown=td, on_step=hook)
        with pytest.raises(RuntimeError, match='test hook'): net.up(timeout=120)
        assert seen == {'ca-org1': True, 'orderer0': True, 'peer0-org1': True, 'root': True}, seen
        assert not net._up and 'down' in net.timings
        assert not _wait_gone(rid), leftovers(rid)   # gone before the outer teardown closes

CHILD = textwrap.dedent('''
    import time
    from researchkit.teardown import Teardown
    from researchkit.ledger.network import Network, NetworkSpec, OrgSpec
    with Teardown() as td:
        net = Network(NetworkSpec(orgs=[OrgSpec('org1')], batch_timeout_s=0.2), teardown=td,
                      on_step=lambda s, t: print('STEP', s, flush=True))
        net.up(timeout=120)
        print('READY', net.tag, flush=True)
        time.sleep(300)
''')

def _child(rid:str) -> subprocess.Popen:
    env = {**os.environ, 'RESEARCHKIT_RUN_ID': rid, 'RESEARCHKIT_STATE': str(state_dir())}
    return subprocess.Popen([sys.executable, '-c', CHILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

def _wait_line(p:subprocess.Popen, start:str, timeout:float=120) -> str:
    "The child's first stdout line starting with `start` (read from the fd itself: a buffered readline under select can sit on a line)."
    deadline, seen, buf, fd = time.monotonic() + timeout, [], b'', p.stdout.fileno()
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            chunk = os.read(fd, 65536)
            if not chunk: break
            *lines, buf = (buf + chunk).split(b'\n')
            for line in map(bytes.decode, lines):
                if line.startswith(start): return line
                seen.append(line)
    p.kill(); p.wait()
    raise AssertionError(f"no {start!r} line from the child (rc {p.returncode}) after {seen}: {p.stderr.read()[-2000:]}")

def test_teardown_after_sigint_during_up():
    rid = new_run_id(); p = _child(rid)
    try:
        _wait_line(p, 'STEP orderers')     # the orderer answers and leads the channel; peers and chaincode are next
        assert leftovers(rid).get('containers')
        p.send_signal(signal.SIGINT)
        rc = p.wait(60)
    finally:
        if p.poll() is None: p.kill(); p.wait(); reap()   # the child hung: clean up after it before failing
    err = p.stderr.read()
    assert rc != 0 and 'KeyboardInterrupt' in err, err[-2000:]
    assert not _wait_gone(rid), leftovers(rid)
    ledger = state_dir() / f'{rid}.jsonl'
    assert not ledger.exists() or not Ledger.read(ledger)[1]   # nothing left pending for reap

def test_reap_after_sigkill():
    rid = new_run_id(); p = _child(rid)
    try:
        _wait_line(p, 'READY')
        left = leftovers(rid)
        assert len(left['containers']) == 4 and left['netns'] and left['dirs'] and left['processes'], left
    except BaseException:
        p.kill(); p.wait(); reap(); raise
    p.send_signal(signal.SIGKILL); p.wait()
    assert leftovers(rid)['containers']   # SIGKILL tore nothing down
    undone = reap()
    assert any(rid in u for u in undone), undone
    assert not _wait_gone(rid), leftovers(rid)

def test_teardown_after_timeout():
    "The time runs out while the CAs are up (a step that outlasts the deadline, whatever this machine's speed): NetworkError naming the step, nothing left."
    rid = current_run_id()
    def slow_cas(step, seconds):
        if step == 'cas': time.sleep(max(0.0, net._deadline - time.monotonic()) + 0.2)
    with Teardown() as td:
        net = Network(NetworkSpec(**SMALL), teardown=td, on_step=slow_cas)
        t = time.monotonic()
        with pytest.raises(NetworkError, match="not ready after 10 s \\(at step 'cas'\\)"): net.up(timeout=10)
        assert time.monotonic() - t < 30 and 'cas' in net.timings and 'enroll' not in net.timings   # stopped where the time ran out
        assert not _wait_gone(rid), leftovers(rid)

# ---- placement on named machines of an SSH testbed --------------------------------------------------
@pytest.fixture(scope='module')
def ssh_testbed(tmp_path_factory):
    "Two sshd hosts in namespaces of this machine (B reachable only through A), joined by a data link: the SSH testbed of test_ssh_testbed."
    import yaml
    from researchkit.testbed.ssh import SSHTestHost
    from researchkit.testbed.inventory import load_inventory, Testbed
    d = tmp_path_factory.mktemp('fabbed')
    with Teardown() as td:
        a = SSHTestHost(td); b = SSHTestHost(td, behind=a)
        da, db = f'{current_run_id()}f1a', f'{current_run_id()}f1b'
        undo = f'ip netns exec {a.netns} ip link del {da} 2>/dev/null || true'
        td.add(f'data link {da}', lambda: subprocess.run(['sh', '-c', undo]), undo=undo)
        subprocess.run(['ip', 'link', 'add', da, 'netns', a.netns, 'type', 'veth', 'peer', 'name', db, 'netns', b.netns], check=True)
        a.node.run(f'ip addr add 198.18.255.1/24 dev {da} && ip link set {da} up')
        b.node.run(f'ip addr add 198.18.255.2/24 dev {db} && ip link set {db} up')
        kh = a.known_hosts(str(d / 'known_hosts')); b.known_hosts(kh)
        common = {'kind': 'ssh', 'user': 'root', 'port': 22, 'known_hosts': kh, 'roles': ['host']}
        inv = {'name': 'fabbed', 'description': 'two sshd hosts in namespaces, B behind A',
               'nodes': [{'name': 'hosta', 'host': a.addr, 'key': a.key, **common, 'underlay': {'ifname': da, 'ip': '198.18.255.1'}},
                         {'name': 'hostb', 'host': b.addr, 'key': b.key, 'jump': 'hosta', **common, 'underlay': {'ifname': db, 'ip': '198.18.255.2'}}]}
        (d / 'fabbed.yaml').write_text(yaml.safe_dump(inv))
        tb = Testbed(load_inventory(d / 'fabbed.yaml'))
        td.callback('close testbed', tb.close)
        yield tb

def test_nodes_on_named_ssh_machines(ssh_testbed):
    "org2's peer and chaincode on machine hostb, everything else on hosta; the network works across the data link."
    rid = current_run_id()
    with Teardown() as td:
        net = Network(NetworkSpec(orgs=[OrgSpec('org1'), OrgSpec('org2', host='hostb')], batch_timeout_s=0.2), teardown=td, testbed=ssh_testbed)
        assert net.placement == 'different-host'
        net.up(timeout=240)
        print(f"\nssh testbed up {net.timings['up']:.2f} s")
        where = {k: i.node.name for k, i in net.instances().items()}
        assert where == {'ca-org1': 'hosta', 'ca-org2': 'hosta', 'orderer0': 'hosta', 'peer0-org1': 'hosta', 'cc-peer0-org1': 'hosta',
                         'peer0-org2': 'hostb', 'cc-peer0-org2': 'hostb'}, where
        assert sorted(net.discovered) == ['Org1MSP', 'Org2MSP']
        net.invoke('put', 'across', 'hosts')
        assert net.query('get', 'across', peer='peer0-org2') == 'hosts'
        hb = net.nodes['peer0-org2'].host
        assert hb.name == 'hostb' and hb.run(f"test -s {net.ledger_dir('peer0-org2')}/blockfile_000000", check=False).ok
        with pytest.raises(Exception, match='not on this machine'): net.sdk_check()   # fabric-sdk-py runs where researchkit runs
    print(f"ssh testbed down {net.timings['down']:.2f} s")
    assert not _wait_gone(rid), leftovers(rid)
