"""The monitor on real containers: a runc container spinning under a 0.25-core quota seen at 0.2 s (series length,
cores, completeness, the sampler's cost, records that re-plot it), runsc's sentry/gofer/app classes, a container
deleted mid-run recorded as `gone`, the sampler gone after stop / an exception / Ctrl-C / SIGKILL of the owner + reap,
the sampler on an SSH node, and bad input refused before anything starts."""
import os, sys, glob, math, time, signal, subprocess, textwrap
import polars as pl
import pytest
from researchkit.core import ConfigError, NotMeasurable, current_run_id, new_run_id
from researchkit.teardown import Teardown, Ledger, reap, state_dir, pid_alive
from researchkit.testbed.nodes import LocalNode
from researchkit.testbed.tools import tool_path
from researchkit.runtimes.container import Container, Mount
from researchkit.runtimes.adapters import get_runtime, Instance
from researchkit.runtimes.rootfs import host_rootfs
from researchkit.results.records import provenance, frame as records_frame
from researchkit.monitor import Monitor, MonitorError, series_records, series_frame, downsample, _undo
from _ssh_fixtures import ssh_hosts, ssh_host  # noqa: F401  (fixtures)

L = LocalNode()
IMG = str(host_rootfs(L))
BINDS = [Mount('/usr', '/usr', readonly=True), Mount('/etc', '/etc', readonly=True)]
SPIN = ['python3', '-c', 'while True: pass']
HOST = ['/sys/fs/cgroup/cpuacct', '/sys/fs/cgroup/memory']   # the root cgroups (this whole machine): a target needing no container

def _monitor_dirs() -> set:
    return set(glob.glob(f'/tmp/{current_run_id()}-monitor-*'))

def _gone(mon:Monitor, timeout:float=5) -> bool:
    "The sampler process has exited and its directory is removed."
    deadline = time.monotonic() + timeout
    while (pid_alive(mon.proc.pid, mon.proc.start) or os.path.exists(mon.dir)) and time.monotonic() < deadline: time.sleep(0.05)
    return not pid_alive(mon.proc.pid, mon.proc.start) and not os.path.exists(mon.dir)

@pytest.fixture(scope='module')
def spin():
    "One runc container spinning under a 0.25-core quota, sampled for ~2 s every 0.2 s, with the container's own CPU read around it."
    with Teardown() as td:
        i = get_runtime('runc').start(Container('mspin', IMG, SPIN, mounts=BINDS, cpus=0.25), teardown=td)
        i.wait_ready(lambda: i.cpu_seconds() > 0.02, timeout=30)
        c0 = i.cpu_seconds()
        with Monitor({'spin': i}, interval=0.2, cpus='0', teardown=td, labels={'spin': {'role': 'spinner', 'org': 'org1'}}) as mon:
            assert mon.proc.alive()
            time.sleep(2.0)
        c1 = i.cpu_seconds()
    return mon, c1 - c0

@pytest.mark.exclusive   # the `spin` fixture measures here: 0.25 +- 0.03 cores, samples 0.1-0.5 s apart, sampler < 0.05 core
def test_series_length_cores_and_completeness(spin):
    mon, container_cpu = spin
    c, f = mon.completeness, mon.frame()
    assert c['expected'] == math.floor(mon.end['t_stop'] / 0.2) + 1 and 11 <= c['expected'] <= 13, c   # 2 s at 0.2 s, plus the stop
    assert c['expected'] == c['taken'] + c['missed'] and 0 <= c['late'] <= c['taken'] and not c['gone'], c
    assert c['missed'] <= 1 and c['taken'] >= 10, c
    assert len(f) == c['taken'] and f['container'].unique().to_list() == ['spin'] and set(f['state']) == {'ok'}
    assert f['k'].is_unique().all() and f['t'][0] < 0.05
    assert f['t'].diff().drop_nulls().is_between(0.1, 0.5).all(), f['t'].to_list()   # absolute deadlines 0.2 s apart
    span = f['t'][-1] - f['t'][0]
    cores = (f['cpu_s'][-1] - f['cpu_s'][0]) / span
    assert abs(cores - 0.25) <= 0.03, cores                                              # the quota, seen through the series
    assert abs(f['cpu_cores'].drop_nulls().median() - 0.25) <= 0.05, f['cpu_cores'].to_list()
    assert f['cpu_s'][-1] <= container_cpu <= f['cpu_s'][-1] + 0.15, (f['cpu_s'][-1], container_cpu)  # agrees with Instance.cpu_seconds
    assert (f['mem_bytes'] > 0).all() and (f['working_set_bytes'] <= f['mem_bytes']).all() and (f['working_set_bytes'] > 0).all()
    assert set(f['runtime']) == {'runc'} and set(f['role']) == {'spinner'} and set(f['org']) == {'org1'}
    assert mon.header['affinity'] == [0]                                                  # pinned where asked
    cost = mon.cost
    assert mon.cost_cpu_s > 0 and cost['loop_cpu_s'] > 0 and cost['startup_cpu_s'] > 0
    assert cost['cores'] < 0.05, cost                                                     # one target at 5 Hz: far below 5 % of a core
    assert mon.classes().is_empty()                                                       # runc: no classes unless asked
    m = mon.metrics()
    assert m['monitor_expected'][0] == c['expected'] and m['monitor_missed'][0] == c['missed'] and m['monitor_cpu_s'][0] > 0

