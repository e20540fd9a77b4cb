import os, sys, json, subprocess, textwrap
import pytest, polars as pl
from researchkit.core import ConfigError
from researchkit.results.records import COLUMNS, point_key
from researchkit.results.store import ResultStore
from _results_fixtures import rows, PROV

ZSTD_MAGIC = b'\x28\xb5\x2f\xfd'

def test_append_load_roundtrip(tmp_path):
    st = ResultStore(tmp_path)
    assert st.load('cni').height == 0 and st.load('cni').columns == COLUMNS and st.studies() == []
    n = st.append(rows('cni', 'tput', [({'path': 'bridge', 'size': 64}, 0, 1.5), ({'path': 'vxlan', 'size': 1024}, 0, 2.5),
                                       ({'path': 'ipvlan', 'size': 64}, 0, None)]))
    assert n == 3 and st.studies() == ['cni']
    p = tmp_path/'cni'/'records.parquet'
    assert p.exists() and ZSTD_MAGIC in p.read_bytes()
    df = st.load('cni')
    assert df.columns == COLUMNS + ['path', 'size']
    assert df['path'].to_list() == ['bridge', 'vxlan', 'ipvlan'] and df['size'].dtype == pl.Int64
    assert df['value'].to_list() == [1.5, 2.5, None] and df['note'].to_list() == [None, None, 'no ipvlan']
    assert str(df['timestamp'].dtype) == 'Datetime(time_unit=\'us\', time_zone=\'UTC\')'
    # a fresh store on the same root reads the same thing
    assert ResultStore(tmp_path).load('cni').equals(df)

def test_point_columns_colliding_with_record_columns_are_prefixed(tmp_path):
    st = ResultStore(tmp_path)
    st.append(rows('s', 'e', [({'metric': 'x', 'value': 3, 'path': 'a'}, 0, 1.0)]))
    df = st.load('s')
    assert df['metric'].to_list() == ['gbps'] and df['p_metric'].to_list() == ['x'] and df['p_value'].to_list() == [3]

def test_mixed_point_types(tmp_path):
    st = ResultStore(tmp_path)
    st.append(rows('s', 'e', [({'a': 1}, 0, 1.0), ({'a': 2.5}, 0, 1.0), ({'b': 'x'}, 0, 1.0), ({'b': [1]}, 0, 1.0)]))
    df = st.load('s')
    assert df['a'].to_list() == [1.0, 2.5, None, None] and df['b'].to_list() == [None, None, 'x', '[1]']

def test_keys_and_done(tmp_path):
    st = ResultStore(tmp_path)
    st.append(rows('s', 'e', [({'path': 'a'}, 0, 1.0), ({'path': 'a'}, 1, 1.0), ({'path': 'b'}, 0, None)]))
    assert st.keys('s') == {('e', point_key('s', 'e', {'path': 'a'}), 0, 'local', 'rk0000'), ('e', point_key('s', 'e', {'path': 'a'}), 1, 'local', 'rk0000'),
                            ('e', point_key('s', 'e', {'path': 'b'}), 0, 'local', 'rk0000')}
    assert st.done('s', 'e', {'path': 'a'}, 1, 'local', 'rk0000') and st.done('s', 'e', {'path': 'b'}, 0, 'local', 'rk0000')
    assert not st.done('s', 'e', {'path': 'a'}, 2, 'local', 'rk0000') and not st.done('s', 'e', {'path': 'a'}, 0, 'other-testbed', 'rk0000')
    assert not st.done('s', 'f', {'path': 'a'}, 0, 'local', 'rk0000')
    # the cached keys follow appends
    st.append(rows('s', 'e', [({'path': 'a'}, 2, 1.0)]))
    assert st.done('s', 'e', {'path': 'a'}, 2, 'local', 'rk0000')

def test_rows_of_several_studies_go_to_their_files(tmp_path):
    st = ResultStore(tmp_path)
    st.append(rows('s1', 'e', [({'p': 1}, 0, 1.0)]) + rows('s2', 'e', [({'p': 1}, 0, 2.0), ({'p': 2}, 0, 3.0)]))
    assert st.load('s1').height == 1 and st.load('s2').height == 2

def test_bad_study_name(tmp_path):
    with pytest.raises(ConfigError): ResultStore(tmp_path).load('../etc')

