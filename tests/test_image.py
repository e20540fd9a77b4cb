"""The shared-reproduction image: the repository's Dockerfile built by a real Docker engine started here (no registry:
local base images), JupyterLab answering inside it, `researchkit doctor` and the cni-net smoke study run inside it, the
records read back, and nothing of the engine's footprint left on the host (its links, iptables lines, ip_forward, mounts,
cgroups, paths, processes: the host is shared with the other test worker, whose own come and go meanwhile).

The first build on a machine took 96 s here (Debian packages and the Python environment downloaded inside the image;
the pinned Go tools come from this host's builds); later ones reuse the engine's layer cache (~/.cache/researchkit/docker)
up to the `COPY` of the checkout (8 s)."""
import json, os, pathlib, subprocess, sys, time, pytest
from researchkit.core import project_root
from researchkit.results.store import ResultStore
from researchkit.core import NotMeasurable, new_run_id
from researchkit.runtimes.docker_engine import (DockerEngine, engine_unavailable, install_engine, base_images, tools_image,
                                                build_image, state_diff)

pytestmark = pytest.mark.timeout(3600)
TAG = 'researchkit:test'

@pytest.fixture(scope='module')
def engine():
    try: install_engine()         # docker.io from Debian, no service started (the project installs what its tests need)
    except NotMeasurable as e: pytest.skip(f"no Docker engine on this machine: {e}")
    why = engine_unavailable()
    if why: pytest.skip(f"no Docker engine on this machine: {why}")
    eng = DockerEngine().start()
    yield eng
    eng.stop()                    # idempotent: test_host_left_as_found stopped it already

@pytest.fixture(scope='module')
def image(engine):
    args = base_images(engine)
    args['TOOLS_IMAGE'] = tools_image(engine)
    info = build_image(engine, TAG, build_args=args, context=project_root())
    print(f"image {TAG}: built in {info['seconds']} s ({info['cached_steps']}/{info['steps']} steps cached), "
          f"{info['size_bytes'] / 2**30:.2f} GiB")
    return {**info, 'build_args': args}

@pytest.fixture(scope='module')
def container(engine, image):
    name = f"{engine.run_id}-image"
    # --privileged: namespaces, tc and BPF inside; --network none: a namespace of its own with loopback only
    engine.docker('run', '-d', '--privileged', '--network', 'none', '--name', name, TAG, timeout=120)
    yield name
    engine.docker('rm', '-f', name, check=False, timeout=120)

def in_container(engine, name, *cmd, timeout=600, check=True):
    return engine.docker('exec', name, *cmd, timeout=timeout, check=check)

def test_image_is_the_checkout(engine, image):
    "The image holds this checkout's files, researchkit installed from them, and JupyterLab as its command."
    assert image['size_bytes'] > 0 and image['steps'] > 0
    cfg = json.loads(engine.docker('image', 'inspect', TAG).stdout)[0]['Config']
    assert cfg['Cmd'][:2] == ['jupyter', 'lab'] and cfg['User'] == 'jovyan' and cfg['WorkingDir'] == '/home/jovyan'
    r = engine.docker('run', '--rm', '--network', 'none', TAG, 'sh', '-c',
                      'sha256sum pyproject.toml Dockerfile && .venv/bin/python -c "import researchkit; print(researchkit.__file__)"')
    here = subprocess.run(['sha256sum', 'pyproject.toml', 'Dockerfile'], cwd=project_root(), capture_output=True, text=True).stdout
    assert r.stdout.startswith(here) and '/home/jovyan/researchkit/__init__.py' in r.stdout

LAB_PROBE = """import json, subprocess, urllib.request
srv = json.loads(subprocess.run(['.venv/bin/jupyter', 'server', 'list', '--json'], capture_output=True, text=True).stdout.splitlines()[0])
api = json.load(urllib.request.urlopen('http://127.0.0.1:8888/api', timeout=5))
page = urllib.request.urlopen(f"http://127.0.0.1:8888/lab?token={srv['token']}", timeout=10).read().decode()
print(json.dumps({'server': api['version'], 'lab_page': 'JupyterLab' in page}))
"""

def test_jupyterlab_answers(engine, container):
    "JupyterLab, the image's command, answers HTTP inside the container: the server's API and the /lab page."
    deadline, r = time.monotonic() + 120, None
    while time.monotonic() < deadline:
        r = engine.docker('exec', '-i', container, '.venv/bin/python', '-', input=LAB_PROBE, timeout=60, check=False)
        if r.ok: break
        time.sleep(1)
    assert r is not None and r.ok, (r.stderr if r else '') + engine.docker('logs', container, check=False).stderr[-1500:]
    got = json.loads(r.stdout)
    assert got['lab_page'] and got['server'].split('.')[0].isdigit()

def test_doctor_inside(engine, container):
    "`researchkit doctor` runs inside the image as its user (root work through sudo) and finds runc and the network tools."
    r = in_container(engine, container, '.venv/bin/researchkit', 'doctor', timeout=600, check=False)
    assert r.rc == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert 'runc' in r.stdout and 'iperf3' in r.stdout

