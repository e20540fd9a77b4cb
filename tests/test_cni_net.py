"""researchkit.studies.cni_net: plan, claims and figures from the committed records (a fresh clone, no re-measuring)."""
import sys, math, pathlib, subprocess
import polars as pl
import pytest
from researchkit.results.store import ResultStore
from researchkit.studies import cni_net
from researchkit.studies.catalog import load_params
from researchkit.claims import evaluate

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
    # MPI: one topology per (data path, placement), and a data path's placements back to back (claim 7b's pairs close in time)
    mpi = [p for p in plan['mpi'] if p['scenario'] == 'BMP2BMP']
    topo = [(p['datapath'], p['placement']) for p in mpi]
    assert sum(a != b for a, b in zip(topo, topo[1:])) == len(P['mpi']['datapaths']) * len(P['placements']) - 1
    pos = {(p['datapath'], p['placement'], p['ranks_per_pod']): i for i, p in enumerate(mpi)}
    for (dp, placement, r), i in pos.items():
        assert abs(i - pos[(dp, 'different-host' if placement == 'same-host' else 'same-host', r)]) == len(P['mpi']['ranks_per_pod'])

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_committed_records_give_every_claim_a_verdict(tmp_path):
    df = ResultStore(COMMITTED).campaign_records('cni-net')   # one campaign: the latest finished one
    assert set(df['experiment']) >= {'datapaths', 'throughput', 'latency', 'mpi', 'adaptive', 'campaign'}
    table = evaluate(cni_net.claims(), df)
    assert table.height == 10 and set(table['status']) <= {'reproduced', 'refuted', 'inconclusive', 'not measurable'}
    nm = table.filter(pl.col('status') == 'not measurable')
    assert nm.height and all(r for r in nm['reason'])           # every "not measurable" says why
    assert table.filter(pl.col('status') != 'not measurable')['measured'].str.contains(r'\d+(\.\d+)?% CI').all()  # numbers with their interval (95 %, or more after adaptive rounds)
    open_ = table.filter(pl.col('status') == 'inconclusive')    # every "inconclusive" says how far and what would decide it
    assert all('straddles' in r or 'no interval' in r or 'this claim rests a verdict on' in r for r in open_['reason'])
    # how many repetitions would decide it: a count, or (a spread no budget closes) the reason says more than the solver tries
    assert all(n is not None or 'more than 1000 repetitions would be needed' in r for n, r in zip(open_['needed'], open_['reason'])), open_.select('id', 'needed', 'reason').rows()
    paths = cni_net.figures(df, tmp_path)
    names = {p.stem for p in paths}
    assert {'fig10_same_host_throughput', 'fig11_different_host', 'fig16_mpi_alltoall', 'table3_mpi_alltoall'} <= names
    assert all(p.stat().st_size > 1000 for p in paths)
    # the paper's Table 3 appears only as the labelled reference layer
    svg = (tmp_path/'table3_mpi_alltoall.svg').read_text()
    assert 'paper (reference, other hardware)' in svg

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_the_store_reads_every_committed_record():
    """The store gives back every committed row. (The study notebook on the committed records, measure=False, is
    tests/test_study_notebooks.py: its stored outputs carry the claims table; the figures from them are the test above.)"""
    assert ResultStore(COMMITTED).load('cni-net').height == pl.read_parquet(COMMITTED/'cni-net'/'records.parquet').height

