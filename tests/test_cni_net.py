"""researchkit.studies.cni_net: plan, claims and figures from the committed records (a fresh clone, no re-measuring)."""
import sys, pathlib, subprocess
import polars as pl
import pytest
from researchkit.results.store import ResultStore
from researchkit.studies import cni_net
from researchkit.studies.catalog import load_params
from researchkit.claims import evaluate
from _studies_fixtures import notebook_from_results

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMITTED = ROOT/'results'

def test_plan_covers_every_path_with_a_baseline():
    P = load_params('cni-net', 'quick')
    plan = cni_net.plan(P)
    bm = [p for p in plan['throughput'] if p['scenario'] == 'BMP2BMP']
    assert {p['datapath'] for p in bm} == {cni_net.BASELINE, *P['datapaths']}
    assert {p['placement'] for p in bm} == set(P['placements'])
    assert {(p['pods'], p['ranks_per_pod']) for p in plan['mpi']} == {(8, 2), (8, 4)}
    # the data path changes slowest, so one topology serves consecutive points
    changes = sum(a['datapath'] != b['datapath'] for a, b in zip(bm, bm[1:]))
    assert changes == len(P['placements']) * (len(P['datapaths']) + 1) - 1

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_committed_records_give_every_claim_a_verdict(tmp_path):
    df = ResultStore(COMMITTED).load('cni-net')
    assert set(df['experiment']) >= {'datapaths', 'throughput', 'latency', 'mpi'}
    table = evaluate(cni_net.claims(), df)
    assert table.height == 10 and set(table['status']) <= {'reproduced', 'refuted', 'not measurable'}
    nm = table.filter(pl.col('status') == 'not measurable')
    assert nm.height and all(r for r in nm['reason'])           # every "not measurable" says why
    assert table.filter(pl.col('status') != 'not measurable')['measured'].str.contains('IQR').all()  # numbers with spread
    paths = cni_net.figures(df, tmp_path)
    names = {p.stem for p in paths}
    assert {'fig10_same_host_throughput', 'fig11_different_host', 'fig16_mpi_alltoall', 'table3_mpi_alltoall'} <= names
    assert all(p.stat().st_size > 1000 for p in paths)
    # the paper's Table 3 appears only as the labelled reference layer
    svg = (tmp_path/'table3_mpi_alltoall.svg').read_text()
    assert 'paper (reference, other hardware)' in svg

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_study_notebook_figures_from_committed_records(tmp_path):
    "papermill with measure=False: the notebook reads the committed records and writes figures, measuring nothing."
    text = notebook_from_results('cni-net', tmp_path)
    assert (tmp_path/'figs'/'cni-net'/'fig16_mpi_alltoall.png').exists()
    assert ResultStore(COMMITTED).load('cni-net').height == pl.read_parquet(COMMITTED/'cni-net'/'records.parquet').height
    assert 'reproduced' in text and 'not measurable' in text
