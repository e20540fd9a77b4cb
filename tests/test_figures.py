import json
import pytest, polars as pl, altair as alt
from researchkit.core import ConfigError
from researchkit.figures import (REF_LABEL, MEASURED_LABEL, SRC, line_chart, bar_chart, with_reference, reference_rules, table_figure,
                                 save_chart, chart_spec)

PNG_SIG = b'\x89PNG\r\n\x1a\n'
M = pl.DataFrame({'size': [64, 1024, 65536] * 2, 'median': [1.0, 8.0, 20.0, 0.9, 7.0, 18.0], 'path': ['bridge'] * 3 + ['vxlan'] * 3,
                  'q1': [0.9, 7.5, 19.0, 0.8, 6.5, 17.0], 'q3': [1.1, 8.5, 21.0, 1.0, 7.5, 19.0], 'host': ['same'] * 6})
REF = pl.DataFrame({'size': [64, 65536], 'median': [2.0, 30.0], 'path': ['bridge', 'bridge'], 'host': ['same', 'same']})

def _layers(spec):
    "Every single-view layer of a spec, wherever it sits (layer, facet, concat)."
    out = []
    def walk(s):
        if isinstance(s, dict):
            if 'mark' in s: out.append(s)
            for k in ('layer', 'hconcat', 'vconcat', 'concat'): [walk(x) for x in s.get(k, [])]
            if 'spec' in s: walk(s['spec'])
    walk(spec); return out

def _mark(l): return l['mark'] if isinstance(l['mark'], dict) else {'type': l['mark']}

def _filter_src(l):
    f = [t['filter'] for t in l.get('transform', []) if 'filter' in t]
    return f[0] if f else None

def _check_png_svg(paths, name):
    png, svg = paths
    assert png.name == f'{name}.png' and svg.name == f'{name}.svg'
    data = png.read_bytes()
    assert data[:8] == PNG_SIG and len(data) > 5000
    assert svg.read_text().lstrip().startswith('<svg') and svg.stat().st_size > 1000

def test_line_chart_with_reference_saves_png_and_svg(tmp_path):
    ch = line_chart(M, x='size', y='median', color='path', log_x=True, y_err=('q1', 'q3'), ref=REF, title='Fig. 10',
                    x_title='message size (B)', y_title='Gbit/s')
    _check_png_svg(save_chart(ch, tmp_path/'figs', 'fig10'), 'fig10')
    assert 'paper (reference, other hardware)' in (tmp_path/'figs'/'fig10.svg').read_text()

def test_reference_overlay_is_a_separate_labelled_series():
    spec = line_chart(M, x='size', y='median', color='path', ref=REF).to_dict()
    layers = _layers(spec)
    ref_layers = [l for l in layers if _filter_src(l) and REF_LABEL in json.dumps(_filter_src(l))]
    meas_layers = [l for l in layers if _filter_src(l) and MEASURED_LABEL in json.dumps(_filter_src(l))]
    assert ref_layers and meas_layers and len(ref_layers) + len(meas_layers) == len(layers)
    pts = [l for l in ref_layers if _mark(l)['type'] == 'point']
    assert pts and _mark(pts[0])['filled'] is False
    assert pts[0]['encoding']['shape']['scale']['domain'] == [REF_LABEL]           # the legend entry
    assert any(_mark(l).get('strokeDash') for l in ref_layers if _mark(l)['type'] == 'line')
    # the data: reference rows are tagged, measured rows untouched
    (values,) = spec['datasets'].values()
    assert sorted({v[SRC] for v in values}) == [MEASURED_LABEL, REF_LABEL]
    assert [v['median'] for v in values if v[SRC] == REF_LABEL] == [2.0, 30.0]
    assert [v['median'] for v in values if v[SRC] == MEASURED_LABEL] == M['median'].to_list()

def test_bar_chart_and_facets(tmp_path):
    ch = bar_chart(M, x='size', y='median', color='path', y_err=('q1', 'q3'), ref=REF, facet='host', title='Fig. 13')
    spec = ch.to_dict()
    assert 'facet' in spec and REF_LABEL in json.dumps(spec)
    _check_png_svg(save_chart(ch, tmp_path, 'fig13'), 'fig13')

def test_with_reference(tmp_path):
    plain = alt.Chart(M).mark_line().encode(x='size:Q', y='median:Q', color='path:N')
    ch = with_reference(plain, REF, x='size', y='median', color='path')
    assert REF_LABEL in json.dumps(ch.to_dict())
    _check_png_svg(save_chart(ch, tmp_path, 'overlay'), 'overlay')
    spec = with_reference(M, REF, x='size', y='median', color='path', kind='bar', facet='host').to_dict()
    assert REF_LABEL in json.dumps(spec)
    with pytest.raises(ConfigError): with_reference(line_chart(M, x='size', y='median', facet='host'), REF, x='size', y='median')
    with pytest.raises(ConfigError): with_reference(M, REF, x='size', y='median', kind='pie')
    with pytest.raises(ConfigError): with_reference(plain, REF.drop('median'), x='size', y='median')

