import pytest, polars as pl
from researchkit.core import ConfigError, NotMeasurable
from researchkit.claims import (Claim, Verdict, verdict, evaluate, summarize, ratio, Ratio, select, not_measurable_reason,
                                claims_markdown, optional, ratio_text)
from _results_fixtures import df_of

# hand-computed data: two paths, three repetitions, two sizes
#   size 64:   a = 10, 12, 9     b = 8, 10, 10    per-rep a/b = 1.25, 1.2, 0.9
#   size 1024: a = 20, 20, 30    b = 10, 25, 20   per-rep a/b = 2.0, 0.8, 1.5
VALS = [({'path': 'a', 'size': 64}, 0, 10.0), ({'path': 'a', 'size': 64}, 1, 12.0), ({'path': 'a', 'size': 64}, 2, 9.0),
        ({'path': 'b', 'size': 64}, 0, 8.0), ({'path': 'b', 'size': 64}, 1, 10.0), ({'path': 'b', 'size': 64}, 2, 10.0),
        ({'path': 'a', 'size': 1024}, 0, 20.0), ({'path': 'a', 'size': 1024}, 1, 20.0), ({'path': 'a', 'size': 1024}, 2, 30.0),
        ({'path': 'b', 'size': 1024}, 0, 10.0), ({'path': 'b', 'size': 1024}, 1, 25.0), ({'path': 'b', 'size': 1024}, 2, 20.0),
        ({'path': 'ipvlan', 'size': 64}, 0, None)]

@pytest.fixture
def df(): return df_of(VALS)

def test_summarize(df):
    s = summarize(df, ['path', 'size'], 'gbps')
    assert s['path'].to_list() == ['a', 'a', 'b', 'b'] and s['size'].to_list() == [64, 1024, 64, 1024]
    a64 = s.row(0, named=True)
    # sorted 9, 10, 12: median 10, q1 = 9.5, q3 = 11 (linear interpolation), min 9, max 12
    assert (a64['median'], a64['q1'], a64['q3'], a64['min'], a64['max'], a64['n']) == (10.0, 9.5, 11.0, 9.0, 12.0, 3)
    b1024 = s.row(3, named=True)
    assert (b1024['median'], b1024['q1'], b1024['q3']) == (20.0, 15.0, 22.5)
    assert 'ipvlan' not in s['path'].to_list()  # not-measurable rows carry no value

def test_ratio_paired_by_repetition(df):
    r = ratio(df, 'gbps', ['size'], {'path': 'a', 'size': 64}, {'path': 'b', 'size': 64})
    # ratios 1.25, 1.2, 0.9 -> sorted 0.9, 1.2, 1.25: median 1.2, q1 1.05, q3 1.225
    m, (lo, hi), n = r
    assert n == 3 and r.paired and m == pytest.approx(1.2) and lo == pytest.approx(1.05) and hi == pytest.approx(1.225)
    # over both sizes: 0.8, 0.9, 1.2, 1.25, 1.5, 2.0 -> median 1.225, q1 0.975, q3 1.4375
    r = ratio(df, 'gbps', ['size'], {'path': 'a'}, {'path': 'b'})
    assert (r.n, r.paired) == (6, True)
    assert (r.median, r.low, r.high) == pytest.approx((1.225, 0.975, 1.4375))
    # the verdict's numbers: geometric mean and the t interval (5 degrees of freedom: 2.571) of the log ratios
    import math, statistics
    logs = [math.log(x) for x in (0.8, 0.9, 1.2, 1.25, 1.5, 2.0)]
    m, h = statistics.mean(logs), 2.570582 * statistics.stdev(logs) / math.sqrt(6)   # t(5) at 97.5 %
    assert r.interval() == pytest.approx((math.exp(m), math.exp(m - h), math.exp(m + h)))
    assert r.text('a/b', digits=3) == f'a/b = {math.exp(m):.3f} [95% CI {math.exp(m - h):.3f}–{math.exp(m + h):.3f}, n=6]'

def test_ratio_without_by_pairs_across_sizes_only_by_repetition(df):
    # by=[]: the sizes of one repetition are pooled (median per side and repetition), then paired
    # rep0: a median(10,20)=15, b median(8,10)=9 -> 1.6667; rep1: 16/17.5; rep2: 19.5/15 = 1.3
    r = ratio(df, 'gbps', [], {'path': 'a'}, {'path': 'b'})
    assert r.n == 3 and r.median == pytest.approx(1.3) and r.low == pytest.approx((16 / 17.5 + 1.3) / 2)

