"""Erasure coding (researchkit.ledger.ec, rk-ec on klauspost/reedsolomon): RS(6,4) round trips from every 4 of the 6 chunks on
real files of awkward sizes, corrupted/missing/foreign chunks, bad input naming the field, the E-Fabric agent watching a block
directory on loopback, and a real Fabric network whose peer encodes its completed 64 MiB block file inside its own container,
spreads the chunks to the other peers, deletes the file, and gets it back bit for bit from any k chunks.
Skips with the measured reason when rk-ec (or Fabric, for the last test) is not built (tools/install-go-tools)."""
import os, json, glob, time, random, socket, hashlib, itertools, subprocess, pytest
from researchkit.core import ConfigError, NotMeasurable
from researchkit.teardown import Teardown
from researchkit.testbed.tools import tool_path
from researchkit.ledger.ec import (ECSpec, ECError, Erasure, encode_file, decode_chunks, read_header, sha256_file, ec_binary,
                                   event_rows, _rk_ec)

try: BIN = ec_binary()
except NotMeasurable as e: BIN, WHY = None, e.reason
pytestmark = pytest.mark.skipif(BIN is None, reason=f"rk-ec not built: {BIN is None and WHY}")

SIZES = [0, 1, 3, 4, 4097, (1 << 20) + 1]   # empty, 1 byte, below k, exactly k, not divisible by k, just over 1 MiB

def _file(d, size:int, seed:int=0) -> str:
    p = os.path.join(d, f"f{size}")
    with open(p, 'wb') as f: f.write(random.Random(seed + size).randbytes(size))
    return p