@pytest.mark.exclusive   # binned CPU 0.17-0.33 cores (the `spin` fixture measures in the setup of the first of these two tests)
def test_series_records_replot(spin):
    mon, _ = spin
    f = mon.frame()
    prov = provenance('local', L)
    recs = series_records(f, 'demo', 'monitor', {'rate': 10}, 0, prov, every=0.4)
    df = records_frame(recs)                                      # valid records (schema and all)
    assert set(df['metric']) == {'cpu_cores_series', 'working_set_bytes_series'} and set(df['unit']) == {'cores', 'bytes'}
    back = series_frame(df, 'cpu_cores')
    assert set(back.columns) >= {'rate', 'container', 't', 'role', 'org', 'runtime', 'metric', 'value', 'unit'}
    assert len(back) == len(downsample(f, 0.4)) and len(back) >= 5
    assert back['value'].is_between(0.17, 0.33).all(), back['value'].to_list()
    # binned CPU comes from the cumulative counter: the bins add up to the whole series
    ds = downsample(f, 0.4)
    assert abs((ds['cpu_cores'] * ds['t'].diff().fill_null(ds['t'][0] - f['t'][0])).sum() - f['cpu_s'][-1]) < 1e-6
    with pytest.raises(ConfigError) as e: series_records(f, 'demo', 'monitor', {'t': 1}, 0, prov)
    assert e.value.where == 'point.t'
    with pytest.raises(ConfigError) as e: series_records(f, 'demo', 'monitor', {}, 0, prov, metrics=('nope',))
    assert e.value.where == 'metrics'

@pytest.mark.skipif(not tool_path('runsc'), reason='runsc is not built (tools/install-go-tools)')
@pytest.mark.exclusive   # the app class at 0.15-0.3 cores and all classes at 0.25 +- 0.03 cores under the quota
def test_runsc_sentry_gofer_app():
    with Teardown() as td:
        i = get_runtime('runsc').start(Container('mspinsc', IMG, SPIN, mounts=BINDS, cpus=0.25), teardown=td)
        with Monitor({'sc': i}, interval=0.2, procs_every=2, cpus='0', teardown=td) as mon:
            time.sleep(2.0)
    cl, f = mon.classes(), mon.frame()
    assert set(cl['class']) == {'sentry', 'gofer', 'app'}, cl
    last = {r['class']: r for r in cl.filter(pl.col('t') == cl['t'].max()).iter_rows(named=True)}
    assert last['sentry']['procs'] == 1 and last['gofer']['procs'] == 1 and last['app']['procs'] >= 1, last
    app = cl.filter(pl.col('class') == 'app').sort('t')['cpu_cores'].drop_nulls()
    # the spinning code runs in the systrap stubs, at the 0.25-core quota once it spins: the first sample's interval holds the
    # app's start (CI read 0.149968 there, then 0.22-0.25), so the steady state is every sample after it
    assert len(app) >= 4 and app[1:].is_between(0.15, 0.3).all() and app[0] <= 0.3, app.to_list()
    # the classes account for the container's cgroup CPU over the same window (processes do not exit here)
    tot = cl.group_by('t').agg(pl.col('cpu_s').sum()).sort('t')
    span = tot['t'][-1] - tot['t'][0]
    cg = f.filter(pl.col('t').is_between(tot['t'][0], tot['t'][-1]))
    by_class = (tot['cpu_s'][-1] - tot['cpu_s'][0]) / span
    by_cgroup = (cg['cpu_s'][-1] - cg['cpu_s'][0]) / span
    assert abs(by_class - by_cgroup) < 0.03, (by_class, by_cgroup)
    assert abs(by_cgroup - 0.25) < 0.03, by_cgroup                          # sentry + gofer + app together under the quota