def test_reference_rules(tmp_path):
    knees = pl.DataFrame({'size': [256, 4096, 4096], 'path': ['bridge', 'vxlan', 'bridge'], 'why': ['paper knee bridge', 'paper knee vxlan', 'paper knee bridge']})
    labels = pl.DataFrame({'size': [256, 4096], 'text': ['paper knee bridge: 256', 'paper knee bridge, vxlan: 4096']})
    ch = reference_rules(line_chart(M, x='size', y='median', color='path', log_x=True, height=200), knees, x='size', color='path',
                         tooltip='why', text='text', labels=labels, label_y=196)
    spec = ch.to_dict()
    measured, rules, text = spec['layer']
    assert _filter_src(measured['layer'][0])                           # the measured chart, untouched
    assert rules['mark'] == {'type': 'rule', 'strokeDash': [6, 4], 'strokeWidth': 1.5}
    assert rules['encoding'] == {'x': {'field': 'size', 'type': 'quantitative'}, 'color': {'field': 'path', 'title': 'path', 'type': 'nominal'},
                                 'tooltip': [{'field': 'why', 'type': 'nominal'}]}
    assert [r['size'] for r in spec['datasets'][rules['data']['name']]] == [256, 4096, 4096]   # one rule per reference row
    assert _mark(text) == {'type': 'text', 'angle': 270, 'align': 'left', 'dx': 4, 'dy': -5, 'fontSize': 10, 'color': 'gray'}
    assert text['encoding'] == {'x': {'field': 'size', 'type': 'quantitative'}, 'y': {'value': 196}, 'text': {'field': 'text', 'type': 'nominal'}}
    assert [r['text'] for r in spec['datasets'][text['data']['name']]] == labels['text'].to_list()
    _check_png_svg(save_chart(ch, tmp_path, 'knees'), 'knees')
    assert 'paper knee bridge, vxlan: 4096' in (tmp_path/'knees.svg').read_text()
    # without text: rules only; the label rows default to the reference rows
    assert len(reference_rules(line_chart(M, x='size', y='median'), knees, x='size').to_dict()['layer']) == 2
    assert len(reference_rules(line_chart(M, x='size', y='median'), knees, x='size', text='why').to_dict()['layer']) == 3
    with pytest.raises(ConfigError, match='why'): reference_rules(line_chart(M, x='size', y='median'), knees.drop('why'), x='size', tooltip='why')
    with pytest.raises(ConfigError): reference_rules(line_chart(M, x='size', y='median', facet='host'), knees, x='size')
    with pytest.raises(ConfigError): reference_rules(line_chart(M, x='size', y='median'), knees, x='size', text='text', labels=labels.drop('text'))

def test_missing_columns_are_named():
    with pytest.raises(ConfigError, match='gbps'): line_chart(M, x='size', y='gbps', color='path')

def test_table_figure(tmp_path):
    t = pl.DataFrame({'scenario': ['BMP2BMP same-host', 'BMP2BMP different-host'], 'flannel-vxlan (paper, ms)': [20.11, 16.11],
                      'flannel-vxlan (measured, ms)': [3.5, None]})
    ch = table_figure(t, 'Table 3: MPI_Alltoall latency')
    s = json.dumps(ch.to_dict(), ensure_ascii=False)
    assert '20.11' in s and '—' in s and 'Table 3' in s
    _check_png_svg(save_chart(ch, tmp_path, 'table3'), 'table3')

def test_save_is_deterministic_and_does_not_rewrite(tmp_path):
    mk = lambda: line_chart(M, x='size', y='median', color='path', ref=REF, title='t')
    a = save_chart(mk(), tmp_path/'a', 'x'); b = save_chart(mk(), tmp_path/'b', 'x')
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    before = [p.stat().st_mtime_ns for p in a]
    save_chart(mk(), tmp_path/'a', 'x')
    assert [p.stat().st_mtime_ns for p in a] == before
    # different data does change the file
    save_chart(line_chart(M.with_columns(pl.col('median') * 2), x='size', y='median', color='path', ref=REF, title='t'), tmp_path/'a', 'x')
    assert a[0].read_bytes() != b[0].read_bytes()
    assert sorted(p.name for p in (tmp_path/'a').iterdir()) == ['x.png', 'x.svg']

def test_theme_applied_and_names_checked(tmp_path):
    spec = chart_spec(line_chart(M, x='size', y='median', color='path'))
    assert spec['config']['font'] == 'DejaVu Sans' and spec['config']['view']['continuousWidth'] == 280
    with pytest.raises(ConfigError): save_chart(line_chart(M, x='size', y='median'), tmp_path, '../escape')