@pytest.mark.parametrize('size', SIZES)
def test_rs64_round_trip_from_every_4_of_6(tmp_path, size):
    src = _file(tmp_path, size)
    want = hashlib.sha256(open(src, 'rb').read()).hexdigest()
    rep = encode_file(src, str(tmp_path), n=6, k=4)
    assert rep['file_size'] == size and rep['file_sha256'] == want and len(rep['chunks']) == 6
    assert rep['shard_size'] == max(1, -(-size // 4))
    for j, c in enumerate(rep['chunks']):   # self-describing headers
        h = read_header(c)
        assert (h['name'], h['file_size'], h['file_sha256'], h['n'], h['k'], h['index']) == (f"f{size}", size, want, 6, 4, j)
        assert h['lib'].startswith('github.com/klauspost/reedsolomon v1.') and h['simd'] in ('avx512+gfni', 'avx+gfni', 'avx512', 'avx2', 'ssse3', 'generic')
        assert os.path.getsize(c) > h['shard_size']
    combos = list(itertools.combinations(range(6), 4))
    assert len(combos) == 15
    for keep in combos:
        out = str(tmp_path / f"out-{''.join(map(str, keep))}")
        r = decode_chunks([rep['chunks'][j] for j in keep], out)['decode']
        assert r['verified'] and r['used'] == list(keep) and r['rejected'] == []
        assert open(out, 'rb').read() == open(src, 'rb').read(), keep

def _flip(path:str, offset_from_end:int=1):
    b = bytearray(open(path, 'rb').read()); b[-offset_from_end] ^= 0xFF; open(path, 'wb').write(bytes(b))

def test_corrupted_missing_and_foreign_chunks(tmp_path):
    a, b = tmp_path / 'a', tmp_path / 'b'; a.mkdir(); b.mkdir()
    src = _file(tmp_path, 100_003)
    ch = encode_file(src, str(a), n=6, k=4)['chunks']
    other = encode_file(_file(b, 100_003, seed=7), str(b), n=6, k=4, name='f100003')['chunks']  # same name, other content
    _flip(ch[0])                                              # a corrupted shard: CRC-32C mismatch, skipped
    open(ch[1], 'r+b').truncate(os.path.getsize(ch[1]) - 10)  # a truncated chunk
    r = decode_chunks(ch, str(tmp_path / 'o1'))['decode']
    assert r['verified'] and r['used'] == [2, 3, 4, 5] and len(r['rejected']) == 2
    assert any('CRC-32C' in x for x in r['rejected']) and any('truncated' in x for x in r['rejected'])
    assert open(tmp_path / 'o1', 'rb').read() == open(src, 'rb').read()
    # a chunk of another file with the same name is set aside by its sha256, never mixed in
    r = decode_chunks([*ch[2:], other[0]], str(tmp_path / 'o2'))['decode']
    assert r['verified'] and r['used'] == [2, 3, 4, 5] and any('another file' in x for x in r['rejected'])
    # fewer than k valid chunks: refused, saying how many it has and needs; nothing written
    with pytest.raises(ECError, match=r'3 valid chunk\(s\).*needs 4'): decode_chunks(ch[:2] + ch[2:5], str(tmp_path / 'o3'))
    assert not os.path.exists(tmp_path / 'o3')
    with pytest.raises(ECError, match='not an rk-ec chunk'): decode_chunks([src], str(tmp_path / 'o4'))
    with pytest.raises(ECError, match='not an rk-ec chunk'): read_header(src)

def test_bad_input_names_the_field(tmp_path):
    src = _file(tmp_path, 10)
    for kw, field in [(dict(n=4, k=4), 'k'), (dict(n=4, k=6), 'k'), (dict(n=4, k=0), 'k'), (dict(n=300, k=4), 'n'), (dict(n=1, k=1), 'n')]:
        with pytest.raises(ConfigError) as e: encode_file(src, str(tmp_path), **kw)
        assert e.value.where == field, (kw, e.value)
    with pytest.raises(ConfigError) as e: ECSpec(20, 14).validate(peers=4)   # N above the number of peers
    assert e.value.where == 'n' and '4 peer' in str(e.value)
    with pytest.raises(ConfigError) as e: ECSpec.from_dict({'n': 4, 'k': 2, 'parity': 2})
    assert e.value.where == 'ec.parity'
    with pytest.raises(ConfigError) as e: decode_chunks([], str(tmp_path / 'x'))
    assert e.value.where == 'chunks'
    # the binary rejects the same itself (exit 2, the flag named), for callers that skip the Python checks
    for args, field in [(['encode', '-n', 4, '-k', 4, '-in', src, '-outdir', tmp_path], 'k'),
                        (['encode', '-n', 4, '-k', 0, '-in', src, '-outdir', tmp_path], 'k'),
                        (['bench', '-simd', 'sse9'], 'simd')]:
        with pytest.raises(ConfigError) as e: _rk_ec(args)
        assert e.value.where == field, (args, e.value)

# ---- the agent on loopback: watch a block directory, encode the completed file, spread, delete, rebuild ----------------
def _free_ports(n:int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks: s.bind(('127.0.0.1', 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks: s.close()
    return ports

def _health(port:int) -> bool:
    try:
        with socket.create_connection(('127.0.0.1', port), timeout=1) as s:
            s.sendall(b'GET /health HTTP/1.0\r\n\r\n'); return b'ok' in s.recv(200)
    except OSError: return False

def test_agent_spreads_deletes_and_rebuilds_on_loopback(tmp_path):
    ports = _free_ports(4)
    addrs = ','.join(f'127.0.0.1:{p}' for p in ports)
    ledger = tmp_path / 'chains' / 'mych'; ledger.mkdir(parents=True)
    f0 = ledger / 'blockfile_000000'
    f0.write_bytes(random.Random(1).randbytes(3_000_001)); want = sha256_file(f0)
    procs = []
    try:
        for i, p in enumerate(ports):
            args = [BIN, 'agent', '-listen', f'127.0.0.1:{p}', '-store', str(tmp_path / f'p{i}' / 'store'), '-self', f'p{i}', '-index', str(i),
                    '-peers', addrs, '-n', '4', '-k', '2', '-events', str(tmp_path / f'p{i}' / 'events.jsonl'), '-poll', '50ms']
            if i == 3: args += ['-ledger', str(ledger), '-spread']
            procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        deadline = time.monotonic() + 20
        while not all(map(_health, ports)):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [p.stderr.read() for p in procs if p.poll() is not None]
            time.sleep(0.05)
        time.sleep(0.3)
        assert f0.exists() and not glob.glob(str(tmp_path / 'p*' / 'store' / '*.rkec'))   # the newest file is never touched
        (ledger / 'blockfile_000001').write_bytes(b'x')                                     # the "peer" moves on: file 0 is complete
        ev_path = tmp_path / 'p3' / 'events.jsonl'
        while not any('"encoded"' in l for l in (ev_path.read_text().splitlines() if ev_path.exists() else [])):
            assert time.monotonic() < deadline + 20, ev_path.read_text() if ev_path.exists() else 'no events'
            time.sleep(0.05)
        ev = [json.loads(l) for l in ev_path.read_text().splitlines() if '"encoded"' in l][0]
        assert ev['name'] == 'mych.blockfile_000000' and ev['file_sha256'] == want and ev['deleted'] and 'error' not in ev
        assert sorted(ev['placed']) == ['0', '1', '2'] and ev['bytes_kept'] == os.path.getsize(tmp_path / 'p3' / 'store' / 'mych.blockfile_000000.c03.rkec')
        assert not f0.exists() and (ledger / 'blockfile_000001').exists()
        for i in range(4):   # each peer holds exactly the chunk the placement gives it
            assert [os.path.basename(x) for x in glob.glob(str(tmp_path / f'p{i}' / 'store' / '*.rkec'))] == [f'mych.blockfile_000000.c{i:02d}.rkec']
            assert read_header(tmp_path / f'p{i}' / 'store' / f'mych.blockfile_000000.c{i:02d}.rkec')['index'] == i
        assert len(event_rows([ev])) >= 8
        # lose N - k = 2 random chunks, rebuild from the rest over HTTP, bit for bit
        for i in random.Random(3).sample(range(4), 2): os.remove(tmp_path / f'p{i}' / 'store' / f'mych.blockfile_000000.c{i:02d}.rkec')
        out = tmp_path / 'rebuilt'
        r = json.loads(subprocess.run([BIN, 'rebuild', '-peers', addrs, '-name', 'mych.blockfile_000000', '-out', str(out)],
                                      capture_output=True, text=True, check=True).stdout)
        assert r['decode']['verified'] and len(r['decode']['used']) == 2 and sha256_file(out) == want and len(r['decode']['rejected']) == 2
        # one more loss is one too many
        left = glob.glob(str(tmp_path / 'p*' / 'store' / '*.rkec')); os.remove(left[0])
        bad = subprocess.run([BIN, 'rebuild', '-peers', addrs, '-name', 'mych.blockfile_000000', '-out', str(tmp_path / 'r2')], capture_output=True, text=True)
        assert bad.returncode == 1 and 'needs 2' in bad.stderr and not (tmp_path / 'r2').exists()
    finally:
        for p in procs: p.kill(); p.wait()

def test_agents_own_mode_each_keeps_its_chunk_of_its_own_copy(tmp_path):
    "The paper's E-Fabric: 3 agents, each with its own identical copy of the block file, each keeps only its own chunk; no transfer."
    ports = _free_ports(3)
    addrs = ','.join(f'127.0.0.1:{p}' for p in ports)
    data = random.Random(5).randbytes(1_000_003)
    procs = []
    try:
        for i, p in enumerate(ports):
            led = tmp_path / f'p{i}' / 'ch'; led.mkdir(parents=True)
            (led / 'blockfile_000000').write_bytes(data); (led / 'blockfile_000001').write_bytes(b'')
            procs.append(subprocess.Popen([BIN, 'agent', '-listen', f'127.0.0.1:{p}', '-store', str(tmp_path / f'p{i}' / 'store'), '-self', f'p{i}',
                                           '-index', str(i), '-peers', addrs, '-n', '3', '-k', '2', '-ledger', str(led), '-poll', '50ms'],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        deadline = time.monotonic() + 30
        evs = {}
        while len(evs) < 3:
            for i in range(3):
                f = tmp_path / f'p{i}' / 'events.jsonl'
                for l in (f.read_text().splitlines() if f.exists() else []):
                    if '"encoded"' in l: evs[i] = json.loads(l)
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), evs
            time.sleep(0.05)
        for i, ev in evs.items():
            assert ev['deleted'] and ev['bytes_sent'] == 0 and ev['placed'] == {} and not (tmp_path / f'p{i}' / 'ch' / 'blockfile_000000').exists()
            assert [os.path.basename(x) for x in glob.glob(str(tmp_path / f'p{i}' / 'store' / '*'))] == [f'ch.blockfile_000000.c{i:02d}.rkec']
            assert ev['bytes_kept'] < len(data) / 2 + 4096   # 1/k of the file plus the header
        out = tmp_path / 'rebuilt'
        r = json.loads(subprocess.run([BIN, 'rebuild', '-peers', addrs, '-name', 'ch.blockfile_000000', '-out', str(out), '-skip', '0'],
                                      capture_output=True, text=True, check=True).stdout)
        assert r['decode']['used'] == [1, 2] and r['asked'] == [1, 2] and out.read_bytes() == data
    finally:
        for p in procs: p.kill(); p.wait()

# ---- a real Fabric network ----------------------------------------------------------------------------------------------
from researchkit.ledger.spec import NetworkSpec, OrgSpec, Limits
from researchkit.ledger.network import Network

from _fabric_fixtures import fabric_missing as _fabric_missing

def _host_pids_in(cgroup_dir:str) -> list[int]:
    out = []
    for f in glob.glob(f'{cgroup_dir}/**/cgroup.procs', recursive=True) + [f'{cgroup_dir}/cgroup.procs']:
        try: out += [int(x) for x in open(f).read().split()]
        except OSError: pass
    return out

@pytest.mark.skipif(_fabric_missing() is not None, reason=f"Fabric not built: {_fabric_missing()}")
def test_fabric_peer_encodes_its_completed_block_file_in_its_cgroup():
    """RS(4,2) over 4 peers (2 orgs x 2, one endorsing each): the non-endorsing peer1-org1 encodes inside its own container; closed-loop
    load with 1-MiB values fills its first 64-MiB block file; its chunks land on the 3 other peers, the file is deleted; the file
    comes back bit for bit from the other peers (in peer1-org1's container) and from any 2 chunks after 2 random losses."""
    # 1-MiB values: the default 512-MiB memory limit OOM-kills the gateway peer at 8 clients (measured); the encoder shares its peer's limit
    spec = NetworkSpec(orgs=[OrgSpec('org1', peers=2, endorsing=1), OrgSpec('org2', peers=2, endorsing=1)], batch_timeout_s=0.5,
                       limits={'all': Limits(memory_mb=2048)})
    enc = 'peer1-org1'
    with Teardown() as td:
        net = Network(spec, teardown=td).up(timeout=240)
        with pytest.raises(ConfigError) as e: Erasure(net, ECSpec(5, 2), teardown=td)   # N above the 4 peers, before anything starts
        assert e.value.where == 'n'
        with pytest.raises(ConfigError) as e: Erasure(net, ECSpec(4, 2), teardown=td, peers=['peer0-org1', 'nope'])
        assert e.value.where == 'peers'
        ec = Erasure(net, ECSpec(4, 2, mode='spread'), teardown=td, encoders=[enc]).start()
        # the agent runs inside the encoding peer's container: in its cgroup (so under its CPU limit), next to the peer process
        inst = net.nodes[enc].instance
        cmd = {p: open(f'/proc/{p}/cmdline', 'rb').read().split(b'\0') for p in _host_pids_in(inst.cgroup('cpuacct')) if os.path.exists(f'/proc/{p}')}
        assert any(b'rk-ec' in c[0] and c[1:2] == [b'agent'] for c in cmd.values()), cmd
        assert any(c[0].endswith(b'/peer') for c in cmd.values()), cmd
        # closed-loop load, 4 clients, 1-MiB values, until the first block file is complete and encoded
        g = net.gateway('org1')
        ledger0 = net.ledger_dir('peer0-org1')
        t0 = time.monotonic()
        load = net.client.spawn([tool_path('rk-load'), '-peer', g['peer'], '-tlsca', g['tlsca'], '-msp', g['msp'], '-mspid', g['mspid'],
                                 '-channel', g['channel'], '-cc', g['chaincode'], '-clients', '4', '-payload', str(1 << 20),
                                 '-duration', '240s', '-timeout', '60s'], teardown=td, label='rk-load')
        deadline, shown = time.monotonic() + 300, 0
        while not ec.events(enc):   # progress, and what went wrong if the file never completes
            if time.monotonic() - t0 > shown + 20:
                shown += 20; print(f"\n{shown} s: peer0-org1 block files {sum(map(os.path.getsize, glob.glob(ledger0 + '/blockfile_*'))) / 2**20:.1f} MiB")
            assert load.alive() and time.monotonic() < deadline, load.output()[-2000:]
            time.sleep(0.5)
        evs = ec.wait(1, timeout=60)
        t_done = time.monotonic() - t0
        load.stop(grace=2)
        ev = [e for e in evs if e['peer'] == enc][0]
        assert ev['name'] == f"{spec.channel}.blockfile_000000" and ev['deleted'] and 'error' not in ev, ev
        size = ev['file_size']
        assert 60 << 20 <= size <= 64 << 20, size              # a real, full Fabric block file (64 MiB minus the block that did not fit)
        print(f"\nblockfile_000000: {size / 2**20:.1f} MiB complete and encoded {t_done:.1f} s after the load started "
              f"({size / 1e6 / t_done:.2f} MB/s incl. ramp-up); encode {ev['encode_s']*1e3:.1f} ms, sha256 {ev['hash_s']*1e3:.1f} ms, "
              f"read {ev['read_s']*1e3:.1f} ms, send {ev['send_s']*1e3:.1f} ms, total {ev['total_s']*1e3:.1f} ms, "
              f"CPU {ev['cpu_user_s'] + ev['cpu_sys_s']:.3f} s, agent max RSS {ev['maxrss_kb'] / 1024:.0f} MiB; {ev['lib']} {ev['simd']}")
        assert not os.path.exists(f"{net.ledger_dir(enc)}/blockfile_000000") and os.path.exists(f"{net.ledger_dir(enc)}/blockfile_000001")
        st = ec.storage()
        shard = -(-size // 2)
        for j, p in enumerate(ec.peers):   # chunk j on the j-th peer, each about half the file (k = 2) plus its header
            assert list(st[p]['chunks']) == [f"{ev['name']}.c{j:02d}.rkec"], (p, st[p])
            assert shard < st[p]['chunk_bytes'] < shard + 4096
        assert ev['bytes_kept'] == st[enc]['chunk_bytes']
        # the peer keeps committing after its old block file is gone
        h = net.height(enc); net.invoke('put', 'after-ec', 'v')
        deadline = time.monotonic() + 30
        while net.height(enc) <= h and time.monotonic() < deadline: time.sleep(0.2)
        assert net.height(enc) > h
        # an independent reference: another peer's own copy of the same block file
        ref = f"{ledger0}/blockfile_000000"
        same = sha256_file(ref) == ev['file_sha256']
        print(f"peer0-org1's own blockfile_000000 {'is identical to' if same else 'DIFFERS from'} what peer1-org1 encoded")
        # rebuild inside the encoding peer's container from the other peers' chunks (over the pods' network)
        r = ec.rebuild(ev['name'], at=enc)
        assert r['decode']['verified'] and enc not in [ec.peers[i] for i in r['asked']] and len(r['decode']['used']) == 2
        assert sha256_file(r['out']) == ev['file_sha256']
        if same: assert open(r['out'], 'rb').read() == open(ref, 'rb').read()
        print(f"rebuild at {enc}: fetched {r['bytes_fetched'] / 2**20:.1f} MiB in {r['fetch_s']:.3f} s, decode {r['decode']['decode_s']*1e3:.1f} ms")
        # lose N - k = 2 random chunks; the client pod rebuilds from the 2 left
        lost = random.Random(int(time.time())).sample(range(4), 2)
        for j in lost: os.remove(f"{ec.store(ec.peers[j])}/{ev['name']}.c{j:02d}.rkec")
        r2 = ec.rebuild(ev['name'], out=f"{net.layout.admin}/rebuilt-client")
        assert r2['decode']['verified'] and sorted(r2['decode']['used']) == sorted(set(range(4)) - set(lost))
        assert sha256_file(r2['out']) == ev['file_sha256']
        d = ec.describe()
        assert d['n'] == 4 and d['k'] == 2 and d['encoders'] == [enc] and d['lib'].startswith('github.com/klauspost/reedsolomon')
        assert ec.stop() == []
