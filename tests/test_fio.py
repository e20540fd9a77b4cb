"""fio for real: the paper's job and the open-per-I/O variant on a temp dir and on tmpfs, the open() counts checked
with strace, inside a runc container, and bad input refused (naming the field) before fio starts."""
import glob, os, re, shlex, tempfile, pytest
from researchkit.core import ConfigError
from researchkit.testbed.nodes import LocalNode
from researchkit.runtimes.cnode import ContainerNode
from researchkit.runtimes.container import Mount
from researchkit.workloads.fio import fio, fio_argv, parse_fio, tool_versions

L = LocalNode()

@pytest.fixture
def tmpdir_():
    d = tempfile.mkdtemp(prefix='rk-fio-test-')
    yield d
    L.run(f"rm -rf {shlex.quote(d)}")

@pytest.mark.exclusive   # job_runtime 990-1100 ms and > 100 IOPS
def test_paper_job_on_a_temp_dir(tmpdir_):
    m = fio(L, directory=tmpdir_, nrfiles=100, filesize=16 << 10, bs=4096, seconds=1, cpus=0)
    w = m['write_iops'][0]
    assert w > 100 and abs(m['write_bw'][0] / w - 4096) < 64 and m['write_ios'][0] >= w * 0.8
    assert 0 < m['write_clat_p50_ns'][0] <= m['write_clat_p99_ns'][0] and m['write_clat_mean_ns'][0] > 0
    assert m['read_ios'][0] == 0 and m['file_opens'][0] == 100 and m['files'][0] == 100 and 990 <= m['job_runtime_ms'][0] <= 1100
    assert all(isinstance(u, str) and u for _, u in m.values())
    assert os.listdir(tmpdir_) == []  # its subdirectory is gone

def _openat_counts(variant, d, **kw):
    "Run fio's argv under strace; (openat calls on the job's files, fio's total_ios)."
    sub = f"{d}/job"; os.mkdir(sub)
    trace = f"{d}/trace"
    r = L.run(f"strace -f -qq -e trace=openat -o {trace} {shlex.join(fio_argv(variant, sub, **kw))}", timeout=120)
    opens = sum(1 for l in open(trace) if f'"{sub}/' in l)
    return opens, parse_fio(r.stdout, variant, kw['nrfiles'])

@pytest.mark.exclusive   # > 1000 writes in 1 s under strace
def test_open_counts_are_what_the_notebook_says(tmpdir_):
    "'paper': 2 opens per file (layout + job), none per I/O; 'open': exactly one open per I/O."
    opens, m = _openat_counts('paper', tmpdir_, nrfiles=50, filesize=16 << 10, bs=4096, seconds=1)
    assert opens == 2 * 50 and m['write_ios'][0] > 1000
    L.run(f"rm -rf {tmpdir_}/job {tmpdir_}/trace")
    opens, m = _openat_counts('open', tmpdir_, nrfiles=50, filesize=4096, bs=4096, seconds=1)
    assert m['file_opens'][0] == m['write_ios'][0] == opens > 50

@pytest.mark.exclusive   # > 1000 writes in 1 s, p50 completion latency < 1 ms
def test_open_variant_on_tmpfs():
    m = fio(L, variant='open', nrfiles=100, seconds=1, cpus=0)
    assert m['file_opens'][0] == m['write_ios'][0] > 1000 and 0 < m['write_clat_p50_ns'][0] < 1e6
    assert glob.glob('/dev/shm/rk-fio-*') == []

def test_inside_a_runc_container():
    box = ContainerNode('runc', name='fio', mounts=[Mount('tmpfs', '/rk-fio', type='tmpfs', options=('size=32m',))])
    m = fio(box, directory='/rk-fio', nrfiles=100, filesize=16 << 10, seconds=1)
    assert m['write_ios'][0] > 100 and m['file_opens'][0] == 100
    assert box.last.id and not box.last.alive()
    with pytest.raises(ConfigError) as e:  # 100 MiB do not fit the 32 MiB tmpfs: refused before fio starts
        fio(box, directory='/rk-fio', nrfiles=100, filesize=1 << 20, seconds=1)
    assert e.value.where == 'filesize'

@pytest.mark.parametrize('kw,field', [
    (dict(variant='randwrite'), 'variant'), (dict(directory='tmp/x'), 'directory'), (dict(directory='/a b'), 'directory'),
    (dict(directory='/a:b'), 'directory'), (dict(directory='/nonexistent/rk-fio'), 'directory'), (dict(directory=''), 'directory'),
    (dict(nrfiles=0), 'nrfiles'), (dict(nrfiles=-5), 'nrfiles'), (dict(nrfiles=10**6), 'nrfiles'), (dict(nrfiles=True), 'nrfiles'),
    (dict(bs=100), 'bs'), (dict(bs=2 << 20), 'bs'), (dict(filesize=5000), 'filesize'), (dict(filesize=2048), 'filesize'),
    (dict(nrfiles=100_000, filesize=1 << 20), 'filesize'), (dict(seconds=0), 'seconds'), (dict(seconds=1.5), 'seconds'),
    (dict(seconds=10**5), 'seconds'), (dict(ramp=-1), 'ramp'), (dict(margin=-1), 'margin')])
def test_bad_input_fails_before_running(kw, field):
    before = glob.glob('/dev/shm/rk-fio-*')
    with pytest.raises(ConfigError) as e: fio(L, **kw)
    assert e.value.where == field and glob.glob('/dev/shm/rk-fio-*') == before

def test_tool_versions():
    assert re.fullmatch(r'fio-3\.\d+', tool_versions(L)['fio'])