def test_smoke_study_inside(engine, container, tmp_path):
    "The cni-net smoke study runs end to end inside the container; its records, read back here, are the container's."
    r = in_container(engine, container, '.venv/bin/researchkit', 'run', 'cni-net', '--profile', 'smoke', '--no-progress',
                     '--results', '/tmp/rk-smoke/results', '--figures', '/tmp/rk-smoke/figures', timeout=900, check=False)
    assert r.rc == 0, r.stdout[-2000:] + r.stderr[-2000:]
    engine.docker('cp', f"{container}:/tmp/rk-smoke/results", str(tmp_path/'results'), timeout=120)
    df = ResultStore(tmp_path/'results').load('cni-net', expand=False)
    assert df.height > 0 and set(df['study']) == {'cni-net'} and set(df['profile']) == {'smoke'}
    hostname = in_container(engine, container, 'hostname', timeout=30).stdout.strip()
    assert set(df['hostname']) == {hostname}
    tput = df.filter(df['metric'] == 'throughput_mbit')['value']
    assert tput.len() > 0 and (tput > 0).all()     # real packets through the container's own kernel devices
    figs = in_container(engine, container, 'sh', '-c', 'ls /tmp/rk-smoke/figures/cni-net', timeout=30).stdout.split()
    assert any(f.endswith('.png') for f in figs)

def test_binder_without_privileges(engine, image):
    "What a Binder user gets (no --privileged): the claims, the report and a study notebook on the committed records."
    r = engine.docker('run', '--rm', '--network', 'none', TAG, 'sh', '-c',
                      'researchkit claims cni-net --json > /tmp/claims.json && researchkit report --figures /tmp/fig >/dev/null '
                      '&& papermill --no-progress-bar --log-level ERROR nbs/studies/cni-net.ipynb /tmp/cni-net.ipynb && cat /tmp/claims.json && ls /tmp/fig',
                      timeout=900, check=False)
    assert r.rc == 0, r.stdout[-2000:] + r.stderr[-2000:]
    claims = json.loads(r.stdout[:r.stdout.rindex(']') + 1])
    assert claims and {c['verdict'] for c in claims} <= {'reproduced', 'refuted', 'inconclusive', 'not measurable'}
    assert 'REPORT.md' in r.stdout

BINDER_TAG, BINDER_UID = 'researchkit-binder:test', '1000'

@pytest.fixture(scope='module')
def binder_image(engine, tmp_path_factory):
    "binder/ built the way Binder builds it: repo2docker (which reads binder/ before the root Dockerfile) on the private engine, with a local stand-in for the public base image and, as the root image's build, the host's network for its steps (the engine has no bridge); (tag, build seconds, size in bytes)."
    args = base_images(engine)
    cfg = tmp_path_factory.mktemp('repo2docker')/'config.py'
    cfg.write_text("c.Repo2Docker.extra_build_kwargs = {'network_mode': 'host'}\n")
    t = time.monotonic()
    r = subprocess.run([str(pathlib.Path(sys.executable).with_name('repo2docker')), '--config', str(cfg), '--no-run', '--user-id', BINDER_UID,
                        '--user-name', 'jovyan', '--image-name', BINDER_TAG, '--build-arg', f"BASE_IMAGE={args['BASE_IMAGE']}", str(project_root())],
                       env={**os.environ, 'DOCKER_HOST': f'unix://{engine.sock}'}, capture_output=True, text=True, timeout=3000)
    secs = time.monotonic() - t
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    size = int(engine.docker('image', 'inspect', '-f', '{{.Size}}', BINDER_TAG).stdout.strip())
    print(f"binder image {BINDER_TAG}: repo2docker built it in {secs:.0f} s, {size / 2**30:.2f} GiB")
    return BINDER_TAG, secs, size

BINDER_RUN = """import json, pathlib, subprocess, sys, time, urllib.request
t0 = time.monotonic()
for _ in range(120):   # the server Binder's command started
    try: api = json.load(urllib.request.urlopen('http://127.0.0.1:8888/api', timeout=5)); break
    except OSError: time.sleep(0.5)
else: sys.exit('no notebook server on 8888')
out = {'server': api['version'], 'server_s': time.monotonic() - t0, 'notebooks': {}}
pathlib.Path('/tmp/executed').mkdir(exist_ok=True)
for nb in sorted(pathlib.Path('nbs/studies').glob('*.ipynb')):   # as stored: measure = False, the committed records
    t = time.monotonic()
    r = subprocess.run(['jupyter', 'nbconvert', '--to', 'notebook', '--execute', '--ExecutePreprocessor.timeout=900',
                        '--output-dir', '/tmp/executed', str(nb)], capture_output=True, text=True)
    done = json.loads((pathlib.Path('/tmp/executed')/nb.name).read_text()) if r.returncode == 0 else {'cells': []}
    images = sum(1 for c in done['cells'] for o in c.get('outputs', []) if {'image/svg+xml', 'image/png'} & set(o.get('data', {})))
    out['notebooks'][nb.stem] = {'rc': r.returncode, 'seconds': round(time.monotonic() - t, 1), 'images': images, 'err': r.stderr[-1500:] if r.returncode else ''}
print(json.dumps(out))
"""

