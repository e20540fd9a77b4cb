"Fixtures for tests that need a real SSH server: OpenSSH in a network namespace of this machine (see `SSHTestHost`)."
import os, subprocess, pytest
from researchkit.teardown import Teardown
from researchkit.testbed.ssh import SSHTestHost


def _pids_mentioning(text: str) -> list[int]:
    "Pids whose command line contains `text` (ours: a per-test temp dir carrying the run prefix)."
    out = []
    for p in os.listdir('/proc'):
        if not p.isdigit() or int(p) == os.getpid(): continue
        try:
            with open(f'/proc/{p}/cmdline', 'rb') as f: cmd = f.read().replace(b'\0', b' ').decode(errors='replace')
        except OSError: continue
        if text in cmd: out.append(int(p))
    return out


def _netns_inode(name: str) -> int | None:
    try: return os.stat(f'/run/netns/{name}').st_ino
    except OSError: return None


def _pids_in_netns(inode: int) -> list[int]:
    out = []
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            if os.readlink(f'/proc/{p}/ns/net') == f'net:[{inode}]': out.append(int(p))
        except OSError: continue
    return out


def assert_gone(hosts: list[SSHTestHost], inodes: dict):
    "After teardown: no namespace, no sshd or child left, no temp dir."
    names = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    for h in hosts:
        assert h.netns not in names, f'namespace {h.netns} leaked'
        assert not _pids_mentioning(h.dir), f'processes of {h.netns} leaked'
        assert not os.path.exists(h.dir), f'{h.dir} leaked'
        if h.behind is None:  # a veth to the root namespace (one behind another host lives inside that host's namespace)
            assert subprocess.run(['ip', 'link', 'show', h.veth], capture_output=True).returncode != 0, f'{h.veth} leaked'
        if inodes.get(h.netns): assert not _pids_in_netns(inodes[h.netns]), f'processes still in {h.netns}'


class HostFactory:
    "Makes SSH test hosts inside one Teardown; `close()` tears them down and checks that nothing leaked."
    def __init__(self):
        self.td, self.hosts, self.inodes = Teardown(), [], {}

    def __call__(self, **kw) -> SSHTestHost:
        h = SSHTestHost(self.td, **kw)
        self.hosts.append(h); self.inodes[h.netns] = _netns_inode(h.netns)
        return h

    def close(self):
        errors = self.td.close()
        assert not errors, errors
        assert_gone(self.hosts, self.inodes)


@pytest.fixture
def ssh_hosts():
    "Factory of SSH test hosts, torn down (and checked for leaks) after the test."
    f = HostFactory()
    try: yield f
    finally: f.close()


@pytest.fixture
def ssh_host(ssh_hosts):
    "One SSH test host (sshd on port 2222 in its own namespace)."
    return ssh_hosts(port=2222)
