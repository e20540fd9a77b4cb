import json, subprocess, datetime as dt
import pytest, polars as pl
import researchkit
from researchkit.core import ConfigError
from researchkit.testbed.nodes import LocalNode
from researchkit.results.records import (SCHEMA, COLUMNS, PROV_KEYS, HOST_COLUMNS, HOST_FACTS, NOT_MEASURABLE, point_json, point_key,
                                         git_commit, provenance, live_provenance, records, not_measurable, frame, host_facts,
                                         host_columns, host_changes, recorded_hosts, mitigations_text)
from _results_fixtures import PROV

def _git(root, *args):
    subprocess.run(['git', '-C', str(root), '-c', 'user.email=t@t.invalid', '-c', 'user.name=t', *args], check=True, capture_output=True)

def test_columns_exact():
    assert COLUMNS == ['study', 'experiment', 'point', 'point_key', 'repetition', 'metric', 'value', 'unit', 'note', 'timestamp',
                       'run_id', 'campaign', 'profile', 'testbed', 'package_version', 'git_commit', 'hostname', 'kernel', 'cores',
                       'cpu_model', 'loadavg', 'tool_versions', 'kernel_build', 'cpu_signature', 'microcode', 'mitigations', 'virtualization']
    assert HOST_COLUMNS == COLUMNS[-5:] and set(HOST_COLUMNS) <= set(PROV_KEYS) and set(HOST_FACTS) <= set(COLUMNS)

def test_point_key_is_stable_and_distinguishes():
    k = point_key('s', 'e', {'size': 1024, 'path': 'bridge'})
    assert k == point_key('s', 'e', {'path': 'bridge', 'size': 1024}) and len(k) == 12
    assert len({k, point_key('t', 'e', {'size': 1024, 'path': 'bridge'}), point_key('s', 'f', {'size': 1024, 'path': 'bridge'}),
                point_key('s', 'e', {'size': 1025, 'path': 'bridge'})}) == 4
    assert point_json({'b': [1, 2], 'a': None}) == '{"a":null,"b":[1,2]}'

