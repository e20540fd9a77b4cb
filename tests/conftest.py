"""Session-wide guard: whatever the tests create (namespaces, links, processes) must be gone at the end."""
import os, subprocess, tempfile, pytest

# tests keep their ledgers apart from real runs
os.environ.setdefault('RESEARCHKIT_STATE', tempfile.mkdtemp(prefix='rk-test-state-'))

LEAKY = ('iperf3', 'sockperf', 'sshd', 'mpirun', 'orted', 'alltoall')

def _namespaces():
    out = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    return {l.split()[0] for l in out.splitlines() if l.startswith('rk')}

def _links():
    out = subprocess.run(['ip', '-o', 'link', 'show'], capture_output=True, text=True).stdout
    return {l.split(':')[1].strip().split('@')[0] for l in out.splitlines() if ': rk' in l}

def _procs():
    "Running workload processes (a zombie has exited already: it waits only for PID 1, slow to reap on this VM)."
    out = subprocess.run(['ps', '-eo', 'pid=,stat=,comm='], capture_output=True, text=True).stdout
    rows = [l.split(None, 2) for l in out.splitlines()]
    return {(pid, comm.strip()) for pid, stat, comm in rows if comm.strip().startswith(LEAKY) and not stat.startswith('Z')}

@pytest.fixture(scope='session', autouse=True)
def nothing_leaks():
    "Fail the session if it leaves a namespace, link or workload process behind."
    before = (_namespaces(), _links(), _procs())
    yield
    after = (_namespaces(), _links(), _procs())
    leaked = {kind: sorted(a - b) for kind, a, b in zip(('namespaces', 'links', 'processes'), after, before) if a - b}
    assert not leaked, f"tests leaked: {leaked}"
