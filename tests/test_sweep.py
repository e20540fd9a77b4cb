import time, itertools
import pytest, polars as pl
from researchkit.core import ConfigError, NotMeasurable
from researchkit.testbed.nodes import LocalNode
from researchkit.results.records import live_provenance, NOT_MEASURABLE
from researchkit.results.store import ResultStore
from researchkit.results.sweep import sweep, SweepSummary
from _results_fixtures import PROV

POINTS = [{'path': p, 'size': s} for p in ('bridge', 'vxlan') for s in (64, 1024)]

def _run(st, measure, **kw):
    args = dict(study='cni', experiment='tput', points=POINTS, repetitions=3, measure=measure, prov=PROV, testbed='local', progress=False)
    return sweep(st, **{**args, **kw})

def test_repetition_major_order_and_records(tmp_path):
    st, calls = ResultStore(tmp_path), []
    def measure(p, rep): calls.append((rep, p['path'], p['size'])); return {'gbps': (rep + p['size'] / 1000, 'Gbit/s'), 'cpu': (0.1, 's')}
    s = _run(st, measure)
    assert calls == [(r, p['path'], p['size']) for r in range(3) for p in POINTS]
    assert (s.measured, s.skipped, s.not_measurable) == (12, 0, 0)
    df = st.load('cni')
    assert df.height == 24 and set(df['metric']) == {'gbps', 'cpu'}
    assert df.filter((pl.col('path') == 'vxlan') & (pl.col('size') == 1024) & (pl.col('metric') == 'gbps')).sort('repetition')['value'].to_list() == [1.024, 2.024, 3.024]

def test_shuffled_repetitions_run_every_point_in_a_seeded_order_of_their_own(tmp_path):
    "shuffle=True: each repetition measures all its points, in an order that differs between repetitions and is the same when resumed."
    pts = [{'path': f'p{i}', 'size': 64} for i in range(8)]
    orders = []
    for d in ('a', 'b'):
        calls = []
        _run(ResultStore(tmp_path/d), lambda p, rep: calls.append((rep, p['path'])) or {'gbps': (1.0, 'Gbit/s')}, points=pts, shuffle=True)
        orders.append(calls)
    assert orders[0] == orders[1]                                       # seeded: the same campaign runs the same order
    per = [[p for r, p in orders[0] if r == k] for k in range(3)]
    assert all(sorted(o) == sorted(x['path'] for x in pts) for o in per)  # every point once per repetition
    assert len({tuple(o) for o in per}) == 3 and per[0] != [x['path'] for x in pts]   # a different order each time

def test_paired_arms_run_back_to_back_in_rounds_of_their_own_random_order(tmp_path):
    "pair=('path',): in every repetition the points equal but for the path run back to back, both the rounds and the arms within each in a seeded random order; a resumed sweep keeps it."
    pts = [{'path': p, 'size': s} for s in (64, 256, 1024, 4096) for p in ('bridge', 'vxlan', 'macvlan')]
    def go(st, stop_after=None):
        calls = []
        def measure(p, rep):
            if stop_after is not None and len(calls) == stop_after: raise KeyboardInterrupt
            calls.append((rep, p['size'], p['path'])); return {'gbps': (1.0, 'Gbit/s')}
        try: _run(st, measure, points=pts, repetitions=4, shuffle=True, pair=('path',))
        except KeyboardInterrupt: pass
        return calls
    calls = go(ResultStore(tmp_path/'a'))
    per = [[(s, p) for r, s, p in calls if r == k] for k in range(4)]
    for o in per:
        assert sorted(o) == sorted((x['size'], x['path']) for x in pts)
        rounds = [o[i:i + 3] for i in range(0, 12, 3)]
        assert all(len({s for s, _ in g}) == 1 for g in rounds)           # a round is one size, its three paths back to back
    assert len({tuple(s for s, _ in o[::3]) for o in per}) > 1            # the rounds' order changes between repetitions
    assert len({tuple(p for _, p in o[:3]) for o in per} | {tuple(p for _, p in o[3:6]) for o in per}) > 1   # so does the arms'
    st = ResultStore(tmp_path/'b')
    first = go(st, stop_after=7)
    assert first + go(st) == calls                                        # resumed: the same order, nothing twice
    with pytest.raises(ConfigError, match='pair'): _run(ResultStore(tmp_path/'c'), lambda p, r: {}, pair='path')

def test_interrupted_sweep_resumes_and_measures_only_the_rest(tmp_path):
    st, calls = ResultStore(tmp_path), []
    def measure(p, rep):
        if len(calls) == 6: raise KeyboardInterrupt  # Ctrl-C during the 7th measurement
        calls.append((rep, p['path'], p['size'])); return {'gbps': (1.0, 'Gbit/s')}
    with pytest.raises(KeyboardInterrupt): _run(st, measure)
    assert ResultStore(tmp_path).load('cni').height == 6       # every finished point is on disk
    first = list(calls); calls.clear()
    def measure2(p, rep): calls.append((rep, p['path'], p['size'])); return {'gbps': (2.0, 'Gbit/s')}
    s = _run(ResultStore(tmp_path), measure2)
    everything = [(r, p['path'], p['size']) for r in range(3) for p in POINTS]
    assert calls == everything[6:] and first == everything[:6]
    assert (s.measured, s.skipped) == (6, 6)
    df = ResultStore(tmp_path).load('cni')
    assert df.height == 12 and df.select('point_key', 'repetition').unique().height == 12
    # a third run has nothing left to do
    calls.clear(); s = _run(ResultStore(tmp_path), measure2)
    assert calls == [] and (s.measured, s.skipped) == (0, 12)
    # more repetitions later: only the new ones
    s = _run(ResultStore(tmp_path), measure2, repetitions=4)
    assert calls == [(3, p['path'], p['size']) for p in POINTS] and s.skipped == 12

