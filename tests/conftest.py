"""Session-wide guard: whatever the tests create (namespaces, links, processes, containers, cgroups, overlay mounts,
BPF programs and maps) must be gone at the end.

`make test` runs the files on pytest-xdist workers (`-n TEST_WORKERS --dist loadgroup`, one more than the cores: a file's tests, and so its module fixtures,
stay on one worker). The guard then runs in the controller, around all the workers; a test marked `exclusive` (it compares the
whole host before and after, or measures time or CPU) runs while the other workers wait between their tests."""
import fcntl, glob, json, os, subprocess, tempfile, time, pathlib, contextlib, pytest

WORKER = os.environ.get('PYTEST_XDIST_WORKER')   # 'gw0', 'gw1', ... in a worker of `pytest -n N`; None in the controller or a plain run

# tests keep their ledgers apart from real runs, and each worker from the other's (a test that reaps dead runs reaps only its worker's);
# each worker names what it creates with a run id of its own
if WORKER:
    os.environ['RESEARCHKIT_STATE'] = tempfile.mkdtemp(prefix=f'rk-test-state-{WORKER}-')
    os.environ.pop('RESEARCHKIT_RUN_ID', None)
else: os.environ.setdefault('RESEARCHKIT_STATE', tempfile.mkdtemp(prefix='rk-test-state-'))
# Ctrl-C as in a terminal: a shell starts a background job (`make test &`, a CI step) with SIGINT ignored, and Python then installs no
# handler of its own, so the tests that send this process a real SIGINT (test_monitor, test_policy, ...) would get nothing
import signal as _signal
if _signal.getsignal(_signal.SIGINT) is _signal.SIG_IGN: _signal.signal(_signal.SIGINT, _signal.default_int_handler)

# the lock the workers share (made by the controller before it starts them; they inherit its environment)
if not WORKER: os.environ['RK_TEST_LOCK'] = tempfile.mkdtemp(prefix='rk-test-lock-')

# The costliest files first (their tests' seconds outside the exclusive group, measured with RK_TEST_TIMELINE on 3 workers,
# 2026-11-28; test_image runs after test_kube in one group), so that no worker is handed a long file while the others idle at
# the end; the rest keep their order. Only the order of whole files changes.
SLOWEST_FIRST = ('test_kube.py', 'test_hlf_ec.py', 'test_runtimes_web.py', 'test_library_notebooks.py', 'test_hlf_kata.py',
                 'test_ssh_testbed.py', 'test_image.py', 'test_cli.py', 'test_datapaths.py', 'test_ledger_network.py',
                 'test_study_notebooks.py', 'test_lsm_bpf.py', 'test_erasure.py', 'test_intervals.py', 'test_runtimes.py',
                 'test_fabload.py')

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

def _snapshot(): return (_namespaces(), _links(), _procs(), _containers(), _bpf())

def pytest_configure(config):
    config.addinivalue_line('markers', "exclusive: runs while no other test runs (it compares the whole host before and after, or "
                                       "measures time or CPU): the other xdist workers wait between their tests")

def pytest_sessionstart(session):
    if not WORKER: session.config._rk_before = _snapshot()

