"""The study's Apache + PHP app under real runtimes, in a pod namespace, reached from another pod."""
import os, glob, pytest
from researchkit.core import ConfigError
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import LocalNode
from researchkit.runtimes.adapters import get_runtime
from researchkit.runtimes.container import SCRATCH_ROOT
from researchkit.runtimes.rootfs import rootfs_image
from researchkit.workloads.webapp import (web_container, endpoint_url, http_ready, http_get, get_json, expected_cpu, app_dir,
                                          DOCROOT, IO_CYCLES, MATRIX_N)
from researchkit.workloads.vegeta import attack
from _pods_fixtures import pods, leftovers

@pytest.fixture(scope='module')
def image():
    return str(rootfs_image())  # cached after the first build (shared, never written)

def runtime(name):
    rt = get_runtime(name)
    ok, why = rt.available(deep=False)
    if not ok: pytest.skip(f"{name} not available here: {why}")
    return rt

def start(rt, image, srv, cli, ip, td, **kw):
    inst = rt.start(web_container(image, netns=srv.netns, **kw), teardown=td)
    return inst.wait_ready(lambda: http_ready(cli, endpoint_url(ip, 'cpu')), timeout=60)

@pytest.mark.parametrize('rt_name,app', [('process', 'bind'), ('runc', 'bind'), ('runc', 'image'), ('runsc', 'image')])
def test_endpoints_do_the_work(rt_name, app, image):
    rt = runtime(rt_name)
    with pods(2) as ((srv, cli), ips, td):
        inst = start(rt, image, srv, cli, ips[0], td, app=app)
        code, body, _ = http_get(cli, f"http://{ips[0]}/")   # the app's site only (its docroot's listing): Debian's default site is hidden either way
        assert code == 200 and 'cpu.php' in body and 'Debian Default Page' not in body, (code, body[:300])
        for seed in (0, 7):  # the product is right: recomputed here
            got = get_json(cli, endpoint_url(ips[0], 'cpu', query=f'seed={seed}'))
            assert {k: got[k] for k in ('n', 'seed', 'sum', 'md5')} == expected_cpu(seed) and got['n'] == MATRIX_N
            assert 0 < got['server_s'] <= got['client_s']
        io = get_json(cli, endpoint_url(ips[0], 'io'))
        assert io['cycles'] == IO_CYCLES == 5000 and io['bytes'] == 5000 * io['file_bytes'] == 5000 * 4096
        assert io['left'] == 0 and io['dir'] == '/tmp' and 0 < io['server_s'] <= io['client_s']
        if rt_name != 'runsc':   # runsc keeps its writes in its own overlay (overlay2 root:self), not in the bundle's upper dir
            assert glob.glob(f"{inst.bundle.dir}/upper/tmp/rkio-*") == []  # no file left in the container's writable layer
        assert inst.cpu_seconds() > 0
        assert 'resuming normal operations' in inst.log()  # Apache's error log goes to the container log
    assert not os.path.exists(inst.bundle.dir)
    assert not os.path.exists(image + DOCROOT)  # nothing written into the cached image

@pytest.mark.parametrize('rt_name', ['process', 'runc'])
def test_low_rate_attack_all_succeed(rt_name, image):
    rt = runtime(rt_name)
    with pods(2) as ((srv, cli), ips, td):
        tag = srv.netns.rsplit('-', 1)[0]
        start(rt, image, srv, cli, ips[0], td, cpuset='0')
        for ep, rate in (('cpu', 5), ('io', 2)):
            m = attack(cli, endpoint_url(ips[0], ep), rate=rate, duration=2, timeout=10, cpus='1')
            assert m['requests'] == 2 * rate and m['success'] == 1.0 and m['code_200'] == m['requests'], m
            assert m['errors'] == [] and m['bytes_in_mean'] > 50
    assert leftovers(tag) == []

def test_access_log_and_limits(image):
    rt = runtime('runc')
    with pods(2) as ((srv, cli), ips, td):
        inst = start(rt, image, srv, cli, ips[0], td, access_log=True, cpus=0.5, memory_mb=256)
        get_json(cli, endpoint_url(ips[0], 'cpu'))
        assert 'GET /cpu.php' in inst.log()
        assert http_get(cli, endpoint_url(ips[0], 'cpu').replace('cpu.php', 'nope.php'))[0] == 404

def test_quiet_by_default(image):
    rt = runtime('process')
    with pods(2) as ((srv, cli), ips, td):
        inst = start(rt, image, srv, cli, ips[0], td)
        get_json(cli, endpoint_url(ips[0], 'cpu'))
        assert 'GET /cpu.php' not in inst.log()
        logs = glob.glob(f"{inst.bundle.dir}/upper/var/log/apache2/*access*")  # Debian opens other_vhosts_access.log at start
        assert all(os.path.getsize(p) == 0 for p in logs), logs  # ... but no request is written to it

def test_not_ready_when_nobody_listens():
    with pods(2) as ((srv, cli), ips, td):
        assert http_ready(cli, endpoint_url(ips[0], 'cpu'), timeout=1) is False
        code, body, _ = http_get(cli, endpoint_url(ips[0], 'io'), timeout=1)
        assert code == 0 and 'refused' in body.lower()

@pytest.mark.parametrize('kw,field', [(dict(cpus=0), 'cpus'), (dict(cpus=99), 'cpus'), (dict(name='Web!'), 'name'),
                                      (dict(cpuset='0-'), 'cpuset'), (dict(memory_mb=0), 'memory_mb'),
                                      (dict(io_file_bytes=0), 'io_file_bytes'), (dict(access_log='yes'), 'access_log')])
def test_bad_input_fails_before_starting(kw, field):
    td = Teardown()
    with pytest.raises(ConfigError) as e:
        get_runtime('runc').start(web_container('/usr', netns=None, **kw), teardown=td)
    assert e.value.where == field and len(td) == 0

def test_bad_endpoint():
    with pytest.raises(ConfigError) as e: endpoint_url('198.18.0.10', 'db')
    assert e.value.where == 'endpoint'
    assert endpoint_url('198.18.0.10', 'io', port=8080) == 'http://198.18.0.10:8080/io.php'

def test_app_dir_is_shared_and_complete():
    a, b = app_dir(), app_dir()
    assert a == b and os.path.isfile(f"{a}/.complete") and sorted(os.listdir(f"{a}/www")) == ['cpu.php', 'input.txt', 'io.php']
    assert os.listdir(f"{a}/sites") == ['rkweb.conf'] and app_dir(io_file_bytes=10) != a
    assert not glob.glob(f"{a}.tmp-*")