def _committed():
    return ResultStore(COMMITTED).campaign_records('cni-net')

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_committed_claim_ratio_is_the_geometric_mean_over_sizes_per_repetition():
    "Claim 1's number, recomputed by hand: per repetition the geometric mean over message sizes of ovs-vxlan/flannel medians."
    df = _committed()
    s = df.filter((pl.col('experiment') == 'throughput') & (pl.col('metric') == 'throughput_mbit') & pl.col('value').is_not_null()
                  & (pl.col('placement') == 'same-host') & (pl.col('proto') == 'tcp') & (pl.col('scenario') == 'BMP2BMP'))
    per = {}
    for (rep, size), g in s.group_by(['repetition', 'msg_bytes']):
        a = g.filter(pl.col('datapath') == 'ovs-vxlan')['value'].median(); b = g.filter(pl.col('datapath') == 'flannel-vxlan')['value'].median()
        if a and b: per.setdefault(rep, []).append(a / b)
    logs = [sum(map(math.log, v)) / len(v) for v in per.values()]      # per repetition, the log of the geometric mean
    n = len(logs); m = sum(logs) / n; sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    rounds = df.filter((pl.col('experiment') == 'adaptive') & (pl.col('metric') == 'points')).height
    level = 1 - 0.1 / 2 ** (1 + rounds)   # 95 %, then 97.5 %, 98.75 % after each adaptive round (the claims' look spending)
    t = {(3, 0.95): 4.303, (3, 0.975): 6.205, (4, 0.95): 3.182, (4, 0.975): 4.177, (5, 0.95): 2.776, (5, 0.975): 3.495,
         (6, 0.95): 2.571, (6, 0.975): 3.163, (7, 0.95): 2.447, (7, 0.975): 2.969, (8, 0.95): 2.365, (8, 0.975): 2.841,
         (3, 0.9875): 8.860, (4, 0.9875): 5.392, (5, 0.9875): 4.315, (6, 0.9875): 3.810, (7, 0.9875): 3.521, (8, 0.9875): 3.335,
         (3, 0.99375): 12.590, (4, 0.99375): 6.895, (5, 0.99375): 5.261, (6, 0.99375): 4.526, (7, 0.99375): 4.115, (8, 0.99375): 3.855,
         (3, 0.996875): 17.847, (4, 0.996875): 8.768, (5, 0.996875): 6.364, (6, 0.996875): 5.326, (7, 0.996875): 4.760, (8, 0.996875): 4.408,
         **{(n, lv): q for lv, qs in ((0.95, (2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)),
                                       (0.975, (2.752, 2.685, 2.634, 2.593, 2.560, 2.533, 2.510, 2.490)),
                                       (0.9875, (3.206, 3.111, 3.038, 2.981, 2.934, 2.896, 2.864, 2.837)),
                                       (0.99375, (3.677, 3.547, 3.448, 3.370, 3.308, 3.256, 3.214, 3.177)),
                                       (0.996875, (4.169, 3.997, 3.867, 3.765, 3.684, 3.618, 3.562, 3.515)))
            for n, q in zip(range(9, 17), qs)},   # n = 9-16: max_repetitions 16
         }[n, level]   # Student t, n - 1 df (the 99.38 and 99.69 % levels and n > 8 by Simpson's rule on the t density, 2026-11-29)
    est, lo, hi = math.exp(m), math.exp(m - t * sd / math.sqrt(n)), math.exp(m + t * sd / math.sqrt(n))
    # on this testbed the same-host overlays are one path (veth → Linux bridge → veth): claim 1 is not measurable, naming both
    row = evaluate(cni_net.claims(), df).filter(pl.col('id') == '1').row(0, named=True)
    assert row['status'] == 'not measurable' and 'ovs-vxlan' in row['reason'] and 'ovs-gre' in row['reason'] and 'same path' in row['reason'], row
    # where the runs recorded another build of OVS (a real OVS bridge), the arms differ and the number is the hand-computed one
    measured = evaluate(cni_net.claims(), _real_ovs(df)).filter(pl.col('id') == '1')['measured'][0]
    shown = f"{level * 100:.2f}".rstrip('0').rstrip('.')   # the level to two decimals: 95, 97.5, 98.75, 99.38, 99.69
    assert measured.startswith(f"TCP ovs-vxlan/flannel = {est:.2f} [{shown}% CI {lo:.2f}–{hi:.2f}, n={n}] vs ≥ 1.03; ovs-gre/flannel = "), measured