def test_not_measurable_is_recorded_and_the_sweep_goes_on(tmp_path):
    st, seen = ResultStore(tmp_path), []
    def measure(p, rep):
        if p['path'] == 'vxlan': raise NotMeasurable('vxlan', 'Error: Unknown device type.')
        return {'gbps': (1.0, 'Gbit/s')}
    s = _run(st, measure, repetitions=2, on_not_measurable=lambda p, r, e: seen.append((p['size'], r, e.reason)))
    assert (s.measured, s.not_measurable, s.reasons) == (4, 4, ['Error: Unknown device type.'])
    assert seen == [(64, 0, 'Error: Unknown device type.'), (1024, 0, 'Error: Unknown device type.'),
                    (64, 1, 'Error: Unknown device type.'), (1024, 1, 'Error: Unknown device type.')]
    nm = st.load('cni').filter(pl.col('metric') == NOT_MEASURABLE)
    assert nm.height == 4 and set(nm['path']) == {'vxlan'} and set(nm['note']) == {'Error: Unknown device type.'}
    assert nm['value'].null_count() == 4
    s = _run(st, measure, repetitions=2)   # recorded as not measurable counts as recorded
    assert (s.measured, s.not_measurable, s.skipped) == (0, 0, 8)

def test_not_measurable_raise(tmp_path):
    def measure(p, rep): raise NotMeasurable('x', 'nope')
    with pytest.raises(NotMeasurable): _run(ResultStore(tmp_path), measure, on_not_measurable='raise')
    assert ResultStore(tmp_path).load('cni').height == 0

def test_a_bug_propagates_after_finished_points_are_safe(tmp_path):
    def measure(p, rep):
        if rep == 1 and p['path'] == 'vxlan': raise RuntimeError('parser bug')
        return {'gbps': (1.0, 'Gbit/s')}
    with pytest.raises(RuntimeError, match='parser bug'): _run(ResultStore(tmp_path), measure)
    df = ResultStore(tmp_path).load('cni')
    assert df.height == 6 and NOT_MEASURABLE not in set(df['metric'])

def test_provenance_is_taken_per_measurement(tmp_path):
    n = itertools.count()
    def prov(): return {**PROV, 'loadavg': float(next(n))}
    prov.campaign = PROV['run_id']  # as `live_provenance` does: the sweep needs not call prov() to know the campaign
    _run(ResultStore(tmp_path), lambda p, r: {'gbps': (1.0, 'Gbit/s')}, prov=prov, repetitions=1)
    assert sorted(ResultStore(tmp_path).load('cni')['loadavg'].to_list()) == [0.0, 1.0, 2.0, 3.0]

def test_live_provenance_from_a_real_node(tmp_path):
    st = ResultStore(tmp_path)
    s = _run(st, lambda p, r: {'gbps': (1.0, 'Gbit/s')}, prov=live_provenance('local', LocalNode(), profile='smoke'), repetitions=1)
    df = st.load('cni')
    assert s.measured == 4 and df['loadavg'].null_count() == 0 and set(df['testbed']) == {'local'} and df['cores'].min() >= 1

def test_summary_times(tmp_path):
    def measure(p, rep): time.sleep(0.02); return {'gbps': (1.0, 'Gbit/s')}
    s = _run(ResultStore(tmp_path), measure, repetitions=1)
    assert isinstance(s, SweepSummary) and s.measure_s >= 0.08 and s.wall_s >= s.measure_s and s.overhead_s >= 0
    assert '4 measured' in str(s) and 'harness overhead' in s._repr_html_()

def test_progress_bar(tmp_path, capsys):
    _run(ResultStore(tmp_path), lambda p, r: {'gbps': (1.0, 'Gbit/s')}, repetitions=1, progress=True)
    err = capsys.readouterr().err
    assert 'cni/tput' in err and '4/4' in err

@pytest.mark.parametrize('kw, field', [({'points': []}, 'points'), ({'points': [{'a': 1}, {'a': 1}]}, 'points[1]'),
                                       ({'repetitions': 0}, 'repetitions'), ({'on_not_measurable': 'ignore'}, 'on_not_measurable'),
                                       ({'testbed': 'other'}, 'prov.testbed')])
def test_bad_arguments(tmp_path, kw, field):
    with pytest.raises(ConfigError) as e: _run(ResultStore(tmp_path), lambda p, r: {'gbps': (1.0, 'Gbit/s')}, **kw)
    assert e.value.where == field