def test_git_commit(tmp_path, monkeypatch):
    assert git_commit(tmp_path) == 'unknown'
    _git(tmp_path, 'init', '-q'); (tmp_path/'code.py').write_text('x = 1\n'); (tmp_path/'results').mkdir()
    (tmp_path/'results'/'r.txt').write_text('1'); _git(tmp_path, 'add', '.'); _git(tmp_path, 'commit', '-qm', 'c')
    head = subprocess.run(['git', '-C', str(tmp_path), 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path/'results'/'r.txt').write_text('2')       # new results do not make the code dirty
    (tmp_path/'untracked.txt').write_text('x')
    assert git_commit(tmp_path) == head
    (tmp_path/'code.py').write_text('x = 2\n')
    assert git_commit(tmp_path) == head + '-dirty'
    monkeypatch.setenv('RESEARCHKIT_HOME', str(tmp_path))
    assert provenance('local', LocalNode())['git_commit'] == head + '-dirty'

def test_provenance_from_a_real_node():
    p = provenance('local', LocalNode(), tools={'sockperf': '3.10', 'iperf3': '3.12'}, profile='quick', run_id='rk00ff')
    assert set(p) == {*PROV_KEYS, 'campaign'} and p['campaign'] == p['run_id']
    assert p['run_id'] == 'rk00ff' and p['profile'] == 'quick' and p['package_version'] == researchkit.__version__
    assert p['kernel'] == subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout.strip()
    assert p['cores'] >= 1 and p['loadavg'] >= 0 and p['cpu_model'] is not None
    assert p['tool_versions'] == '{"iperf3": "3.12", "sockperf": "3.10"}'
    live = live_provenance('local', LocalNode(), profile='quick')
    a = live(); assert set(a) == {*PROV_KEYS, 'campaign'} and live.campaign == a['campaign'] and a['git_commit'] == p['git_commit']

def test_records_rows():
    rs = records('cni', 'tput', {'path': 'bridge', 'size': 64}, 2, {'gbps': (9, 'Gbit/s'), 'cpu_s': (0.5, 's')}, PROV)
    assert len(rs) == 2 and all(set(r) == set(COLUMNS) for r in rs)
    r = rs[0]
    assert (r['metric'], r['value'], r['unit'], r['note'], r['repetition']) == ('gbps', 9.0, 'Gbit/s', None, 2)
    assert r['point'] == '{"path":"bridge","size":64}' and r['point_key'] == point_key('cni', 'tput', {'path': 'bridge', 'size': 64})
    assert r['timestamp'].tzinfo is dt.timezone.utc and r['loadavg'] == 0.25
    df = frame(rs)
    assert df.schema == pl.Schema(SCHEMA)

def test_not_measurable_row():
    (r,) = not_measurable('cni', 'tput', {'path': 'ipvlan'}, '  RTNETLINK answers: Operation not supported\n', PROV)
    assert (r['metric'], r['value'], r['note']) == (NOT_MEASURABLE, None, 'RTNETLINK answers: Operation not supported')
    with pytest.raises(ConfigError): not_measurable('cni', 'tput', {'path': 'ipvlan'}, '  ', PROV)

@pytest.mark.parametrize('metrics', [{}, {'gbps': 1.0}, {'gbps': ('1', 'x')}, {'gbps': (float('nan'), 'x')}, {'gbps': (True, 'x')},
                                     {'gbps': (1.0, None)}, {NOT_MEASURABLE: (1.0, 'x')}])
def test_records_refuses_bad_metrics(metrics):
    with pytest.raises(ConfigError): records('cni', 'tput', {}, 0, metrics, PROV)

def test_records_refuses_bad_inputs():
    with pytest.raises(ConfigError, match='repetition'): records('cni', 'tput', {}, -1, {'g': (1, 'x')}, PROV)
    with pytest.raises(ConfigError, match='prov'): records('cni', 'tput', {}, 0, {'g': (1, 'x')}, {'testbed': 'x'})
    with pytest.raises(ConfigError, match='study'): records('', 'tput', {}, 0, {'g': (1, 'x')}, PROV)
    with pytest.raises(ConfigError, match='point'): records('cni', 'tput', {'a': {1, 2}}, 0, {'g': (1, 'x')}, PROV)


def _sh(cmd):
    return subprocess.run(['sh', '-c', cmd], capture_output=True, text=True).stdout.strip()

def test_host_facts_read_on_this_machine():
    "The facts are read on the node (here: this machine) and parse: compared with what the kernel and /proc say directly."
    import os, glob
    f = host_facts(LocalNode())
    assert set(f) == {'hostname', *HOST_FACTS}
    assert f['kernel'] == os.uname().release and f['kernel_build'] == os.uname().version and f['hostname'] == _sh('hostname')
    assert f['cores'] == int(_sh('nproc')) >= 1
    assert f['cpu_model'] == _sh("grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'")
    mc = sorted(set(_sh("grep '^microcode' /proc/cpuinfo | cut -d: -f2- | tr -d ' '").split()))
    assert f['microcode'] == ','.join(mc)
    if os.uname().machine == 'x86_64':
        fam = _sh("grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '")
        assert f['cpu_signature'].startswith(f"family {fam} model ") and ' stepping ' in f['cpu_signature']
    vulns = {os.path.basename(p): open(p).read().strip() for p in glob.glob('/sys/devices/system/cpu/vulnerabilities/*')}
    assert {k: v for k, v in f['mitigations'].items() if k != 'boot'} == vulns
    boot = [t for t in open('/proc/cmdline').read().split() if t.split('=')[0] in ('mitigations', 'nospectre_v2', 'spectre_v2', 'pti', 'nopti', 'nosmt')]
    assert all(t in f['mitigations'].get('boot', '') for t in boot)
    assert f['virtualization'] and f['virtualization'].split(',')[0] in {'none', 'vm', _sh('systemd-detect-virt --vm 2>/dev/null')}
    # what every record of a campaign carries
    p = provenance('local', LocalNode(), profile='quick')
    assert {k: p[k] for k in HOST_COLUMNS} == host_columns(f) and json.loads(p['mitigations']) == f['mitigations']
    live = live_provenance('local', LocalNode())
    assert live.host == {k: p[k] for k in ['hostname', *HOST_FACTS]} and live()['microcode'] == f['microcode']
    (r,) = records('s', 'e', {}, 0, {'x': (1.0, '')}, p)
    assert frame([r])['kernel_build'].to_list() == [os.uname().version]
    assert mitigations_text(f['mitigations']) != '—' or not vulns

def test_records_without_host_facts_still_work():
    "A provenance built before the host facts (no such keys) still makes rows; those columns are null."
    (r,) = records('s', 'e', {}, 0, {'x': (1.0, '')}, PROV)
    assert all(r[k] is None for k in HOST_COLUMNS) and frame([r]).columns == COLUMNS

def test_host_changes_and_recorded_hosts():
    a = {'kernel': '6.18.44-fc-v595', 'kernel_build': '#1 SMP', 'cpu_model': 'AMD EPYC', 'cpu_signature': 'family 25 model 1 stepping 1',
         'microcode': '0xa0011d1', 'cores': 2, 'mitigations': {'spectre_v2': 'Mitigation: Retpolines', 'meltdown': 'Not affected'},
         'virtualization': 'kvm'}
    b = {**a, 'kernel': '6.18.44-fc-v657', 'cores': 4, 'mitigations': json.dumps({'spectre_v2': 'Mitigation: Enhanced IBRS', 'meltdown': 'Not affected',
                                                                                  'vmscape': 'Not affected'})}
    assert host_changes(a, b) == ['kernel: 6.18.44-fc-v595 → 6.18.44-fc-v657', 'cores: 2 → 4',
                                  'mitigations.spectre_v2: Mitigation: Retpolines → Mitigation: Enhanced IBRS',
                                  'mitigations.vmscape: (not reported) → Not affected']
    assert host_changes(a, {**a, 'microcode': None, 'mitigations': None}) == []   # not recorded: not compared
    assert host_changes(a, {**a, 'microcode': ''}) == ['microcode: 0xa0011d1 → (none)']
    rs = (records('s', 'e', {}, 0, {'x': (1.0, '')}, {**PROV, 'run_id': 'rk1'})
          + records('s', 'e', {}, 1, {'x': (1.0, '')}, {**PROV, 'run_id': 'rk2', 'kernel': b['kernel'], 'cores': 4, 'cpu_model': 'AMD EPYC', **host_columns(b)}))
    h = recorded_hosts(frame(rs))
    assert [x['run_id'] for x in h] == ['rk1', 'rk2'] and h[0]['microcode'] is None and h[1]['mitigations'] == b['mitigations']
    assert host_changes(h[0], h[1]) == ['kernel: 6.18 → 6.18.44-fc-v657', 'cpu_model: cpu → AMD EPYC', 'cores: 2 → 4']
    assert recorded_hosts(frame([])) == []
