"""researchkit.testbed.tools and tools/install-go-tools: the pins file (4 or 5 fields), `local` cache keys, the built Fabric,
fabric-ca and rk-load binaries (run for real: versions, a CA on sqlite answering getcainfo, rk-load's rows), and the doctor rows."""
import csv, io, json, os, pathlib, re, secrets, shutil, socket, subprocess, tempfile, pytest
from researchkit.core import ConfigError, NotMeasurable, project_root
from researchkit.teardown import Teardown, pid_alive
from researchkit.testbed.nodes import LocalNode
from researchkit.testbed.ssh import SSHNode
from researchkit.testbed.tools import (go_tools, tool_path, go_tool, fabric_config_dir, fabric_config, build_info, tool_rows,
                                       source_hash, FABRIC_TOOLS, FABRIC_MODULE)
from researchkit.workloads.iperf import serve
from _ssh_fixtures import ssh_hosts, ssh_host  # noqa: F401  (fixtures)

ROOT = project_root()
FABRIC_PIN = 'v1.4.0-rc1.0.20230405174026-695dd57e01c2'


@pytest.fixture
def checkout(tmp_path):
    "A scratch checkout: tools/install-go-tools (the real script) and a go-tools.txt the test writes."
    (tmp_path/'tools').mkdir()
    shutil.copy(ROOT/'tools'/'install-go-tools', tmp_path/'tools'/'install-go-tools')
    return tmp_path


def install(checkout, cache, *names, env:dict|None=None):
    env = {**os.environ, 'RESEARCHKIT_TOOLS': str(cache), 'GOPROXY': 'off', **(env or {})}   # these builds need no download
    return subprocess.run([str(checkout/'tools'/'install-go-tools'), *names], capture_output=True, text=True, env=env, timeout=300)


def hello(checkout, text='hi', name='hello'):
    "A `local` Go tool with no dependencies under tools/go/<name>/."
    d = checkout/'tools'/'go'/name; d.mkdir(parents=True, exist_ok=True)
    (d/'go.mod').write_text(f'module {name}\n\ngo 1.22.0\n'); (d/'go.sum').write_text('')
    (d/'main.go').write_text(f'package main\n\nimport "fmt"\n\nfunc main() {{ fmt.Println("{text}") }}\n')
    return d


def test_the_project_pins():
    pins = go_tools()
    assert set(FABRIC_TOOLS) | {'runsc', 'vegeta'} <= set(pins)
    assert pins['vegeta'].options == () and pins['vegeta'].subdir == 'vegeta@v12.12.0'          # 4-field lines keep their paths
    assert pins['runsc'].subdir == 'runsc@v0.0.0-20260905035102-160fafc42237'
    for n in ('peer', 'orderer', 'osnadmin', 'configtxgen', 'discover'):
        t = pins[n]
        assert (t.module, t.version, t.package) == (FABRIC_MODULE, FABRIC_PIN, f'cmd/{n}') and not t.cgo
        assert t.option('fabric-ldflags') == '2.5.0-main' and t.stamp == '2.5.0-main-695dd57e'
    assert pins['fabric-ca-server'].cgo and pins['fabric-ca-server'].version == 'v1.5.13' and not pins['fabric-ca-client'].cgo
    for n in ('rk-load', 'rk-kv'):
        assert pins[n].local and pins[n].source == ROOT/'tools'/'go'/n and pins[n].key == f"local-{source_hash(pins[n].source)}"
    # the Kubernetes test cluster's binaries: one local module, stamped v1.31.4, built only when named
    for n in ('kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubelet'):
        t = pins[n]
        assert t.local and t.source == ROOT/'tools'/'go'/'kube' and t.package == f'k8s.io/kubernetes/cmd/{n}'
        assert t.option('kube-version') == 'v1.31.4' and t.on_demand
    assert pins['containerd-shim-runsc-v1'].version == pins['runsc'].version and pins['containerd-shim-runsc-v1'].on_demand
    assert not any(pins[n].on_demand for n in ('runsc', 'vegeta', *FABRIC_TOOLS))


