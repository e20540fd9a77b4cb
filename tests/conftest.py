"""Session-wide guard: whatever the tests create (namespaces, links, processes, containers, cgroups, overlay mounts,
BPF programs and maps) must be gone at the end."""
import glob, json, os, subprocess, tempfile, time, pytest

# tests keep their ledgers apart from real runs
os.environ.setdefault('RESEARCHKIT_STATE', tempfile.mkdtemp(prefix='rk-test-state-'))

LEAKY = ('iperf3', 'sockperf', 'sshd', 'mpirun', 'orted', 'alltoall', 'vegeta', 'apache2', 'runsc', 'runc', 'crun', 'dockerd', 'containerd',
         'etcd', 'kube-', 'kubelet', 'catatonit')

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

def _containers():
    "Containers of any runtime (ids carry the run prefix rk....), their cgroups, overlay mounts and scratch dirs."
    found = set()
    for name, cmd in (('runc', 'runc list -q'), ('crun', 'crun list -q'), ('runsc', 'runsc list -q')):
        if name == 'runsc':
            from researchkit.testbed.tools import tool_path
            p = tool_path('runsc')
            if not p: continue
            cmd = f"{p} list -q"
        r = subprocess.run(['sh', '-c', cmd + ' 2>/dev/null'], capture_output=True, text=True)
        found |= {f"{name}:{l.strip()}" for l in r.stdout.splitlines() if l.strip().startswith('rk')}
    found |= {f"cgroup:{p}" for p in glob.glob('/sys/fs/cgroup/*/researchkit/rk*')}
    with open('/proc/self/mountinfo') as f:
        found |= {f"mount:{l.split()[4]}" for l in f if '/var/lib/researchkit/containers/' in l.split()[4]}
    found |= {f"scratch:{p}" for p in glob.glob('/var/lib/researchkit/containers/rk*')}
    return found

def _bpf():
    "BPF programs and maps loaded in the kernel (id and name)."
    out = set()
    for kind in ('prog', 'map'):
        r = subprocess.run(['bpftool', '-j', kind, 'list'], capture_output=True, text=True)
        try: out |= {f"{kind}:{x['id']}:{x.get('name', '')}" for x in json.loads(r.stdout or '[]')}
        except ValueError: pass
    return out

def _bpf_after(before:set, timeout:float=2.0) -> set:
    "BPF objects now loaded, polled until no new ones are left or `timeout` passes (the kernel frees maps asynchronously)."
    deadline = time.monotonic() + timeout
    while (now := _bpf()) - before and time.monotonic() < deadline: time.sleep(0.1)
    return now

@pytest.fixture(scope='session', autouse=True)
def nothing_leaks():
    "Fail the session if it leaves a namespace, link, workload process, container, cgroup, mount, scratch dir or BPF program/map behind."
    before = (_namespaces(), _links(), _procs(), _containers(), _bpf())
    yield
    after = (_namespaces(), _links(), _procs(), _containers(), _bpf_after(before[-1]))
    leaked = {kind: sorted(a - b) for kind, a, b in zip(('namespaces', 'links', 'processes', 'containers', 'bpf'), after, before) if a - b}
    assert not leaked, f"tests leaked: {leaked}"

@pytest.fixture
def background():
    "`background(*ARGS)` starts `researchkit ARGS` in the background; whatever still runs when the test ends (it failed mid-way) gets Ctrl-C and its teardown time."
    from _cli import start, stop
    started = []
    def run(*args):
        started.append(start(*args)); return started[-1]
    yield run
    for p in started: stop(p)

def _sigint_disposition():
    "How this process would take a Ctrl-C: the SIGINT handler and whether SIGINT is blocked in the main thread."
    import signal
    return signal.getsignal(signal.SIGINT), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])

@pytest.fixture(autouse=True)
def ctrl_c_still_interrupts():
    """Fail the test that leaves this process's Ctrl-C changed (a handler replaced, or SIGINT blocked), and restore it: the tests
    that send this process a real SIGINT (test_monitor, test_policy, ...) must get KeyboardInterrupt whatever ran before them."""
    import signal
    before = _sigint_disposition()
    yield
    after = _sigint_disposition()
    if after != before:
        signal.signal(signal.SIGINT, before[0])
        if after[1] and not before[1]: signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        pytest.fail(f"this test left Ctrl-C changed: SIGINT handler {after[0]!r}, blocked {after[1]} (was {before[0]!r}, blocked {before[1]})")
