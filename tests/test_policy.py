"""The BPF policy layer with real programs in real runc containers: deny and allow for files and addresses (IPv4, IPv6,
IPv4-mapped), scoping to the container, rule updates while attached, hook counters equal to the calls made, teardown
after an exception, Ctrl-C and SIGKILL of the owner (+ `researchkit cleanup`), and bad input refused before anything loads."""
import os, sys, json, time, signal, socket, subprocess, textwrap
import pytest
from researchkit.core import ConfigError, NotMeasurable, new_run_id, current_run_id
from researchkit.teardown import Teardown, state_dir
from researchkit.testbed.nodes import LocalNode
from researchkit.runtimes.container import Container, Mount, CGROUP_PARENT, SCRATCH_ROOT
from researchkit.runtimes.adapters import get_runtime
from researchkit.runtimes.rootfs import host_rootfs
from researchkit.policy.bpfprog import bpf_ids, libbpf, BpfObject
from researchkit.policy.rules import Rules, synthetic
from researchkit.policy.mechanisms import (Policy, MECHANISMS, check_enforcement, exec_in, EnforcementError,
                                           mechanism_rows, policy_object, PROGRAMS)
from _bpf_holders import bpf_leftovers_of, held_by

L = LocalNode()
IMG = str(host_rootfs(L))
BINDS = [Mount('/usr', '/usr', readonly=True), Mount('/etc', '/etc', readonly=True)]
RUNC = get_runtime('runc')
RULES = Rules(files=['/etc/hostname'], ipv4=['127.0.0.2'], ipv6=['::2'])

def _gone(cid:str, timeout:float=10) -> list[str]:
    "Cgroup dirs (every hierarchy, cgroup2 included) and scratch of container `cid` still there after `timeout`."
    deadline = time.monotonic() + timeout
    while True:
        left = L.run(f"ls -d /sys/fs/cgroup/*{CGROUP_PARENT}/{cid}* {SCRATCH_ROOT}/{cid} 2>/dev/null", check=False).stdout.split()
        if not left or time.monotonic() > deadline: return left
        time.sleep(0.2)

@pytest.fixture
def no_leak():
    "Every test leaves no program or map of ours (names rk_*) behind (another xdist worker's come and go meanwhile: an object counts as another run's only when all its holders are)."
    before = bpf_ids('rk_')
    yield
    assert bpf_leftovers_of(before, {current_run_id()}) == {}

def _sleeper(policy:Policy, td:Teardown, name:str='pol'):
    c = policy.wrap(Container(name, IMG, ['sleep', '120'], mounts=BINDS))
    return RUNC.start(c, teardown=td, prelaunch=policy.prepare)

PROBE = textwrap.dedent(r'''
    import sys, json, socket, errno
    out = []
    for fam, a in json.loads(sys.argv[1]):
        s = socket.socket(socket.AF_INET6 if fam == 6 else socket.AF_INET, socket.SOCK_DGRAM)
        try: s.connect((a, 9)); out.append('ok')
        except OSError as e: out.append(errno.errorcode[e.errno])
        finally: s.close()
    print(' '.join(out))''')

def _connects(inst, targets) -> list[str]:
    r = exec_in(inst, ['python3', '-c', PROBE, json.dumps(targets)])
    assert r.ok, r.stderr
    return r.stdout.split()

# -- bad input, refused before anything is loaded

