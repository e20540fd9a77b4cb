"""The policy layer on another machine: an agent on an SSH test host (sshd in a namespace of this machine) holds real BPF
programs and a real Landlock ruleset for a real runc container started over SSH; the proofs run there, rule updates and
counters travel over the agent's socket, and everything is gone after close, an exception, or SIGKILL of the agent."""
import json, pathlib, time, pytest
from researchkit.core import ConfigError, NotMeasurable, current_run_id
from researchkit.teardown import Teardown, Ledger, state_dir
from researchkit.runtimes.container import Container, Mount, CGROUP_PARENT
from researchkit.runtimes.adapters import get_runtime
from researchkit.runtimes.rootfs import host_rootfs
from researchkit.testbed.nodes import LocalNode
from researchkit.policy.bpfprog import bpf_ids
from researchkit.policy.rules import Rules
from researchkit.policy.mechanisms import MECHANISMS, check_enforcement, exec_in, mechanism_rows
from researchkit.policy.remote import RemotePolicy, policy_on, remote_mechanism_rows, mechanisms_on, is_local
from researchkit.testbed.nodes import LocalNode
from _ssh_fixtures import ssh_hosts, ssh_host  # noqa: F401  (fixtures)
from _bpf_holders import bpf_leftovers_of

RULES = Rules(files=['/etc/hostname'], ipv4=['127.0.0.2'], ipv6=['::2'])
BINDS = [Mount('/usr', '/usr', readonly=True), Mount('/etc', '/etc', readonly=True)]

@pytest.fixture
def node(ssh_host):
    "The SSH test host's node; no program or map of ours (rk_*) is left after the test (another xdist worker's come and go meanwhile: an object counts as another run's only when all its holders are)."
    before = bpf_ids('rk_')
    yield ssh_host.ssh_node('policy-remote')
    assert bpf_leftovers_of(before, {current_run_id()}) == {}

def _ledger_entries(text:str) -> list[dict]:
    "Pending ledger entries naming `text`: in the tests' state dir and in the real one (/run/researchkit, what `researchkit cleanup` reads)."
    dirs = {state_dir(), pathlib.Path('/run/researchkit')}
    return [e for d in dirs if d.is_dir() for f in d.glob('rk*.jsonl') for e in Ledger.read(f)[1] if text in e['undo']]

def _agent_gone(p) -> bool:
    deadline = time.monotonic() + 10
    while p.agent.proc.alive() and time.monotonic() < deadline: time.sleep(0.1)
    return (not p.agent.proc.alive() and not p.node.run(f"test -e {p.agent.sock}", check=False).ok
            and _ledger_entries(p.agent.sock) == [])   # nothing left for `researchkit cleanup` to reap, even after a SIGKILL

def test_rows_are_measured_by_the_remote_kernel(node):
    rows = remote_mechanism_rows(node)
    assert [r[0] for r in rows] == list(MECHANISMS)
    assert [r[1] for r in rows] == [ok for _, ok, _ in mechanism_rows()]   # the same kernel answers the same
    lsm = dict((r[0], r[2]) for r in rows)['lsm']
    assert rows[0][1] or 'EPERM' in lsm                                 # refused here, with the measured errno
    ok, why = {n: (ok, why) for n, ok, why in mechanisms_on(node, refresh=True)}['cgroup-connect']   # what doctor shows for the node
    assert ok and why.startswith(f"on {node.name}:")
    assert mechanisms_on(LocalNode()) == mechanism_rows()   # this machine: tried in this process, no agent