def test_four_and_five_fields(tmp_path):
    spec = tmp_path/'tools'/'go-tools.txt'; spec.parent.mkdir()
    spec.write_text("# header\n\n"
                    "a  example.com/a  v1.0.0  .\n"
                    "b  example.com/b  v2.0.0  cmd/b  cgo   # comment\n"
                    "c  example.com/c  v0.0.0-20230405174026-695dd57e01c2  cmd/c  fabric-ldflags=9.9.9-x,cgo\n"
                    "d  example.com/d  v3.1.4  cmd/d  fabric-ldflags=3.1.4\n")
    p = go_tools(spec)
    assert list(p) == ['a', 'b', 'c', 'd']
    assert (p['a'].options, p['a'].cgo, p['a'].stamp, p['a'].subdir) == ((), False, None, 'a@v1.0.0')
    assert p['b'].options == ('cgo',) and p['b'].cgo and p['b'].package == 'cmd/b'
    assert p['c'].options == ('fabric-ldflags=9.9.9-x', 'cgo') and p['c'].cgo and p['c'].stamp == '9.9.9-x-695dd57e'
    assert p['d'].stamp == '3.1.4' and p['d'].option('cgo', False) is False   # a tag: the label alone


@pytest.mark.parametrize('bad, msg', [
    ('a b c', '4 or 5 fields'), ('a b c d e f', '4 or 5 fields'), ('a b c d nope', "unknown option 'nope'"),
    ('a b c d cgo,', "unknown option ''"), ('a b c d cgo,,fabric-ldflags=x', "unknown option ''"), ('a b c d fabric-ldflags', 'the form is fabric-ldflags=LABEL'),
    ('a b c d fabric-ldflags=', 'the form is fabric-ldflags=LABEL'), ('a b c d cgo=1', 'the form is cgo'),
    ('a b c d cgo,cgo', 'given twice'), ('x ./tools/go/x local .', 'needs go.mod and go.sum'),
    ('x tools/go/x local .', "'./…'"), ('v example.com/v v1 .', 'pinned twice'),
    ('a b c d kube-version=1.31.4', 'the form is kube-version=vX.Y.Z'), ('a b c d on-demand=yes', 'the form is on-demand'),
    ('a b c d patch=nope', 'no executable tools/go/patches/nope'), ('a b c d patch=', 'the form is patch=NAME')])
def test_bad_lines_name_the_line(checkout, bad, msg):
    "Python and the install script both refuse the line, naming it, before anything is built."
    spec = checkout/'tools'/'go-tools.txt'
    spec.write_text(f"# pins\nv example.com/v v1 .\n{bad}\n")
    with pytest.raises(ConfigError) as e: go_tools(spec)
    assert e.value.where == 'go-tools.txt:3' and msg in e.value.msg, e.value
    r = install(checkout, checkout/'cache')
    assert r.returncode == 1 and 'tools/go-tools.txt:3:' in r.stderr, r.stderr
    assert not (checkout/'cache').exists()    # nothing started


def test_on_demand_tools_are_built_only_when_named(checkout):
    "`make setup` (no NAME) skips an on-demand line; naming it builds it."
    hello(checkout)
    (checkout/'tools'/'go-tools.txt').write_text("hello ./tools/go/hello local . on-demand\n")
    t = go_tools(checkout/'tools'/'go-tools.txt')['hello']
    assert t.on_demand and t.option('kube-version') is None
    r = install(checkout, checkout/'cache')
    assert r.returncode == 0 and 'building' not in r.stdout and not (checkout/'cache'/t.subdir).exists(), r.stdout + r.stderr
    r = install(checkout, checkout/'cache', 'hello')
    assert r.returncode == 0 and subprocess.run([checkout/'cache'/t.subdir/'hello'], capture_output=True, text=True).stdout == 'hi\n'


def test_tools_of_two_modules_build_in_two_lanes(checkout):
    "Tools of different modules build at once (both started before either is built); one at a time with RESEARCHKIT_BUILD_JOBS=1; a failed build stops the install, naming its line, and leaves no build of it."
    hello(checkout); hello(checkout, 'yo', name='howdy')
    (checkout/'tools'/'go-tools.txt').write_text("hello ./tools/go/hello local .\nhowdy ./tools/go/howdy local .\n")
    steps = lambda r: [(l.split()[1], l.split()[2].rsplit('/', 1)[-1]) for l in r.stdout.splitlines() if l.split()[1] in ('building', 'built')]
    r = install(checkout, checkout/'one', env={'RESEARCHKIT_BUILD_JOBS': '1'})
    assert r.returncode == 0 and steps(r) == [('building', 'hello'), ('built', 'hello'), ('building', 'howdy'), ('built', 'howdy')], r.stdout + r.stderr
    r = install(checkout, checkout/'two')
    assert r.returncode == 0 and [s for s, _ in steps(r)][:2] == ['building', 'building'], r.stdout + r.stderr
    assert {p.name.split('@')[0] for p in (checkout/'two').iterdir()} == {'.install-go-tools.lock', 'hello', 'howdy'}
    (checkout/'tools'/'go'/'howdy'/'main.go').write_text('package main\n\nfunc main() { undefined() }\n')
    r = install(checkout, checkout/'broken')
    assert r.returncode == 1 and 'tools/go-tools.txt:2' in r.stderr and 'undefined' in r.stderr, r.stderr
    assert not [p for p in (checkout/'broken').iterdir() if p.name.startswith('howdy@')]
    r = install(checkout, checkout/'bad', env={'RESEARCHKIT_BUILD_JOBS': '0'})
    assert r.returncode == 1 and 'RESEARCHKIT_BUILD_JOBS' in r.stderr and not (checkout/'bad').exists()   # refused before anything started


