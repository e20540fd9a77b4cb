"SSHNode against a real OpenSSH server running in a network namespace of this machine."
import os, re, secrets, socket, pathlib, subprocess, pytest
from researchkit.core import current_run_id
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import NetnsNode, CommandFailed, CommandTimeout
from researchkit.testbed.ssh import SSHNode, SSHError, HostKeyRefused, HostKeyMismatch
from _ssh_fixtures import ssh_hosts, ssh_host  # noqa: F401  (fixtures)


def running(node, pid: int) -> bool:
    "Is `pid` a live (not zombie) process on `node`? (PID 1 on this VM reaps orphans lazily.)"
    return node.run(f"s=$(sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f1) && [ -n \"$s\" ] && [ \"$s\" != Z ]", check=False).ok


def test_run_exit_code_stdout_stderr(ssh_host):
    n = ssh_host.ssh_node('r')
    r = n.run('echo out; echo err >&2; exit 7', check=False)
    assert (r.rc, r.stdout, r.stderr, r.node) == (7, 'out\n', 'err\n', 'r')
    with pytest.raises(CommandFailed) as e: n.run('echo boom >&2; false')
    assert e.value.result.rc == 1 and 'boom' in str(e.value)
    assert n.run(['printf', '%s|', 'a b', "it's"]).stdout == "a b|it's|"
    assert n.run('echo "$RK_X"', env={'RK_X': 'v w'}).stdout == 'v w\n'
    # the command really runs in the remote host's network namespace, not in ours
    assert ssh_host.addr in n.run('ip -4 -o addr show').stdout
    assert ssh_host.addr not in subprocess.run(['ip', '-4', '-o', 'addr', 'show'], capture_output=True, text=True).stdout


def test_stdin_input(ssh_host):
    n = ssh_host.ssh_node()
    assert n.run('cat', input='hello\nworld').stdout == 'hello\nworld'
    big = 'x' * 300_000 + '\n'  # larger than one SSH window: fed in chunks
    assert n.run('wc -c', input=big).stdout.strip() == str(len(big))
    assert n.run('cat').stdout == ''  # no input: stdin is at EOF, the command does not hang


def test_timeout_kills_remote_process_group(ssh_host):
    n = ssh_host.ssh_node()
    tag = f"30{secrets.randbelow(10**6)}"
    marker = f"/tmp/{current_run_id()}-pid-{tag}"
    try:
        with pytest.raises(CommandTimeout) as e:
            n.run(f"echo $$ > {marker}; sleep {tag}.1 & sleep {tag}.2; echo never", timeout=1)
        assert 'never' not in e.value.stdout
        pid = int(n.read_text(marker))
        assert not running(n, pid), 'the timed-out shell is still running'
        assert not n.run(f"pgrep -f '[s]leep {tag}'", check=False).stdout.strip(), 'its children are still running'
        # the connection is still usable afterwards
        assert n.run('echo ok').stdout == 'ok\n'
    finally:
        n.run(f"rm -f {marker}", check=False)


@pytest.mark.exclusive   # 'started' must be in the remote log within 100 reads without a sleep (a time budget)
def test_spawn_and_stop(ssh_host):
    n = ssh_host.ssh_node()
    with Teardown() as td:
        p = n.spawn("echo started; exec sleep 300", teardown=td, label='remote sleeper')
        assert p.log.startswith('/tmp/rk-proc-')
        p_alive = p.alive()
        assert p_alive
        for _ in range(100):
            if 'started' in p.output(): break
        assert 'started' in p.output()
        assert n.run(f"cat /proc/{p.pid}/cmdline | tr '\\0' ' '").stdout.startswith('sleep 300')
        p.stop(grace=1)
        assert not p.alive()
        assert not running(n, p.pid)
        q = n.spawn("sleep 301", teardown=td)  # left for the teardown to stop
    assert not running(n, q.pid)
    # the teardown also removed each process's directory (log, pid, exit status) on the node: nothing piles up in its /tmp
    assert not n.run(f"ls -d {os.path.dirname(p.log)} {os.path.dirname(q.log)}", check=False).stdout.strip()



def test_spawned_process_reports_its_exit_status(ssh_host):
    "A remote background process's exit status comes back, though its SSH channel closed long before it exited."
    n = ssh_host.ssh_node()
    with Teardown() as td:
        p = n.spawn("sleep 0.3; exit 7", teardown=td)
        assert p.wait(timeout=20) == 7 and p.rc == 7
        q = n.spawn("sleep 0.2", teardown=td)
        assert q.wait(timeout=20) == 0
    assert not n.run(f"ls -d {os.path.dirname(p.log)} {os.path.dirname(q.log)}", check=False).stdout.strip()