def pytest_sessionfinish(session, exitstatus):
    "Fail the session if it leaves a namespace, link, workload process, container, cgroup, mount, scratch dir or BPF program/map behind."
    before = getattr(session.config, '_rk_before', None)
    if WORKER or before is None: return
    after = (_namespaces(), _links(), _procs(), _containers(), _bpf_after(before[-1]))
    leaked = {kind: sorted(a - b) for kind, a, b in zip(('namespaces', 'links', 'processes', 'containers', 'bpf'), after, before) if a - b}
    if leaked:
        tr = session.config.pluginmanager.get_plugin('terminalreporter')
        if tr: tr.write_line(f"LEAK GUARD: tests leaked: {leaked}", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

# Files that must run on one worker, one after the other (`--dist loadgroup`; every other file is a group of its own, so its
# module fixtures start once). None today: the Kubernetes cluster and the Docker engine each run a containerd, and share only
# the shims' socket directory, which each leaves as it found it (`shim_dir_undo`), so they run side by side.
GROUPS = {}

@pytest.hookimpl(tryfirst=True)   # before xdist's own hook reads the groups
def pytest_collection_modifyitems(session, config, items):
    """The `exclusive` tests form one group that runs first, one test after the other (their files' module fixtures, all cheap,
    start again there): a test waiting to run alone waits once for the other workers' current tests, not once a file. In a
    GROUPS file they stay with it, in the file's order: its module fixtures (a Kubernetes cluster) start in its first test, and
    when that test was `exclusive` they started while the host was held (on an empty tool cache, 2026-11-28: 317 s of Go builds
    with every other worker waiting). A test that brings up much and measures little holds the host for its measuring only
    (the `alone` fixture). Then the costliest files first; otherwise pytest's order. (A plain run keeps pytest's order.)"""
    if not WORKER: return
    first = {}
    for i, it in enumerate(items): first.setdefault(it.path, i)
    alone = lambda it: it.get_closest_marker('exclusive') is not None
    group = lambda it: GROUPS.get(it.path.name) or ('exclusive' if alone(it) else it.path.stem)
    rank = lambda it: (group(it) != 'exclusive', SLOWEST_FIRST.index(it.path.name) if it.path.name in SLOWEST_FIRST else len(SLOWEST_FIRST),
                       first[it.path])
    items.sort(key=rank)   # stable
    for it in items: _in_group(it, group(it))

def _in_group(item, name:str):
    """What `@pytest.mark.xdist_group(name)` does under `--dist loadgroup`: the node id gets `@name`, and the controller sends the
    tests of one suffix to one worker. (xdist 3.8 writes the suffix to `item._nodeid`, which pytest 9 no longer reads: it keeps
    the id in `item._id`, so the mark alone groups nothing and a file's tests were spread over both workers.)"""
    item.add_marker(pytest.mark.xdist_group(name))
    if hasattr(item, '_id'):
        from _pytest.nodeid import coerce_node_id
        item._id = coerce_node_id(f"{item.nodeid}@{name}")
    else: item._nodeid = f"{item.nodeid}@{name}"

class _Turns:
    """The workers' shared lock: shared for most tests, alone for an `exclusive` one. A test waiting to run alone holds the gate, so the
    other workers cannot start test after test ahead of it; a run of `exclusive` tests in a row keeps the lock between them. A
    worker lets its lock go before it asks for the gate, so no worker waits at the gate while it holds the lock (no deadlock)."""
    def __init__(self): self.f, self.mode, self.alone_s, self.alone_wait_s = None, None, 0.0, 0.0

    def take(self, mode:int):
        if self.mode == mode: return
        self.give()
        d = pathlib.Path(os.environ['RK_TEST_LOCK'])
        with open(d/'gate', 'a') as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)
            self.f = open(d/'turn', 'a')
            fcntl.flock(self.f, mode)
        self.mode = mode   # (closing the gate's file let it go)

    def give(self):
        if self.f: self.f.close()   # closing the file lets the lock go
        self.f, self.mode = None, None

_turns = _Turns()

@pytest.fixture
def alone():
    """`with alone(): ...` runs the block while no other test runs, as a whole `exclusive` test does: for a test whose measuring part
    is short beside what it brings up first (a Fabric network in pods). What comes before the block runs beside the other workers'
    tests; the block waits for their current tests to end, holding the gate so that none starts meanwhile. In an `exclusive` test,
    or outside `make test`'s workers, it changes nothing. (RK_TEST_TIMELINE records each test's seconds alone and waiting.)"""
    @contextlib.contextmanager
    def hold():
        if not WORKER or _turns.mode == fcntl.LOCK_EX: yield; return
        t0 = time.time(); _turns.take(fcntl.LOCK_EX); t1 = time.time()
        try: yield
        finally:
            _turns.alone_wait_s += t1 - t0; _turns.alone_s += time.time() - t1
            _turns.take(fcntl.LOCK_SH)
    return hold

TIMELINE = os.environ.get('RK_TEST_TIMELINE')   # a file to append each test's turn and times to (`RK_TEST_TIMELINE=FILE make test`)

@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    "Around a test's setup, call and teardown (module fixtures start in their first test's setup and stop in their last one's teardown)."
    if not WORKER: return (yield)
    alone = lambda it: it is not None and it.get_closest_marker('exclusive') is not None
    t0 = time.time()
    _turns.take(fcntl.LOCK_EX if alone(item) else fcntl.LOCK_SH)
    t1 = time.time()
    try: return (yield)
    finally:
        if not (alone(item) and alone(nextitem)): _turns.give()
        if TIMELINE:   # a line per test: which worker, how long it waited for its turn, when it ran (tools/test-timeline reads them)
            with open(TIMELINE, 'a') as f:
                f.write(json.dumps({'worker': WORKER, 'test': item.nodeid, 'exclusive': alone(item), 'asked': t0, 'start': t1,
                                    'end': time.time(), 'alone_s': _turns.alone_s, 'alone_wait_s': _turns.alone_wait_s}) + '\n')
        _turns.alone_s = _turns.alone_wait_s = 0.0

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