def test_local_cache_key_follows_the_source(checkout):
    "The key is the sha256 of the source dir; Python and the install script agree; a source change rebuilds, the old build goes."
    src = hello(checkout)
    (checkout/'tools'/'go-tools.txt').write_text("hello ./tools/go/hello local .\n")
    t = go_tools(checkout/'tools'/'go-tools.txt')['hello']
    assert t.source == src and re.fullmatch(r'local-[0-9a-f]{12}', t.key)
    k1 = t.key
    r = install(checkout, checkout/'cache')
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(checkout/'cache')) == ['.install-go-tools.lock', f'hello@{k1}']   # the script's hash == source_hash
    assert subprocess.run([checkout/'cache'/f'hello@{k1}'/'hello'], capture_output=True, text=True).stdout == 'hi\n'
    hello(checkout, 'changed')
    k2 = t.key
    assert k2 != k1
    (src/'extra.txt').write_text('x')              # any file counts
    k3 = t.key
    assert k3 not in (k1, k2)
    (src/'extra.txt').unlink()
    assert t.key == k2
    r = install(checkout, checkout/'cache', 'hello')
    assert r.returncode == 0 and f'built {checkout}/cache/hello@{k2}/hello' in r.stdout, r.stdout + r.stderr
    assert sorted(os.listdir(checkout/'cache')) == ['.install-go-tools.lock', f'hello@{k2}']
    assert subprocess.run([checkout/'cache'/f'hello@{k2}'/'hello'], capture_output=True, text=True).stdout == 'changed\n'
    r = install(checkout, checkout/'cache')
    assert r.returncode == 0 and 'building' not in r.stdout      # built once
    hello(checkout, 'hi')
    assert t.key == k1                                             # the key is a function of the content only


def test_tool_path_finds_the_built_fabric_tools():
    pins = go_tools()
    for n in FABRIC_TOOLS:
        p = tool_path(n)
        assert p == str(pathlib.Path(p).parent/n) and pathlib.Path(p).parent.name == pins[n].subdir, (n, p)
        assert go_tool(n) == p and os.access(p, os.X_OK)
    run = lambda n, *a: subprocess.run([tool_path(n), *a], capture_output=True, text=True, timeout=30)
    for n in ('peer', 'orderer'):
        out = run(n, 'version').stdout
        assert re.search(r'^ Version: 2\.5\.0-main-695dd57e$', out, re.M) and re.search(r'^ Commit SHA: 695dd57e01c2$', out, re.M), out
    for n in ('fabric-ca-server', 'fabric-ca-client'):
        assert re.search(r'^ Version: 1\.5\.13$', run(n, 'version').stdout, re.M)
    assert run('configtxgen', '-version').stdout.splitlines()[1].strip() == 'Version: 2.5.0-main-695dd57e'
    info = build_info()
    assert {n: info[n]['settings'].get('CGO_ENABLED') for n in FABRIC_TOOLS} == {n: '1' if n == 'fabric-ca-server' else '0' for n in FABRIC_TOOLS}
    assert info['peer']['module'] == FABRIC_MODULE and info['peer']['version'] == FABRIC_PIN and info['peer']['sum'].startswith('h1:')
    assert info['rk-load']['deps']['github.com/hyperledger/fabric-gateway'] == 'v1.7.0'
    assert info['rk-kv']['deps']['github.com/hyperledger/fabric-chaincode-go/v2'] == 'v2.0.0'
    assert subprocess.run(['ldd', tool_path('peer')], capture_output=True, text=True).returncode != 0        # static
    assert 'libc.so.6' in subprocess.run(['ldd', tool_path('fabric-ca-server')], capture_output=True, text=True).stdout