@pytest.mark.exclusive   # `gone` recorded within 0.25 s of the delete
def test_deleted_container_becomes_gone():
    with Teardown() as td:
        a = get_runtime('runc').start(Container('mkeep', IMG, ['sleep', '60'], mounts=BINDS), teardown=td)
        b = get_runtime('runc').start(Container('mdrop', IMG, ['sleep', '60'], mounts=BINDS), teardown=td)
        with Monitor({'keep': a, 'drop': b}, interval=0.1, teardown=td) as mon:
            time.sleep(0.5)
            b.delete()
            t_del = time.monotonic() - mon.header['t0_mono']
            time.sleep(0.5)
    c, f = mon.completeness, mon.frame()
    assert list(c['gone']) == ['drop'] and 0.3 < c['gone']['drop'] <= t_del + 0.25, (c, t_del)
    drop, keep = f.filter(pl.col('container') == 'drop'), f.filter(pl.col('container') == 'keep')
    assert drop['state'].to_list()[-1] == 'gone' and drop['state'].to_list().count('gone') == 1    # recorded once, then not read
    assert drop['cpu_s'][-1] is None and drop['t'][-1] == c['gone']['drop']
    assert len(keep) == c['taken'] and set(keep['state']) == {'ok'}                              # the other target goes on
    assert c['expected'] == c['taken'] + c['missed']
    with pytest.raises(ConfigError, match='deleted') as e: Monitor({'drop': b})   # a deleted container is refused before anything starts
    assert e.value.where == 'targets.drop'

def test_sampler_gone_after_stop_and_exception():
    before = _monitor_dirs()
    mon = Monitor({'host': HOST}, interval=0.05)
    with mon:
        assert mon.proc.alive() and os.path.isdir(mon.dir)
        time.sleep(0.3)
    assert _gone(mon) and mon.completeness['taken'] >= 4
    assert mon.stop() is mon                                   # idempotent
    with pytest.raises(MonitorError): mon.start()              # one Monitor per point
    with pytest.raises(RuntimeError, match='boom'):
        with Teardown() as td:
            with Monitor({'host': HOST}, interval=0.05, teardown=td) as m2:
                time.sleep(0.2); raise RuntimeError('boom')
    assert _gone(m2) and m2.completeness['taken'] >= 2        # stopped cleanly: the series is kept
    with pytest.raises(KeyboardInterrupt):                     # a real SIGINT to this process mid-run
        with Teardown() as td:
            with Monitor({'host': HOST}, interval=0.05, teardown=td) as m3:
                os.kill(os.getpid(), signal.SIGINT); time.sleep(5)
    assert _gone(m3)
    led = state_dir() / f'{current_run_id()}.jsonl'
    assert not [e for e in (Ledger.read(led)[1] if led.exists() else []) if 'monitor' in e['label']]   # nothing left for reap
    assert _monitor_dirs() == before

def test_ledger_undo_kills_the_sampler():
    "The undo registered before the sampler exists (kill by its spec path, remove the dir) works on its own; stop() then says the summary is missing."
    mon = Monitor({'host': HOST}, interval=0.05).start()
    try:
        time.sleep(0.2)
        L.run(_undo(mon.dir))
        assert _gone(mon)
        with pytest.raises(MonitorError, match='without its summary'): mon.stop()
        with pytest.raises(MonitorError): mon.completeness
    finally:
        mon._quiet_stop()