def test_binder_launches_without_privileges_and_every_study_notebook_shows_its_figures(engine, binder_image):
    "binder/ as Binder runs it: as the notebook user, `no-new-privileges`, every capability dropped, loopback only, started with Binder's launch command (`jupyter notebook`); every study notebook then executes headless as stored (`measure = False`) and shows its figures from the committed records. Binder's other launch command (`jupyterhub-singleuser`) is there; nothing of the measuring side (Go) is."
    tag, secs, size = binder_image
    name = f"{engine.run_id}-binder"
    engine.docker('run', '-d', '--user', BINDER_UID, '--security-opt', 'no-new-privileges', '--cap-drop', 'ALL', '--network', 'none',
                  '--name', name, tag, 'jupyter', 'notebook', '--ip=0.0.0.0', '--port=8888', '--no-browser', '--IdentityProvider.token=binder',
                  timeout=120)
    try:
        t = time.monotonic()
        r = engine.docker('exec', '-i', name, 'python3', '-', input=BINDER_RUN, timeout=3000, check=False)
        launch_to_done = time.monotonic() - t
        assert r.ok, r.stdout[-2000:] + r.stderr[-2000:] + engine.docker('logs', name, check=False).stderr[-1500:]
        got = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"binder: server up in {got['server_s']:.1f} s; every study notebook executed {launch_to_done:.0f} s after launch: "
              + ', '.join(f"{k} {v['seconds']} s ({v['images']} figures)" for k, v in got['notebooks'].items()))
        assert set(got['notebooks']) == {'cni-net', 'runtimes-web', 'lsm-bpf', 'hlf-kata', 'hlf-ec'}, got
        for study, v in got['notebooks'].items():
            assert v['rc'] == 0 and v['images'] > 0, (study, v)
        tools = engine.docker('exec', name, 'sh', '-c', 'jupyterhub-singleuser --version && id -u && test ! -e /usr/local/go && echo no-go', timeout=120)
        assert tools.stdout.split()[-2:] == [BINDER_UID, 'no-go'], tools.stdout
    finally:
        engine.docker('rm', '-f', name, check=False, timeout=120)
        engine.docker('rmi', '-f', tag, check=False, timeout=120)   # its layers stay in the engine's cache (the data root)

def test_host_left_as_found(engine, container):
    "Removing the container and stopping the engine leave no link, rule, mount, cgroup, path or process of the engine's behind."
    engine.docker('rm', '-f', container, timeout=120)
    engine.stop()
    assert engine.left == {}, engine.left

KILLED_OWNER = """import sys, time
from researchkit.runtimes.docker_engine import DockerEngine
e = DockerEngine().start()
e.docker('run', '-d', '--network', 'none', '--name', e.run_id + '-sleeper', sys.argv[1], 'sleep', '600')
print('running', flush=True)
time.sleep(600)
"""

def test_engine_of_a_killed_run_is_cleaned_up(engine, image):
    "A run SIGKILLed with its engine and a container running: `reap` (researchkit cleanup) leaves the host as before."
    import os, signal, sys
    from researchkit.teardown import reap
    engine.stop()                              # the module's engine (already stopped when the tests run in order) frees the data root
    assert engine.left == {}
    rid = new_run_id()
    while rid == engine.run_id: rid = new_run_id()
    other = DockerEngine(run_id=rid)           # the killed run's engine as it will be named: its footprint is what must go
    before = other.footprint()
    env = {**os.environ, 'RESEARCHKIT_RUN_ID': rid}   # a run of its own, as a separate `researchkit run`
    p = subprocess.Popen([sys.executable, '-c', KILLED_OWNER, image['build_args']['BASE_IMAGE']], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().strip() == 'running', p.stderr.read()[-2000:]
        assert any(x.startswith('dockerd[') for x in other.footprint()['processes'])
    finally:
        os.kill(p.pid, signal.SIGKILL); p.wait()
    undone = reap()
    assert any('docker engine' in u for u in undone), undone
    deadline, left = time.monotonic() + 10, None
    while time.monotonic() < deadline and (left := state_diff(before, other.footprint())): time.sleep(0.25)
    assert not left, left

def test_a_start_that_fails_leaves_nothing(engine):
    "dockerd not answering in time: the start raises not-measurable with the reason and has already undone the engine."
    engine.stop()
    e = DockerEngine(start_timeout=0.001)
    before = e.footprint()
    with pytest.raises(NotMeasurable) as err: e.start()
    assert 'did not answer' in str(err.value)
    assert e.left == {} and not state_diff(before, e.footprint())