def _real_ovs(df):
    "The records as if OVS itself had been built for the OVS paths (another recorded variant: the same-host arms then differ)."
    ovs = (pl.col('experiment') == 'datapaths') & pl.col('datapath').is_in(['ovs-vxlan', 'ovs-gre'])
    return df.with_columns(pl.when(ovs).then(pl.lit('Open vSwitch bridge')).otherwise(pl.col('note')).alias('note'))

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_committed_records_without_a_path():
    "An optional second path the run lacks reads 'no data'; a missing required path makes the claim not measurable, with a reason."
    df = _real_ovs(_committed())   # claim 1's arms must differ for it to be measured at all (see above)
    t = {r['id']: r for r in evaluate(cni_net.claims(), df.filter(pl.col('datapath').is_null() | (pl.col('datapath') != 'ovs-gre'))).iter_rows(named=True)}
    assert t['1']['status'] in ('reproduced', 'refuted', 'inconclusive') and t['1']['measured'].endswith('; ovs-gre/flannel: no data'), t['1']
    t = {r['id']: r for r in evaluate(cni_net.claims(), _committed().filter(pl.col('datapath').is_null() | (pl.col('datapath') != 'ovs-gre'))).iter_rows(named=True)}
    assert t['1']['status'] == 'not measurable' and 'ovs-gre' not in t['1']['reason'], t['1']   # ovs-vxlan alone is flannel's path here
    t = {r['id']: r for r in evaluate(cni_net.claims(), df.filter(pl.col('datapath').is_null() | (pl.col('datapath') != 'ovs-vxlan'))).iter_rows(named=True)}
    assert t['1']['status'] == 'not measurable' and 'not run' in t['1']['reason'], t['1']
    # the MPI claim names each overlay's ratio by its own path when the other is missing
    t7 = {r['id']: r for r in evaluate(cni_net.claims(), df.filter(pl.col('datapath').is_null() | (pl.col('datapath') != 'flannel-vxlan'))).iter_rows(named=True)}['7a']
    assert 'flannel' not in t7['measured'] and 'overlay (ovs-vxlan)/ovs-vlan latency = ' in t7['measured'], t7

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_committed_vm_claims_and_notes():
    from researchkit.claims import not_measurable_reason
    df = _committed()
    t = {r['id']: r for r in evaluate(cni_net.claims(), df).iter_rows(named=True)}
    for cid, sc in (('5', 'BMP2VMP'), ('6', 'VMP2VMP')):   # the VM scenarios: not measurable, with the recorded reason
        assert t[cid]['status'] == 'not measurable' and t[cid]['reason'] == not_measurable_reason(df, scenario=sc) and 'VM node' in t[cid]['reason']
    lines = cni_net.notes(df)
    i = lines.index('### Data paths on this testbed')
    assert lines[i + 2:i + 4] == ['| data path | paper | built here | setup (ms, median) |', '|---|---|---|---|']
    rows = [l for l in lines[i + 4:] if l.startswith('| ')][:len(cni_net.DATAPATH_NAMES)]
    assert [l.split(' | ')[0][2:] for l in rows] == list(cni_net.DATAPATH_NAMES)   # in the study's order
    assert all(l.split(' | ')[-1].rstrip(' |').isdigit() for l in rows)            # setup time in whole ms
    j = lines.index('### MPI_Alltoall, 8 pods × 4 ranks, 16 KB (Table 3 layout)')
    assert lines[j + 2] == '| scenario | placement | data path | measured (ms, median) | n | paper (ms, other hardware) |'
    assert len(lines) - j - 4 == cni_net.mpi_table(df).height

@pytest.mark.skipif(not (COMMITTED/'cni-net'/'records.parquet').exists(), reason='no committed quick run')
def test_claim_7a_decides_on_different_hosts_and_shows_the_same_host_row():
    "Claim 7a's '≈ 10 %' is Table 3's different-host row: its verdict moves with the different-host latencies only; the same-host ratio is shown beside it."
    df = _committed()
    by_id = lambda d: {r['id']: r for r in evaluate(cni_net.claims(), d).iter_rows(named=True)}['7a']
    base = by_id(df)
    assert base['measured'].startswith('different-host: overlay (') and '; beside it, not deciding' in base['measured'] and 'same-host: overlay (' in base['measured']
    vlan = lambda placement: (pl.col('experiment') == 'mpi') & (pl.col('datapath') == 'ovs-vlan') & (pl.col('placement') == placement) & (pl.col('metric') == 'alltoall_avg_ms')
    scale = lambda placement, k: df.with_columns(pl.when(vlan(placement)).then(pl.col('value') * k).otherwise(pl.col('value')).alias('value'))
    assert by_id(scale('same-host', 3.0))['status'] == base['status']                     # the same-host row does not decide
    assert by_id(scale('different-host', 3.0))['status'] == 'refuted'                     # VLAN 3x slower across hosts: refuted
    assert by_id(scale('different-host', 1 / 3.0))['status'] == 'reproduced'              # 3x faster: reproduced
    claim = [c for c in cni_net.claims() if c.id == '7a'][0]
    assert [n['placement'] for n in claim.needs] == ['different-host']                    # adaptive rounds repeat only what decides it