CHILD = textwrap.dedent('''
    import time
    from researchkit.teardown import Teardown
    from researchkit.monitor import Monitor
    td = Teardown()
    mon = Monitor({'host': ['/sys/fs/cgroup/cpuacct', '/sys/fs/cgroup/memory']}, interval=0.1, teardown=td).start()
    print(mon.proc.pid, mon.proc.start, mon.dir, flush=True)
    time.sleep(120)
''')

def test_reap_after_sigkill_of_owner():
    rid = new_run_id()
    env = {**os.environ, 'RESEARCHKIT_RUN_ID': rid, 'RESEARCHKIT_STATE': str(state_dir())}
    p = subprocess.Popen([sys.executable, '-c', CHILD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        pid, start, d = p.stdout.readline().split()
        assert pid_alive(int(pid), start) and os.path.isdir(d) and d.startswith(f'/tmp/{rid}-monitor-')
    finally:
        p.send_signal(signal.SIGKILL); p.wait()
    time.sleep(0.3)
    assert pid_alive(int(pid), start)                          # the sampler outlives its owner …
    undone = reap()
    assert any(rid in u for u in undone), undone
    deadline = time.monotonic() + 5
    while pid_alive(int(pid), start) and time.monotonic() < deadline: time.sleep(0.05)
    assert not pid_alive(int(pid), start) and not os.path.exists(d)   # … until the teardown is replayed

def test_sampler_on_an_ssh_node(ssh_host):
    n = ssh_host.ssh_node('mon-remote')
    with Teardown() as td:
        with Monitor({'host': HOST}, interval=0.1, node=n, cpus='1', teardown=td) as mon:
            time.sleep(0.6)
    c = mon.completeness
    assert c['taken'] >= 5 and c['expected'] == c['taken'] + c['missed'] and mon.header['affinity'] == [1]
    assert mon.frame()['cpu_cores'].drop_nulls().len() == c['taken'] - 1
    assert not n.run(f"test -e {mon.dir}", check=False).ok and not pid_alive(mon.proc.pid, mon.proc.start)

@pytest.mark.parametrize('kw,field', [
    (dict(interval=0), 'interval'), (dict(interval=-0.5), 'interval'), (dict(interval=float('nan')), 'interval'), (dict(interval=True), 'interval'),
    (dict(targets={}), 'targets'), (dict(targets=[HOST]), 'targets'), (dict(targets={'x': 42}), 'targets.x'), (dict(targets={'x': ['rel']}), 'targets.x'),
    (dict(targets={'x': '/sys/fs/cgroup/cpuacct/rk-no-such-cgroup'}), 'targets.x'), (dict(targets={'x': '/sys/fs/cgroup/memory'}), 'targets.x'),
    (dict(targets={'': HOST}), 'targets.'), (dict(cpus='9-3'), 'cpus'), (dict(cpus=[0, 'a']), 'cpus'), (dict(cpus='64'), 'cpus'),
    (dict(cpus={'0': 1}), 'cpus'), (dict(labels={'x': {}}), 'labels.x'), (dict(labels={'host': {'cpu_s': 1}}), 'labels.host.cpu_s'),
    (dict(labels={'host': {'role': [1]}}), 'labels.host.role'), (dict(procs='all'), 'procs'), (dict(procs_every=1.5), 'procs_every'),
    (dict(max_s=0), 'max_s'), (dict(node='local'), 'node'), (dict(python='python3'), 'python')])
def test_bad_input_fails_before_anything(kw, field):
    before = _monitor_dirs()
    with Teardown() as td:
        with pytest.raises(ConfigError) as e: Monitor(**{'targets': {'host': HOST}, 'teardown': td, **kw})
        assert len(td) == 0
    assert e.value.where == field, e.value
    assert _monitor_dirs() == before

def test_kata_target_is_not_measurable_here():
    "No Kata container can run on this host; a Kata Instance as a target says why the shim/VMM lookup is missing instead of half-measuring."
    with Teardown() as td:
        inst = Instance(get_runtime('kata'), Container('k', IMG, ['true']), f'{current_run_id()}-k.001', None, td)
        with pytest.raises(NotMeasurable, match='shim'): Monitor({'k': inst})
        assert len(td) == 0