def test_ratio_unpaired_fallback():
    d = df_of([({'path': 'a'}, 0, 2.0), ({'path': 'a'}, 1, 4.0), ({'path': 'b'}, 5, 1.0), ({'path': 'b'}, 6, 2.0), ({'path': 'b'}, 7, 4.0)])
    r = ratio(d, 'gbps', [], {'path': 'a'}, {'path': 'b'})
    # all a/b: 2, 1, .5, 4, 2, 1 -> sorted .5 1 1 2 2 4: median 1.5, q1 1, q3 2; n = smaller side = 2
    assert (r.median, r.low, r.high, r.n, r.paired) == (1.5, 1.0, 2.0, 2, False)
    assert 'unpaired' in r.text()

def test_ratio_of_a_not_measurable_side_carries_the_reason(df):
    with pytest.raises(NotMeasurable) as e: ratio(df, 'gbps', [], {'path': 'ipvlan'}, {'path': 'b'})
    assert e.value.reason == 'no ipvlan'
    with pytest.raises(NotMeasurable, match='not run'): ratio(df, 'gbps', [], {'path': 'sriov'}, {'path': 'b'})
    with pytest.raises(ConfigError): ratio(df, 'gbps', [], {'nope': 'x'}, {'path': 'b'})
    with pytest.raises(ConfigError): ratio(df, 'gbps', ['nope'], {'path': 'a'}, {'path': 'b'})

def test_ratio_combine_is_the_geometric_mean_per_repetition(df):
    # per repetition, the ratios at the two sizes (64: 1.25, 1.2, 0.9; 1024: 2.0, 0.8, 1.5) combined by geometric mean:
    # rep0 sqrt(1.25 × 2.0) = 1.5811, rep1 sqrt(1.2 × 0.8) = 0.9798, rep2 sqrt(0.9 × 1.5) = 1.1619
    r = ratio(df, 'gbps', [], {'path': 'a'}, {'path': 'b'}, combine=['size'])
    per_rep = sorted([(1.25 * 2.0) ** 0.5, (1.2 * 0.8) ** 0.5, (0.9 * 1.5) ** 0.5])
    assert (r.n, r.paired) == (3, True)
    assert r.median == pytest.approx(per_rep[1]) and r.low == pytest.approx((per_rep[0] + per_rep[1]) / 2)
    assert r.high == pytest.approx((per_rep[1] + per_rep[2]) / 2)
    est, lo, hi = r.interval()
    assert r.text('a/b') == f'a/b = {est:.2f} [95% CI {lo:.2f}–{hi:.2f}, n=3]' and lo < r.median < hi
    # one repetition measured twice at a size: the side's median is taken first (a at 64 in rep 0: median(10, 14) = 12)
    d = pl.concat([df, df_of([({'path': 'a', 'size': 64}, 0, 14.0)])], how='diagonal_relaxed')
    assert ratio(d, 'gbps', [], {'path': 'a'}, {'path': 'b'}, combine=['size']).high == pytest.approx(
        ((12 / 8 * 2.0) ** 0.5 + per_rep[1]) / 2)

def test_ratio_combine_drops_values_at_or_below_zero():
    # rep 0: sizes 1 and 2 -> 2/1 and 0/2 (dropped): 2; rep 1: 3/1 and 4/1 -> sqrt(12)
    d = df_of([({'path': 'a', 'size': 1}, 0, 2.0), ({'path': 'b', 'size': 1}, 0, 1.0), ({'path': 'a', 'size': 2}, 0, 0.0), ({'path': 'b', 'size': 2}, 0, 2.0),
               ({'path': 'a', 'size': 1}, 1, 3.0), ({'path': 'b', 'size': 1}, 1, 1.0), ({'path': 'a', 'size': 2}, 1, 4.0), ({'path': 'b', 'size': 2}, 1, 1.0)])
    r = ratio(d, 'gbps', [], {'path': 'a'}, {'path': 'b'}, combine=['size'])
    assert r.n == 2 and r.median == pytest.approx((2 + 12 ** 0.5) / 2)
    # every pair at or below zero, or no repetition in common: not measurable (never an unpaired fallback)
    with pytest.raises(NotMeasurable): ratio(d.filter(pl.col('size') == 2, pl.col('repetition') == 0), 'gbps', [], {'path': 'a'}, {'path': 'b'}, combine=['size'])
    apart = df_of([({'path': 'a', 'size': 1}, 0, 2.0), ({'path': 'b', 'size': 1}, 1, 1.0)])
    with pytest.raises(NotMeasurable): ratio(apart, 'gbps', [], {'path': 'a'}, {'path': 'b'}, combine=['size'])
    with pytest.raises(ConfigError): ratio(d, 'gbps', [], {'path': 'a'}, {'path': 'b'}, combine=['nope'])
    with pytest.raises(ConfigError): ratio(d, 'gbps', ['size'], {'path': 'a'}, {'path': 'b'}, combine=['size'])