def test_failed_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    st = ResultStore(tmp_path)
    st.append(rows('s', 'e', [({'p': 1}, 0, 1.0)]))
    p = tmp_path/'s'/'records.parquet'; before = p.read_bytes()
    def crash(src, dst): raise OSError('simulated crash between writing the temp file and renaming it')
    monkeypatch.setattr(os, 'replace', crash)
    with pytest.raises(OSError, match='simulated'): st.append(rows('s', 'e', [({'p': 2}, 0, 2.0)]))
    monkeypatch.undo()
    assert p.read_bytes() == before and sorted(x.name for x in p.parent.iterdir()) == ['records.parquet']
    assert ResultStore(tmp_path).load('s')['p'].to_list() == [1]
    st.append(rows('s', 'e', [({'p': 3}, 0, 3.0)]))
    assert ResultStore(tmp_path).load('s')['p'].to_list() == [1, 3]

def test_process_killed_mid_write(tmp_path):
    "A writer that dies after writing its temp file: the old file is whole, the stale temp file is ignored, then removed."
    st = ResultStore(tmp_path)
    st.append(rows('s', 'e', [({'p': 1}, 0, 1.0)]))
    before = (tmp_path/'s'/'records.parquet').read_bytes()
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from _results_fixtures import rows
        from researchkit.results.store import ResultStore
        os.replace = lambda a, b: os._exit(9)   # die hard: no cleanup, no finally
        ResultStore({str(tmp_path)!r}).append(rows('s', 'e', [({{'p': 2}}, 0, 2.0)]))
    """)
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 9, r.stderr
    left = sorted(x.name for x in (tmp_path/'s').iterdir())
    assert len(left) == 2 and left[0].startswith('.records.parquet.') and left[0].endswith('.tmp')
    assert (tmp_path/'s'/'records.parquet').read_bytes() == before
    assert ResultStore(tmp_path).load('s')['p'].to_list() == [1]
    st.append(rows('s', 'e', [({'p': 3}, 0, 3.0)]))
    assert sorted(x.name for x in (tmp_path/'s').iterdir()) == ['records.parquet']
    assert ResultStore(tmp_path).load('s')['p'].to_list() == [1, 3]

def test_concurrent_writers_lose_nothing(tmp_path):
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from _results_fixtures import rows
        from researchkit.results.store import ResultStore
        st = ResultStore({str(tmp_path)!r}); w = int(sys.argv[1])
        for i in range(25): st.append(rows('s', 'e', [({{'w': w, 'i': i}}, 0, float(i))]))
    """)
    ps = [subprocess.Popen([sys.executable, '-c', code, str(w)]) for w in range(3)]
    assert [p.wait(timeout=120) for p in ps] == [0, 0, 0]
    df = ResultStore(tmp_path).load('s')
    assert df.height == 75 and df.select('w', 'i').unique().height == 75

def test_forget(tmp_path):
    st = ResultStore(tmp_path)
    st.append(rows('s', 'e', [({'path': 'a'}, 0, 1.0), ({'path': 'b'}, 0, None)]))
    assert st.forget('s', pl.col('metric') == 'not_measurable') == 1
    assert st.load('s')['path'].to_list() == ['a'] and not st.done('s', 'e', {'path': 'b'}, 0, 'local', 'rk0000')
    assert st.forget('nothing-here', pl.col('metric') == 'x') == 0

def test_html_repr(tmp_path):
    st = ResultStore(tmp_path); st.append(rows('s', 'e', [({'p': 1}, 0, 1.0)]))
    assert '1 records' in st._repr_html_()

def test_a_reader_never_sees_a_file_being_replaced(tmp_path):
    "A study run appends while a notebook or a test loads: every load sees one whole file, old or new (CI: polars opened the path twice and read a page of the replacement with the old footer)."
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from _results_fixtures import rows
        from researchkit.results.store import ResultStore
        st = ResultStore({str(tmp_path)!r})
        for i in range(150): st.append(rows('s', 'e', [({{'i': i, 'pad': 'x' * (i * 37 % 500)}}, r, float(i)) for r in range(20)]))
    """)
    st = ResultStore(tmp_path); st.append(rows('s', 'e', [({'i': -1, 'pad': ''}, 0, 0.0)]))
    w = subprocess.Popen([sys.executable, '-c', code])
    seen = set()
    try:
        while w.poll() is None: seen.add(st.load('s').height)
    finally: w.kill(); w.wait()
    assert w.returncode == 0 and len(seen) > 5 and all((h - 1) % 20 == 0 for h in seen), sorted(seen)
