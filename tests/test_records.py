import json, subprocess, datetime as dt
import pytest, polars as pl
import researchkit
from researchkit.core import ConfigError
from researchkit.testbed.nodes import LocalNode
from researchkit.results.records import (SCHEMA, COLUMNS, PROV_KEYS, NOT_MEASURABLE, point_json, point_key, git_commit,
                                         provenance, live_provenance, records, not_measurable, frame)
from _results_fixtures import PROV

def _git(root, *args):
    subprocess.run(['git', '-C', str(root), '-c', 'user.email=t@t.invalid', '-c', 'user.name=t', *args], check=True, capture_output=True)

def test_columns_exact():
    assert COLUMNS == ['study', 'experiment', 'point', 'point_key', 'repetition', 'metric', 'value', 'unit', 'note', 'timestamp',
                       'run_id', 'campaign', 'profile', 'testbed', 'package_version', 'git_commit', 'hostname', 'kernel', 'cores',
                       'cpu_model', 'loadavg', 'tool_versions']

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