@pytest.mark.parametrize('make,field', [
    (lambda: Rules(ipv4=['300.1.2.3']), 'ipv4[0]'), (lambda: Rules(ipv4=['10.0.0.0/8']), 'ipv4[0]'),
    (lambda: Rules(ipv6=['2001:db8::/32']), 'ipv6[0]'), (lambda: Rules(ipv6=['fe80::1::2']), 'ipv6[0]'),
    (lambda: Rules(files=['etc/hostname']), 'files[0]'), (lambda: Rules(files=['/ok', '']), 'files[1]'),
    (lambda: Rules(files=['/a/./b']), 'files[0]'), (lambda: Rules(files=['/' + 'x' * 200]), 'files[0]'),
])
@pytest.mark.exclusive   # no new program of any name on the whole host: another worker's tc programs have no holder to tell them apart by
def test_bad_rules_name_the_field(make, field, no_leak):
    before = bpf_ids()
    with Teardown() as td:
        with pytest.raises(ConfigError) as e: Policy(make(), ['cgroup-connect'], teardown=td)
    assert e.value.where == field
    assert bpf_ids()['prog'] - before['prog'] == set()

@pytest.mark.parametrize('n', [-1, 10**9, 2.5])
def test_bad_rule_count(n):
    with pytest.raises(ConfigError) as e: synthetic(n)
    assert e.value.where == 'rule_count'

@pytest.mark.parametrize('mech,field', [(['apparmor'], 'mechanisms[0]'), (['landlock', 'seccomp'], 'mechanisms[1]'),
                                        ([], 'mechanisms'), ('landlock', 'mechanisms')])
def test_unknown_mechanism(mech, field):
    with Teardown() as td:
        with pytest.raises(ConfigError) as e: Policy(RULES, mech, teardown=td)
    assert e.value.where == field

def test_max_entries_below_rule_count():
    with Teardown() as td:
        with pytest.raises(ConfigError) as e: Policy(synthetic(100), ['cgroup-connect'], teardown=td, max_entries=10)
    assert e.value.where == 'max_entries'

# -- what the host allows, measured

def test_lsm_reported_not_available_with_measured_reason():
    lsm_type = libbpf().libbpf_probe_bpf_prog_type(29, None)   # BPF_PROG_TYPE_LSM
    ok, why = MECHANISMS['lsm'].available(refresh=True)
    if lsm_type == 1: pytest.skip(f'this kernel loads LSM programs: {why}')
    assert not ok and 'EPERM' in why and 'lsm/file_open' in why, why
    with Teardown() as td:   # asking for it is NotMeasurable, with the same reason, before anything is loaded
        with pytest.raises(NotMeasurable) as e: Policy(RULES, ['lsm'], teardown=td)
    assert 'EPERM' in e.value.reason

def test_other_mechanisms_available_here():
    rows = {n: (ok, why) for n, ok, why in mechanism_rows(refresh=True)}
    assert set(rows) == {'lsm', 'cgroup-connect', 'landlock', 'tp-openat'}
    for n in ('cgroup-connect', 'landlock', 'tp-openat'): assert rows[n][0], rows[n]

def test_lsm_programs_compile_and_all_others_load(no_leak):
    "The LSM programs are in the object (CO-RE); with them set not to load, every other program loads here."
    with Teardown() as td:
        o = BpfObject(policy_object(), autoload={p: PROGRAMS[p] != 'lsm' for p in PROGRAMS}, teardown=td).load()
        assert all(o.prog_fd(p) >= 0 for p in PROGRAMS if PROGRAMS[p] != 'lsm')
        assert o.prog_fd('rk_file_open') < 0

# -- enforcement in real containers

def test_runc_joins_cgroup2_and_prelaunch_runs_first(no_leak):
    seen = {}
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect'], teardown=td)
        def hook(inst):
            seen['cgroup'] = p.prepare(inst).cgroup
            seen['launched'] = inst.proc is not None   # False: the container has not been launched yet
        i = RUNC.start(Container('cg2', IMG, ['cat', '/proc/self/cgroup'], mounts=BINDS), teardown=td, prelaunch=hook)
        assert i.wait(30) == 0
        assert f'0::{CGROUP_PARENT}/{i.id}/ctr' in i.log().split(), i.log()
        assert seen == {'cgroup': f'/sys/fs/cgroup/unified{CGROUP_PARENT}/{i.id}', 'launched': False}
        # the first instruction already ran under the program: the container's connects are counted from its start
    assert not _gone(i.id)