def test_enforcement_updates_counters_and_teardown_on_the_remote_machine(node):
    rt = get_runtime('runc', node)
    with Teardown() as td:
        p = policy_on(node, RULES, ['cgroup-connect', 'landlock', 'tp-openat'], teardown=td)
        assert isinstance(p, RemotePolicy) and not is_local(node)
        inst = rt.start(p.wrap(Container('polr', str(host_rootfs(node)), ['sleep', '120'], mounts=BINDS)), teardown=td, prelaunch=p.prepare)
        assert p.cgroup == f"/sys/fs/cgroup/unified{CGROUP_PARENT}/{inst.id}"
        proof = check_enforcement(p, inst)
        assert proof['inside']['blocked_file'] == 'EACCES' and proof['inside']['blocked_ipv4'] == 'EPERM'
        assert proof['inside']['blocked_ipv6'] == 'EPERM' and proof['inside']['allowed_ipv4'] == 'ok'
        assert 'EPERM' not in proof['outside'].values() and 'EACCES' not in proof['outside'].values()
        assert proof['counters']['openat_matched'] >= 1
        probe = ['python3', '-c', "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                 "try: s.connect(('127.0.0.3', 9)); print('ok')\nexcept OSError as e: print(e.errno)"]
        assert exec_in(inst, p.landlock_argv(probe)).stdout.split() == ['ok']
        p.block('ipv4', '127.0.0.3')                                    # a rule added while attached, over the socket
        assert exec_in(inst, p.landlock_argv(probe)).stdout.split() == ['1']   # EPERM
        assert p.unblock('ipv4', '127.0.0.3') and exec_in(inst, p.landlock_argv(probe)).stdout.split() == ['ok']
        assert p.counters()['connect4_denied'] >= 1
    assert _agent_gone(p)
    assert not node.run(f"test -d {p.cgroup}", check=False).ok

def test_lsm_not_measurable_there_with_its_reason(node):
    if remote_mechanism_rows(node)[0][1]: pytest.skip('this kernel allows BPF LSM programs')
    # this process's agents (sockets /run/researchkit-agents/<run id>-policy-*; another xdist worker's agents come and go meanwhile)
    rid = current_run_id()
    agents = lambda: node.run(f"ls /run/researchkit-agents/ 2>/dev/null | grep '^{rid}-'; pgrep -f '[p]olicy.remote import serve.*/{rid}-' || true",
                              check=False).stdout.split()
    before = agents()
    with Teardown() as td:
        with pytest.raises(NotMeasurable) as e: RemotePolicy(node, RULES, ['lsm'], teardown=td)
        assert 'EPERM' in e.value.reason
    assert agents() == before                                           # the agent that said so is gone

def test_exception_and_sigkill_of_the_agent_leave_nothing(node):
    rt = get_runtime('runc', node)
    with pytest.raises(RuntimeError):
        with Teardown() as td:
            p = RemotePolicy(node, RULES, ['cgroup-connect'], teardown=td)
            rt.start(Container('polx', str(host_rootfs(node)), ['sleep', '60'], mounts=BINDS), teardown=td, prelaunch=p.prepare)
            raise RuntimeError('boom')
    assert _agent_gone(p) and not node.run(f"test -d {p.cgroup}", check=False).ok
    with Teardown() as td:
        p = RemotePolicy(node, RULES, ['cgroup-connect', 'tp-openat'], teardown=td)
        node.run(f"kill -9 {p.agent.proc.pid}")
        deadline = time.monotonic() + 10                                # the kernel frees its programs with its fds
        while bpf_ids('rk_') and time.monotonic() < deadline: time.sleep(0.1)
    assert _agent_gone(p)

@pytest.mark.parametrize('kw,field', [(dict(mechanisms=['selinux']), 'mechanisms[0]'), (dict(rules=Rules(ipv4=['10.0.0.0/8'])), 'ipv4[0]'),
                                      (dict(rules=['/etc/x']), 'rules')])
def test_bad_input_before_any_agent_starts(node, kw, field):
    with Teardown() as td:
        with pytest.raises(ConfigError) as e: RemotePolicy(node, **{'rules': RULES, 'mechanisms': ['cgroup-connect'], 'teardown': td, **kw})
        assert e.value.where == field and len(td) == 0