def test_fabric_config_dir():
    d = pathlib.Path(fabric_config_dir())
    assert d.name == f'fabric-config@{FABRIC_PIN}' and d.parent == pathlib.Path(tool_path('peer')).parent.parent
    core, orderer = (d/'core.yaml').read_text(), (d/'orderer.yaml').read_text()
    assert re.search(r'^peer:', core, re.M) and re.search(r'^chaincode:', core, re.M)
    assert re.search(r'^General:', orderer, re.M) and not re.search(r'^Kafka:', orderer, re.M)   # this module's copy has no Kafka section
    mod = subprocess.run(['go', 'env', 'GOMODCACHE'], capture_output=True, text=True).stdout.strip()
    src = pathlib.Path(mod)/f'{FABRIC_MODULE}@{FABRIC_PIN}'/'sampleconfig'
    if src.is_dir(): assert core == (src/'core.yaml').read_text() and orderer == (src/'orderer.yaml').read_text()


@pytest.fixture(scope='module')
def ca():
    "A real fabric-ca-server on 127.0.0.1 with its sqlite DB in a temp dir, and the bootstrap admin enrolled."
    node = LocalNode()
    with Teardown() as td:
        d = os.path.join(tempfile.gettempdir(), f'rk-ca-{os.getpid()}-{secrets.token_hex(4)}')
        td.add(f'dir {d}', lambda: shutil.rmtree(d, ignore_errors=True), undo=f'rm -rf {d}')   # registered before it exists
        os.mkdir(d)
        srv, cli = tool_path('fabric-ca-server'), tool_path('fabric-ca-client')
        proc, port = serve(node, lambda p: f"{srv} start -b admin:adminpw --home {d}/srv --address 127.0.0.1 --port {p} "
                                           f"--operations.listenaddress 127.0.0.1:0", teardown=td, label='fabric-ca-server')
        yield dict(dir=pathlib.Path(d), port=port, proc=proc, cli=cli)
    assert not pid_alive(proc.pid) and not os.path.exists(d)     # stopped and removed