def test_a_process_that_ends_at_once_is_spawned_and_reports_its_exit_status(ssh_host):
    "A command that is over before its start time can be read (no /proc entry left: CI on eb60405 got a two-field reply and failed a study's probe) is still spawned: never alive, its exit status from its wrapper."
    n = ssh_host.ssh_node()
    with Teardown() as td:
        ps = [n.spawn("sh -c 'exit 3'", teardown=td) for _ in range(10)]
        assert [p.wait(timeout=20) for p in ps] == [3] * 10 and not any(p.alive() for p in ps)

def test_put_get_roundtrip(ssh_host, tmp_path):
    n = ssh_host.ssh_node()
    src = tmp_path / 'blob.bin'; src.write_bytes(os.urandom(200_000))
    remote = f"/tmp/{current_run_id()}-put/sub/blob.bin"
    try:
        n.put(src, remote)
        assert n.run(f"sha256sum {remote}").stdout.split()[0] == subprocess.run(
            ['sha256sum', str(src)], capture_output=True, text=True).stdout.split()[0]
        n.get(remote, tmp_path / 'back' / 'blob.bin')
        assert (tmp_path / 'back' / 'blob.bin').read_bytes() == src.read_bytes()
        n.write_text(f"/tmp/{current_run_id()}-put/t.txt", 'héllo\n')
        assert n.read_text(f"/tmp/{current_run_id()}-put/t.txt") == 'héllo\n'
        with pytest.raises(FileNotFoundError): n.read_text(f"/tmp/{current_run_id()}-put/missing")
    finally:
        n.run(f"rm -rf /tmp/{current_run_id()}-put", check=False)


def test_facts_and_reconnect(ssh_host):
    n = ssh_host.ssh_node()
    f = n.facts()
    assert f['cores'] >= 1 and f['kernel'] == os.uname().release and f['loadavg'] >= 0
    assert n.connected
    n.close(); assert not n.connected
    assert n.run('echo again').stdout == 'again\n'  # reconnects lazily
    # each command is a few small packets: Nagle's algorithm held each for a delayed ACK (53 ms a command, 7 ms with it off)
    assert n._transport().sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    # doctor says how long a command takes there (the test host: no login-shell setup, no Nagle; well under 50 ms)
    from researchkit.doctor import host_caps
    rt = {c.item: c for c in host_caps(n)}['command-round-trip']
    assert rt.available and re.fullmatch(r'\d+ ms a command \(median of 5 `true`\)', rt.detail), rt
    assert 'SSHNode' in n._repr_html_() and ssh_host.addr in n._repr_html_()


def test_unknown_host_key_refused(ssh_host, tmp_path):
    empty = tmp_path / 'known_hosts'; empty.write_text('')
    n = ssh_host.ssh_node('strict', known_hosts=str(empty))
    with pytest.raises(HostKeyRefused) as e: n.run('true')
    msg = str(e.value)
    assert ssh_host.addr in msg and str(empty) in msg and 'trust_unknown_host' in msg and 'ssh-keyscan' in msg
    assert e.value.fingerprint.startswith('ssh-ed25519 SHA256:')
    # the default known_hosts (no such host in it) refuses too
    with pytest.raises(HostKeyRefused): ssh_host.ssh_node('default', known_hosts=str(tmp_path / 'absent')).run('true')
    # trusted: accepted, and nothing is written to known_hosts
    t = ssh_host.ssh_node('trusting', known_hosts=str(empty), trust_unknown_host=True)
    assert t.run('echo in').stdout == 'in\n'
    assert empty.read_text() == ''
    # a known_hosts file holding the key: accepted without trust
    kh = ssh_host.known_hosts(str(tmp_path / 'kh2'))
    assert ssh_host.ssh_node('known', known_hosts=kh).run('echo in').stdout == 'in\n'


def test_changed_host_key_refused(ssh_host, tmp_path):
    other = tmp_path / 'other'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(other)], check=True)
    pub = ' '.join((tmp_path / 'other.pub').read_text().split()[:2])
    kh = tmp_path / 'kh'; kh.write_text(f"[{ssh_host.addr}]:{ssh_host.port} {pub}\n")
    with pytest.raises(HostKeyMismatch) as e: ssh_host.ssh_node(known_hosts=str(kh)).run('true')
    assert str(kh) in str(e.value)
    # trust_unknown_host never overrides a recorded, different key
    with pytest.raises(HostKeyMismatch): ssh_host.ssh_node(known_hosts=str(kh), trust_unknown_host=True).run('true')