def test_enforcement_files_and_addresses(no_leak):
    "Landlock (EACCES) and cgroup connect programs (EPERM) deny inside; allowed calls work; outside is unaffected."
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect', 'landlock', 'tp-openat'], teardown=td)
        i = _sleeper(p, td)
        res = check_enforcement(p, i)
        assert res['inside'] == {'blocked_file': 'EACCES', 'allowed_file': 'ok', 'blocked_ipv4': 'EPERM', 'blocked_mapped': 'EPERM',
                                 'blocked_ipv6': 'EPERM', 'allowed_ipv4': 'ok', 'allowed_ipv6': 'ok'}, res
        assert set(res['outside'].values()) == {'ok'}, res
        assert res['counters']['connect4_denied'] == 1 and res['counters']['connect6_denied'] == 2   # ::2 and ::ffff:127.0.0.2
        assert res['counters']['openat_matched'] >= 1
        # a neighbour container without the policy is not affected either
        j = RUNC.start(Container('neigh', IMG, ['sleep', '60'], mounts=BINDS), teardown=td)
        got = _connects(j, [[4, '127.0.0.2'], [6, '::ffff:127.0.0.2'], [6, '::2']])
        assert got[:2] == ['ok', 'ok'] and got[2] in ('ok', 'ENETUNREACH'), got   # ::2 has no route there: not denied
        # and this very process (the policy's owner, outside the container)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('127.0.0.2', 9)); s.close()
    assert not _gone(i.id) and not _gone(j.id)

def test_bpf_only_policy_does_not_deny_files(no_leak):
    "tp-openat counts a blocked open but cannot deny it: check_enforcement expects the open to succeed."
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect', 'tp-openat'], teardown=td)
        i = _sleeper(p, td)
        res = check_enforcement(p, i)
        assert res['inside']['blocked_file'] == 'ok' and res['counters']['openat_matched'] == 1, res

def test_check_enforcement_fails_when_not_enforced(no_leak):
    "A policy whose rule was removed behind its back no longer proves enforcement: the check must fail."
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect'], teardown=td)
        i = _sleeper(p, td)
        p.obj.map('rk_deny4').delete(bytes([127, 0, 0, 2]))
        with pytest.raises(EnforcementError, match='blocked_ipv4 gave ok'): check_enforcement(p, i)

def test_a_probe_into_a_container_that_exited_says_so(no_leak):
    "When the container is gone before the probe (CI once saw 'container does not exist'), the error gives its exit code and log."
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect'], teardown=td)
        i = RUNC.start(p.wrap(Container('gone', IMG, ['sh', '-c', 'echo bye-from-the-container; exit 3'], mounts=BINDS)), teardown=td, prelaunch=p.prepare)
        assert i.wait(30) == 3
        with pytest.raises(EnforcementError, match=r"the container had exited \(code 3\), its log: .*bye-from-the-container"): check_enforcement(p, i)

def test_rule_updates_while_attached(no_leak):
    with Teardown() as td:
        p = Policy(Rules(ipv4=['127.0.0.2']), ['cgroup-connect'], teardown=td)
        i = _sleeper(p, td)
        t = [[4, '127.0.0.2'], [4, '127.0.0.3'], [6, '::1']]
        assert _connects(i, t) == ['EPERM', 'ok', 'ok']
        assert p.unblock('ipv4', '127.0.0.2')
        p.block('ipv4', '127.0.0.3'); p.block('ipv6', '::1')
        assert _connects(i, t) == ['ok', 'EPERM', 'EPERM']
        p.block('ipv6', '::ffff:127.0.0.2')          # IPv4-mapped: becomes an IPv4 rule, blocks both families
        assert p.rules.ipv4 == ['127.0.0.3', '127.0.0.2']
        assert _connects(i, [[4, '127.0.0.2'], [6, '::ffff:127.0.0.2']]) == ['EPERM', 'EPERM']
        with pytest.raises(ConfigError) as e: p.block('ipv4', 'nope')
        assert e.value.where == 'ipv4[0]'