def test_optional_part_of_a_claim(df):
    assert optional(ratio, df, 'gbps', [], {'path': 'ipvlan'}, {'path': 'b'}) is None
    r = optional(ratio, df, 'gbps', [], {'path': 'a'}, {'path': 'b'})
    assert isinstance(r, Ratio) and ratio_text('a/b', r) == r.text('a/b')
    assert ratio_text('ipvlan/b', None) == 'ipvlan/b: no data'
    with pytest.raises(ConfigError): optional(ratio, df, 'gbps', [], {'nope': 'x'}, {'path': 'b'})  # a bug is never "optional"

def test_select_and_reason(df):
    assert select(df, 'gbps', path='a', size=[64]).height == 3
    assert not_measurable_reason(df, path='ipvlan') == 'no ipvlan'
    assert not_measurable_reason(df, path='ipvlan', size=64) == 'no ipvlan'
    assert not_measurable_reason(df, path='a') is None and not_measurable_reason(df, vni=3) is None
    assert not_measurable_reason(df.filter(pl.col('metric') == 'x')) is None

def _claims():
    def c1(d):
        r = ratio(d, 'gbps', ['size'], {'path': 'a'}, {'path': 'b'})
        return verdict(r.median > 1.1, r.text('a/b'))
    def c2(d):
        r = ratio(d, 'gbps', ['size'], {'path': 'a', 'size': 1024}, {'path': 'b', 'size': 1024})
        return verdict(r.median < 1, r.text('a/b at 1 KiB'))
    def c3(d):
        r = ratio(d, 'gbps', [], {'path': 'ipvlan'}, {'path': 'b'})
        return verdict(r.median < 1, r.text())
    return [Claim('C1', 'a is ≥ 10 % faster than b', 'a ≈ +10 %', c1), Claim('C2', 'a is slower at 1 KiB', 'a < b', c2),
            Claim('C3', 'ipvlan is slowest', 'ipvlan | last', c3)]

def test_evaluate_and_markdown(df):
    t = evaluate(_claims(), df)
    assert t.columns == ['id', 'text', 'paper', 'status', 'measured', 'reason', 'needed', 'finer'] and t['finer'].to_list() == [None] * 3
    assert t['status'].to_list() == ['reproduced', 'refuted', 'not measurable']
    assert t['reason'].to_list() == ['', '', 'no ipvlan']
    assert t['measured'][1] == ratio(df, 'gbps', ['size'], {'path': 'a', 'size': 1024}, {'path': 'b', 'size': 1024}).text('a/b at 1 KiB')
    assert t['measured'][1].startswith('a/b at 1 KiB = ') and '[95% CI ' in t['measured'][1]
    md = claims_markdown(t)
    lines = md.splitlines()
    assert lines[0] == '| id | claim | paper | verdict | measured |' and len(lines) == 5
    assert '❌ refuted' in lines[3] and 'ipvlan \\| last' in lines[4] and 'not measurable on this testbed: no ipvlan' in lines[4]
    assert lines[4] == '| C3 | ipvlan is slowest | ipvlan \\| last | ⚪ not measurable | not measurable on this testbed: no ipvlan |'
    # a newline or '|' in the measured text cannot break the row
    t2 = t.with_columns(pl.lit('a|b\nc').alias('measured'), pl.lit('').alias('reason'), pl.lit('refuted').alias('status'))
    assert claims_markdown(t2).splitlines()[2].endswith('| ❌ refuted | a\\|b c |')

def test_a_bug_is_not_a_verdict(df):
    with pytest.raises(ZeroDivisionError): evaluate([Claim('B', 'x', 'y', lambda d: 1 / 0)], df)
    with pytest.raises(TypeError): evaluate([Claim('B', 'x', 'y', lambda d: 'reproduced')], df)
    with pytest.raises(ConfigError): evaluate([Claim('A', 'x', 'y', lambda d: verdict(True, '')), Claim('A', 'x', 'y', lambda d: verdict(True, ''))], df)
    with pytest.raises(ConfigError): Verdict('confirmed', '')

def test_evaluate_nothing():
    assert evaluate([], df_of([])).height == 0