def test_connection_errors_are_clear(ssh_host, tmp_path):
    with pytest.raises(SSHError) as e: ssh_host.ssh_node('closed', port=2299, connect_timeout=3).run('true')
    assert '2299' in str(e.value)
    wrong = tmp_path / 'wrong'
    subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', str(wrong)], check=True)
    with pytest.raises(SSHError) as e: ssh_host.ssh_node('badkey', key=str(wrong)).run('true')
    assert 'authentication' in str(e.value)


def test_jump_host(ssh_hosts):
    a = ssh_hosts(port=2222)
    b = ssh_hosts(behind=a)  # sshd on port 22, reachable only from a
    assert b.addr.startswith('198.19.253.')
    # not reachable from here directly
    with pytest.raises(SSHError): b.ssh_node('direct', jump=None, connect_timeout=2).run('true')
    n = b.ssh_node('target')  # jump: an SSHNode for a
    assert n.resolved()['jump'] is not None
    assert b.addr in n.run('ip -4 -o addr show').stdout
    assert n.run('cat', input='through').stdout == 'through'
    with pytest.raises(CommandTimeout): n.run('sleep 30', timeout=0.5)
    assert 'via' in n._repr_html_()


def test_ssh_config_alias(ssh_hosts, tmp_path):
    a = ssh_hosts(port=2222)
    b = ssh_hosts(behind=a)
    kh = a.known_hosts(str(tmp_path / 'known_hosts')); b.known_hosts(kh)
    cfg = tmp_path / 'ssh_config'
    cfg.write_text(f"""
Host rk-alias-a
    HostName {a.addr}
    Port {a.port}
    User root
    IdentityFile {a.key}

Host rk-alias-b
    HostName {b.addr}
    User root
    IdentityFile {b.key}
    ProxyJump rk-alias-a

Host *
    User nobody-here
""")
    na = SSHNode('na', 'rk-alias-a', ssh_config=str(cfg), known_hosts=kh)
    nb = SSHNode('nb', 'rk-alias-b', ssh_config=str(cfg), known_hosts=kh)
    try:
        assert na.address == f"root@{a.addr}:{a.port}"
        assert a.addr in na.run('ip -4 -o addr show').stdout
        assert nb.resolved()['jump'].host == 'rk-alias-a'
        assert b.addr in nb.run('ip -4 -o addr show').stdout
        # explicit arguments win over the config
        assert SSHNode('x', 'rk-alias-a', port=2299, ssh_config=str(cfg)).address == f"root@{a.addr}:2299"
    finally:
        nb.close(); na.close()


def test_netns_on_ssh_node(ssh_host):
    n = ssh_host.ssh_node()
    inner = f"{current_run_id()}-in{secrets.token_hex(2)}"
    with Teardown() as td:
        # the "remote" shares this machine's /run/netns, so the undo also works from here
        td.add(f"netns {inner}", lambda: n.run(f"ip netns del {inner} 2>/dev/null || true"),
               undo=f"ip netns del {inner} 2>/dev/null || true")
        n.run(f"ip netns add {inner}")
        ns = NetnsNode(inner, parent=n)
        assert ns.kind == 'ssh-netns'
        links = ns.run('ip -o link show').stdout
        assert 'lo' in links and len(links.strip().splitlines()) == 1
        assert ssh_host.addr not in ns.run('ip -4 -o addr show').stdout
        p = ns.spawn('sleep 300', teardown=td)
        assert p.alive()
        assert inner in n.run(f"ip netns identify {p.pid}").stdout
        with pytest.raises(CommandTimeout): ns.run('sleep 30', timeout=0.5)
        p.stop(grace=1); assert not p.alive()
    assert inner not in subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout


def test_interrupt_kills_remote_command(ssh_host):
    "Ctrl-C while a remote command runs: the remote process group is killed too."
    import signal
    n = ssh_host.ssh_node()
    tag = f"31{secrets.randbelow(10**6)}"
    def interrupt(signum, frame): raise KeyboardInterrupt
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        with pytest.raises(KeyboardInterrupt): n.run(f"sleep {tag}.5", timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0); signal.signal(signal.SIGALRM, old)
    assert not n.run(f"pgrep -f '[s]leep {tag}'", check=False).stdout.strip()