COUNT = textwrap.dedent(r'''
    import socket, sys
    n4, n6, nb, nopen = map(int, sys.argv[1:5])
    for i in range(n4):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('127.0.0.1', 9)); s.close()
    for i in range(n6):
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.connect(('::1', 9)); s.close()
    for i in range(nb):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try: s.connect(('127.0.0.2', 9))
        except PermissionError: pass
        s.close()
    for i in range(nopen): open('/etc/hostname').close()
    print('done')''')

def test_counters_equal_real_call_counts(no_leak):
    "Per-CPU hook counters, summed, equal the calls the container made (run on both CPUs)."
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect', 'tp-openat'], teardown=td)
        c = Container('count', IMG, ['python3', '-c', COUNT, '300', '200', '50', '250'], mounts=BINDS)
        i = RUNC.start(c, teardown=td, prelaunch=p.prepare)
        assert i.wait(60) == 0 and 'done' in i.log(), i.log()
        n = p.counters()
        assert n['connect4'] == 350 and n['connect4_denied'] == 50, n
        assert n['connect6'] == 200 and n['connect6_denied'] == 0, n
        assert n['openat_matched'] == 250 and n['openat'] > 250 and n['openat_host'] >= n['openat'], n
        assert n['sendmsg4'] == 0 and n['file_open'] == 0, n

@pytest.mark.exclusive   # a 100 000-rule policy loads in under 20 s of wall time (its CPU share decides)
def test_big_rule_set_fills_and_still_matches(no_leak):
    r = synthetic(100_000, real=RULES, seed=3)
    with Teardown() as td:
        t0 = time.monotonic()
        p = Policy(r, ['cgroup-connect', 'tp-openat'], teardown=td)
        assert time.monotonic() - t0 < 20
        assert len(p.obj.map('rk_deny4')) == 100_000
        i = _sleeper(p, td)
        assert _connects(i, [[4, '127.0.0.2'], [4, r.ipv4[-1]], [4, '127.0.0.1']]) == ['EPERM', 'EPERM', 'ok']

# -- teardown

@pytest.mark.parametrize('exc', [RuntimeError, KeyboardInterrupt])
def test_teardown_after_exception_and_ctrl_c(exc, no_leak):
    with pytest.raises(exc):
        with Teardown() as td:
            p = Policy(RULES, ['cgroup-connect', 'tp-openat', 'landlock'], teardown=td)
            i = _sleeper(p, td)
            assert held_by([os.getpid()]) and os.path.isdir(p.cgroup)   # this process holds its programs
            if exc is KeyboardInterrupt:   # a real SIGINT, delivered to this process mid-run
                os.kill(os.getpid(), signal.SIGINT); time.sleep(5)
            raise exc('boom')
    assert not os.path.exists(p.cgroup) and not os.path.exists(p._landlock_dir)
    assert not _gone(i.id)

CHILD = textwrap.dedent('''
    import sys, time
    from researchkit.teardown import Teardown
    from researchkit.runtimes.container import Container, Mount
    from researchkit.runtimes.adapters import get_runtime
    from researchkit.policy.rules import Rules
    from researchkit.policy.mechanisms import Policy
    td = Teardown()
    p = Policy(Rules(files=['/etc/hostname'], ipv4=['127.0.0.2']), ['cgroup-connect', 'tp-openat', 'landlock'], teardown=td)
    c = p.wrap(Container('orphan', sys.argv[1], ['sleep', '120'], mounts=[Mount('/usr', '/usr', readonly=True), Mount('/etc', '/etc', readonly=True)]))
    i = get_runtime('runc').start(c, teardown=td, prelaunch=p.prepare)
    print(i.id, p.cgroup, p._landlock_dir, flush=True)
    time.sleep(120)
''')