def test_fabric_ca_server_on_sqlite_answers_getcainfo(ca):
    d, cli = ca['dir'], ca['cli']
    assert (d/'srv'/'fabric-ca-server.db').read_bytes()[:16] == b'SQLite format 3\x00'   # cgo: go-sqlite3 works
    r = subprocess.run([cli, 'getcainfo', '-u', f"http://127.0.0.1:{ca['port']}", '--home', str(d/'info')], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert (d/'info'/'msp'/'cacerts'/f"127-0-0-1-{ca['port']}.pem").read_text() == (d/'srv'/'ca-cert.pem').read_text()
    r = subprocess.run([cli, 'enroll', '-u', f"http://admin:adminpw@127.0.0.1:{ca['port']}", '--home', str(d/'admin')],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert (d/'admin'/'msp'/'signcerts'/'cert.pem').exists() and len(os.listdir(d/'admin'/'msp'/'keystore')) == 1


def rk_load(*args, timeout=60):
    return subprocess.run([tool_path('rk-load'), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_rk_load_usage_and_bad_flags():
    r = rk_load('-h')
    assert r.returncode == 0 and all(f in r.stderr for f in ('-warmup', '-max-inflight', '-rows', '-rate', '-clients', '-timeout'))
    base = ['-peer', '127.0.0.1:1', '-tlsca', '/nonexistent', '-msp', '/nonexistent', '-mspid', 'M', '-channel', 'c', '-cc', 'kv']
    for extra, flag in [(['-rate', '-1'], 'rate'), (['-duration', '0s'], 'duration'), (['-warmup', '-1s'], 'warmup'),
                        (['-max-inflight', '-1'], 'max-inflight'), (['-clients', '4', '-max-inflight', '2'], 'max-inflight'),
                        (['-payload', '-1'], 'payload'), (['-timeout', '0s'], 'timeout'), (['-rate', '0', '-clients', '0'], 'clients')]:
        r = rk_load(*base, *extra)
        assert r.returncode == 2 and r.stderr.startswith(f'rk-load: -{flag}: ') and r.stdout == '', (extra, r.stderr)
    r = rk_load(*base[2:])
    assert r.returncode == 2 and r.stderr.startswith('rk-load: -peer: required')
    r = rk_load(*base)                                                   # flags fine: now it reads the files
    assert r.returncode == 2 and r.stderr.startswith('rk-load: tlsca: ')


def test_rk_load_rows_warmup_and_inflight_cap(ca, tmp_path):
    """Against a peer that accepts TCP and never answers (a real enrolled identity; a listener that never speaks TLS):
    the first 5 transactions hang until -timeout, every one due meanwhile is shed (row, error inflight-cap), nothing is dropped."""
    d = ca['dir']
    with Teardown() as td, socket.socket() as silent:
        silent.bind(('127.0.0.1', 0)); silent.listen(64)
        rows = tmp_path/'rows.csv'
        r = rk_load('-peer', f"127.0.0.1:{silent.getsockname()[1]}", '-tlsca', d/'srv'/'ca-cert.pem', '-msp', d/'admin'/'msp',
                    '-mspid', 'Org1MSP', '-channel', 'rkch', '-cc', 'kv', '-rate', 20, '-warmup', '0.5s', '-duration', '1s',
                    '-max-inflight', 5, '-timeout', '1s', '-rows', rows)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    table = list(csv.DictReader(io.StringIO(rows.read_text())))
    assert list(table[0]) == ['tx_id', 'intended_s', 'dispatched_s', 'endorsed_s', 'submitted_s', 'committed_s', 'block', 'ok', 'warmup', 'error']
    assert len(table) == 30                                                           # 20/s x 1.5 s: every due transaction is a row
    assert [float(t['intended_s']) for t in table] == pytest.approx([i / 20 for i in range(30)], abs=1e-6)
    assert [t['warmup'] for t in table] == ['true'] * 10 + ['false'] * 20
    shed = [t for t in table if t['error'] == 'inflight-cap']
    sent = [t for t in table if t['error'] != 'inflight-cap']
    assert shed and all(t['tx_id'] == '' for t in shed)
    assert all(re.fullmatch(r'[0-9a-f]{64}', t['tx_id']) for t in sent) and len({t['tx_id'] for t in sent}) == len(sent)
    assert [t['tx_id'] != '' for t in table[:5]] == [True] * 5 and table[5]['error'] == 'inflight-cap'   # 5 in flight, the 6th shed
    assert all(t['ok'] == 'false' and t['block'] == '' and t['error'] for t in table)
    assert all(float(t['committed_s']) - float(t['dispatched_s']) >= 0.9 for t in sent)   # each waited for -timeout
    measured = table[10:]
    assert s['sent'] == 20 and s['warmup_sent'] == 10 and s['ok'] == 0 and s['failed'] == 20
    assert s['shed'] == sum(t['error'] == 'inflight-cap' for t in measured) == s['errors']['inflight-cap'] > 0
    assert s['dispatched'] + s['shed'] == s['sent'] and s['max_inflight'] == 5 and s['max_inflight_seen'] == 5
    assert s['throughput'] == 0 and s['lat_p50'] == 0 and s['rate'] == 20 and s['warmup_s'] == 0.5 and s['duration_s'] == 1
    assert s['client_cpu_s'] == pytest.approx(s['cpu_user_s'] + s['cpu_sys_s']) and 0 < s['client_cpu_s'] <= s['process_cpu_s']
    assert s['cpu_ms_per_tx'] == pytest.approx(1000 * s['client_cpu_s'] / len(sent))   # per transaction really sent (warm-up included)


def test_tool_rows_say_what_to_run_when_nothing_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv('RESEARCHKIT_TOOLS', str(tmp_path))
    assert tool_path('peer') is None and fabric_config_dir() is None
    assert tool_rows() == [(n, False, 'not built: run tools/install-go-tools') for n in FABRIC_TOOLS]


class _ToolsElsewhere(SSHNode):
    "The SSH test host (same filesystem as this machine) with its tool cache in another directory, like a fresh remote node."
    def __init__(self, *a, tools:str, **kw): super().__init__(*a, **kw); self.tools = tools
    def _exec(self, line, timeout, input): return super()._exec(f"export RESEARCHKIT_TOOLS={self.tools}; {line}", timeout, input)


def test_go_tool_and_fabric_config_copy_to_an_ssh_node_that_lacks_them(ssh_host, tmp_path):
    remote = str(tmp_path/'remote-tools')
    n = _ToolsElsewhere('far', ssh_host.addr, tools=remote, user='root', key=ssh_host.key, port=ssh_host.port, ssh_config=None,
                        known_hosts=ssh_host.known_hosts())
    ssh_host.td.callback('close ssh far', n.close)
    pins = go_tools()
    assert tool_path('rk-load', n) is None and fabric_config_dir(n) is None
    with pytest.raises(NotMeasurable, match='install-go-tools'): go_tool('rk-load', n, copy=False)
    p = go_tool('rk-load', n)                                            # over SFTP, into the node's own cache
    assert p == f"{remote}/{pins['rk-load'].subdir}/rk-load" == tool_path('rk-load', n)
    assert pathlib.Path(p).read_bytes() == pathlib.Path(tool_path('rk-load')).read_bytes() and os.access(p, os.X_OK)
    assert 'usage: rk-load' in n.run(f"{p} -h", check=False).stderr
    d = fabric_config(n)
    assert d == f"{remote}/fabric-config@{FABRIC_PIN}" == fabric_config_dir(n)
    for f in ('core.yaml', 'orderer.yaml'): assert (pathlib.Path(d)/f).read_text() == (pathlib.Path(fabric_config_dir())/f).read_text()
    assert sorted(os.listdir(remote)) == sorted([pins['rk-load'].subdir, f'fabric-config@{FABRIC_PIN}'])   # nothing else, no .tmp left


def test_a_patched_tool_is_a_build_of_its_own(checkout):
    "`patch=NAME`: the cache key is the pin + the patch's name and 12 hex of its sha256 (what the script computes: tool_path finds its builds), so a changed patch is a new build; a `local` tool is patched in its source instead."
    import hashlib
    p = checkout/'tools'/'go'/'patches'/'p1'; p.parent.mkdir(parents=True); p.write_text('#!/bin/sh\nexit 0\n'); p.chmod(0o755)
    spec = checkout/'tools'/'go-tools.txt'
    spec.write_text("a example.com/a v1.0.0 . patch=p1\n")
    t = go_tools(spec)['a']
    assert t.patch == p and t.key == 'v1.0.0+p1-' + hashlib.sha256(p.read_bytes()).hexdigest()[:12] and t.subdir == f"a@{t.key}"
    key = t.key
    p.write_text('#!/bin/sh\nexit 1\n')
    assert go_tools(spec)['a'].key != key                  # a changed patch: another build
    hello(checkout, name='x')
    spec.write_text("x ./tools/go/x local . patch=p1\n")
    with pytest.raises(ConfigError) as e: go_tools(spec)
    assert 'patch it there' in e.value.msg
    r = install(checkout, checkout/'cache')
    assert r.returncode == 1 and 'tools/go-tools.txt:1:' in r.stderr and 'patch it there' in r.stderr, r.stderr


def test_the_gvisor_shim_patch_changes_one_call_and_stops_when_the_pin_moved(tmp_path):
    "tools/go/patches/gvisor-shim-oom writes a copy of the shim's manager.go with the fatal oom_score_adj check made a no-op, and an overlay naming it; a source without exactly one such call stops it (a moved pin is looked at, not patched blindly)."
    patch = ROOT/'tools'/'go'/'patches'/'gvisor-shim-oom'
    fatal = 'return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)'
    src = tmp_path/'mod'/'pkg'/'shim'/'v1'; src.mkdir(parents=True)
    body = 'package shim\n\nfunc start() {\n\tif err := sys.SetOOMScore(pid, -999); err != nil {\n\t\t' + fatal + '\n\t}\n}\n'
    (src/'manager.go').write_text(body)
    r = subprocess.run([str(patch), str(tmp_path/'mod'), str(tmp_path/'out')], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    overlay = json.loads((tmp_path/'out'/'overlay.json').read_text())['Replace']
    assert overlay == {str((src/'manager.go').resolve()): str((tmp_path/'out'/'manager.go').resolve())}
    new = (tmp_path/'out'/'manager.go').read_text()
    changed = [(a, b) for a, b in zip(body.splitlines(), new.splitlines()) if a != b]
    assert len(changed) == 1 and changed[0][0].strip() == fatal and changed[0][1].strip().startswith('_ = err'), changed
    assert (src/'manager.go').read_text() == body                  # the source is never touched
    (src/'manager.go').write_text(body.replace(fatal, 'return nil'))
    r = subprocess.run([str(patch), str(tmp_path/'mod'), str(tmp_path/'out2')], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and 'the pin moved' in r.stderr, r.stderr