def test_sigkill_of_owner_then_cleanup(no_leak):
    rid = new_run_id()
    env = {**os.environ, 'RESEARCHKIT_RUN_ID': rid, 'RESEARCHKIT_STATE': str(state_dir())}
    before = bpf_ids('rk_')
    p = subprocess.Popen([sys.executable, '-c', CHILD, IMG], env=env, stdout=subprocess.PIPE, text=True)
    try:
        cid, cg, lldir = p.stdout.readline().split()
        assert held_by([p.pid]) - before['prog'], 'the child loaded no program'
        assert os.path.isdir(cg) and os.path.isdir(lldir)
    finally:
        p.send_signal(signal.SIGKILL); p.wait()
    assert bpf_leftovers_of(before, {current_run_id(), rid}) == {}   # the kernel freed them with the owner's fds
    assert os.path.isdir(f'{cg}/ctr')                      # the container itself outlives its owner …
    r = subprocess.run([sys.executable, '-m', 'researchkit.cli', 'cleanup'], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and rid in r.stdout, r
    assert not _gone(cid) and not os.path.exists(cg) and not os.path.exists(lldir)   # … until cleanup

def test_policy_refuses_runtimes_it_cannot_scope(no_leak):
    "A plain process stays at cgroup2 '/': attaching there would silently police nothing, so prepare refuses before launch."
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect'], teardown=td)
        with pytest.raises(NotMeasurable, match='cgroup v1'):
            get_runtime('process').start(Container('plain', IMG, ['sleep', '30'], mounts=BINDS), teardown=td, prelaunch=p.prepare)
        assert p.cgroup is None

def test_failed_load_reports_errno_and_log_and_frees_everything(no_leak):
    "A refused program (LSM here; else a verifier rejection) gives BpfError with the errno and libbpf's text; nothing stays loaded."
    from researchkit.policy.bpfprog import BpfError
    from researchkit.testbed.tools import compile_bpf
    lsm_ok = libbpf().libbpf_probe_bpf_prog_type(29, None) == 1
    src = ('#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n'
           'SEC("cgroup/connect4") int rk_bad(struct bpf_sock_addr *ctx) { return *(int *)(long)ctx->user_ip4; }\n'
           'char _license[] SEC("license") = "GPL";\n')
    with Teardown() as td:
        if lsm_ok: o = BpfObject(compile_bpf('rk-test-bad', src), teardown=td)
        else: o = BpfObject(policy_object(), autoload={p: p == 'rk_file_open' for p in PROGRAMS}, teardown=td)
        with pytest.raises(BpfError) as e: o.load()
        assert o.closed
    assert e.value.errno in ((13,) if lsm_ok else (1,)) and 'failed to load' in e.value.log, e.value
    with Teardown() as td:   # map values of the wrong size are refused before the syscall, naming the map
        o = BpfObject(policy_object(), autoload={p: p == 'rk_connect4' for p in PROGRAMS}, teardown=td).load()
        with pytest.raises(ConfigError) as e: o.map('rk_deny4').update(b'\1\2\3', b'\1')
        assert e.value.where == 'rk_deny4.key'

def test_policy_follows_one_container_at_a_time(no_leak):
    "Preparing a policy for a second container detaches it from the first: the first is free again, the second is policed, the maps stay."
    with Teardown() as td:
        p = Policy(RULES, ['cgroup-connect'], teardown=td)
        a = _sleeper(p, td, 'pola')
        assert _connects(a, [[4, '127.0.0.2']]) == ['EPERM']
        b = RUNC.start(Container('polb', IMG, ['sleep', '120'], mounts=BINDS), teardown=td, prelaunch=p.prepare)
        assert _connects(b, [[4, '127.0.0.2'], [4, '127.0.0.3']]) == ['EPERM', 'ok']
        assert _connects(a, [[4, '127.0.0.2']]) == ['ok']          # no longer attached there
        assert p.counters()['connect4_denied'] == 2
