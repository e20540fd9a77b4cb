import types, pathlib, json
import pytest, polars as pl
from researchkit.core import ConfigError
from researchkit.results.store import ResultStore
from researchkit.claims import Claim, verdict, ratio, summarize
from researchkit.figures import line_chart, save_chart
from researchkit.report import build_report as _build_report
from researchkit.core import Field
from researchkit.studies.contract import Study
from _results_fixtures import rows, PROV

def build_report(**kw):
    "The report of the fixtures' campaigns (recorded with profile smoke)."
    return _build_report(profile=PROV['profile'], **kw)

def _study(name, title, claims, figures=lambda df, outdir: []):
    return Study(name=name, title=title, seed='none', schema={'repetitions': Field(int)}, plan=lambda P: {},
                 apparatus=lambda run, P: None, method=lambda run, app, e, P: None, claims=claims, figures=figures)

def _fake_study(name='cni-demo', *, figures=True, broken=False):
    "A tiny study object (fixture): two claims over throughput records, one figure."
    def claims():
        def c1(d):
            r = ratio(d, 'gbps', ['size'], {'path': 'vxlan'}, {'path': 'bridge'})
            return verdict(r.median < 1, r.text('vxlan/bridge'))
        def c2(d):
            r = ratio(d, 'gbps', ['size'], {'path': 'ipvlan'}, {'path': 'bridge'})
            return verdict(r.median < 1, r.text('ipvlan/bridge'))
        cs = [Claim('C1', 'vxlan is slower than bridge', 'ovs-vxlan ≈ 10 % below', c1), Claim('C2', 'ipvlan is slowest', 'ipvlan last', c2)]
        if broken: cs.append(Claim('C3', 'bug', 'x', lambda d: d['no_such_column']))
        return cs
    def figs(df, outdir):
        s = summarize(df, ['path', 'size'], 'gbps')
        ref = pl.DataFrame({'size': [64], 'median': [5.0], 'path': ['bridge']})
        return save_chart(line_chart(s, x='size', y='median', color='path', log_x=True, y_err=('q1', 'q3'), ref=ref, title='tput'), outdir, 'tput')
    return _study(name, 'Container networking (demo)', claims, figs if figures else (lambda df, outdir: []))

def _fill(root, study='cni-demo'):
    st = ResultStore(root)
    for rep in range(3):
        for size in (64, 1024):
            st.append(rows(study, 'tput', [({'path': 'bridge', 'size': size}, rep, 10.0 + rep),
                                           ({'path': 'vxlan', 'size': size}, rep, 9.0 + rep),
                                           ({'path': 'ipvlan', 'size': size}, rep, None)],
                           prov={**PROV, 'loadavg': 0.5 + rep}))

def test_report(tmp_path):
    _fill(tmp_path/'results')
    later = _study('hlf-kata', 'Fabric on Kata', lambda: [])
    out = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(), later])
    assert out == tmp_path/'figures'/'REPORT.md'
    text = out.read_text()
    # the claims table, with verdicts and the measured numbers / reasons
    # (per-repetition ratios 9/10, 10/11, 11/12, each at two sizes: median 0.909, IQR 0.902–0.915)
    assert '| id | claim | paper | verdict | measured |' in text
    from researchkit.results.store import ResultStore
    r = ratio(ResultStore(tmp_path/'results').load('cni-demo'), 'gbps', ['size'], {'path': 'vxlan'}, {'path': 'bridge'})
    assert f"| C1 | vxlan is slower than bridge | ovs-vxlan ≈ 10 % below | ✅ reproduced | {r.text('vxlan/bridge')} |" in text
    assert r.text() == '0.91 [95% CI 0.90–0.92, n=6]'
    assert '| C2 | ipvlan is slowest | ipvlan last | ⚪ not measurable | not measurable on this testbed: no ipvlan |' in text
    # figures regenerated from the records, linked relative to the report
    assert '![tput](cni-demo/tput.png)' in text and '[tput.svg](cni-demo/tput.svg)' in text
    assert (tmp_path/'figures'/'cni-demo'/'tput.png').read_bytes()[:4] == b'\x89PNG'
    # capability notes: one line per (experiment, reason), naming the points it covers, not one per repetition
    assert text.count('- `tput` 2 points (path=ipvlan, size ∈ {64, 1024}): no ipvlan') == 1 and text.count('no ipvlan') == 2
    # provenance summary
    assert 'testbed: local' in text and 'kernel: 6.18; cores: 2; CPU: cpu' in text and '0.1.0 @ cccccccccccc' in text
    assert 'iperf3 3.12' in text and 'records: 18 (12 values, 6 not measurable)' in text and '0.50–2.50' in text
    # the summary table and the studies not yet run
    assert '- Fabric on Kata (`hlf-kata`): not yet run' in text
    assert ('| study | records | reproduced | refuted | inconclusive | not measurable | same verdict as the other campaign |\n|---|---|---|---|---|---|---|\n'
            '| [Container networking (demo)](#container-networking-demo-cni-demo) | 18 | 1 | 0 | 0 | 1 | — |\n'
            '| Fabric on Kata | not yet run | | | | | |\n') in text
    assert '- wall time: not recorded' in text and '### Repetitions' in text

def test_summary_table_escapes_a_title(tmp_path):
    odd = _study('odd', 'runc | runsc', lambda: [])
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[odd]).read_text()
    assert '| runc \\| runsc | not yet run | | | |' in text

def test_report_is_stable(tmp_path):
    _fill(tmp_path/'results')
    kw = dict(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study()])
    out = build_report(**kw); first, mtimes = out.read_text(), {p: p.stat().st_mtime_ns for p in (tmp_path/'figures').rglob('*.*')}
    build_report(**kw)
    assert out.read_text() == first and {p: p.stat().st_mtime_ns for p in (tmp_path/'figures').rglob('*.*')} == mtimes

def test_study_without_figures(tmp_path):
    _fill(tmp_path/'results')
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(figures=False)]).read_text()
    assert '### Figures\n\n_No figures._' in text

def test_only_the_named_profile_is_reported(tmp_path):
    _fill(tmp_path/'results')   # a smoke campaign: the reproduction report (profile quick) does not describe it
    text = _build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study()]).read_text()
    assert 'not yet run' in text and '### Claims' not in text

def test_nothing_run_yet(tmp_path):
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study()]).read_text()
    assert 'not yet run' in text and '### Claims' not in text

def test_a_broken_check_fails_the_report(tmp_path):
    _fill(tmp_path/'results')
    with pytest.raises(pl.exceptions.ColumnNotFoundError):
        build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(broken=True)])
    with pytest.raises(ConfigError):
        build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[types.SimpleNamespace(name='x')])

def test_report_sets_each_verdict_beside_the_other_campaigns_and_states_wall_time(tmp_path):
    from researchkit.results.records import records, campaign_complete, CAMPAIGN
    st = ResultStore(tmp_path/'results')
    for camp, vx, wall in (('rkA', 9.0, 300.0), ('rkB', 11.0, 390.0)):   # rkB: vxlan beats bridge, the claim flips
        prov = {**PROV, 'campaign': camp, 'run_id': camp}
        for rep in range(3):
            st.append(rows('cni-demo', 'tput', [({'path': 'bridge', 'size': 64}, rep, 10.0 + rep), ({'path': 'vxlan', 'size': 64}, rep, vx + rep)], prov=prov))
        st.append(records('cni-demo', CAMPAIGN, {}, 0, {'wall_s': (wall, 's'), 'setup_s': (30.0, 's')}, prov))
        st.append(campaign_complete('cni-demo', prov))
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(figures=False)]).read_text()
    assert 'Campaign `rkB`' in text and '| other campaign' not in text
    head = '| id | claim | paper | verdict | measured | campaign rkA |'
    assert head in text, text
    c1 = next(l for l in text.splitlines() if l.startswith('| C1 |'))
    assert '❌ refuted |' in c1 and c1.endswith('| ✅ reproduced ≠ |'), c1     # this campaign refutes, the other reproduced: shown, never hidden
    assert '| 0 | 1 | 0 | 1 | 1/2 |' in text                                 # summary: one of two verdicts the same
    assert '- wall time: 6.5 min (plus 0.5 min of setup before the first measurement)' in text
    assert 'Other campaign `rkA`: wall time: 5.0 min' in text

def test_report_quotes_the_profile_header_of_the_params_file():
    from researchkit.report import profile_notes
    from researchkit.studies.catalog import get_study
    for name in ('cni-net', 'runtimes-web'):
        lines = profile_notes(get_study(name), 'quick')
        assert lines[0] == '### The quick profile' and f"`params/{name}/quick.yaml`" in lines[2]
        assert any('relative to the paper' in l for l in lines), lines   # each quick profile says what it changes and why
    assert profile_notes(get_study('cni-net'), 'nosuch') == []


HOST = {'kernel_build': '#1 SMP PREEMPT_DYNAMIC @0', 'cpu_signature': 'family 26 model 2 stepping 1', 'microcode': '0x1000065',
        'mitigations': '{"meltdown": "Not affected", "spectre_v2": "Mitigation: Retpolines"}', 'virtualization': 'kvm'}

def _two_campaigns(root, second:dict, *, resumed:dict|None=None):
    "Campaign rkA on the fixtures' host, then rkB on `second` (and, if `resumed`, its second run rkB2 on that host); both complete."
    from researchkit.results.records import records, campaign_complete
    st = ResultStore(root)
    for camp, parts in (('rkA', [('rkA', {})]), ('rkB', [('rkB', second)] + ([('rkB2', resumed)] if resumed else []))):
        for rep in range(4):
            run, extra = parts[rep % len(parts)]
            prov = {**PROV, **HOST, 'kernel': '6.18.44-fc-v595', **extra, 'campaign': camp, 'run_id': run}
            st.append(rows('cni-demo', 'tput', [({'path': 'bridge', 'size': 64}, rep, 10.0 + rep), ({'path': 'vxlan', 'size': 64}, rep, 9.0 + rep)], prov=prov))
        st.append(campaign_complete('cni-demo', prov))

def test_report_names_the_host_fact_that_differs_between_the_campaigns(tmp_path):
    "Two campaigns on different kernel builds: the report names the fact, old → new, at the top of the study and in the summary."
    _two_campaigns(tmp_path/'results', {'kernel': '6.18.44-fc-v657'})
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(figures=False)]).read_text()
    assert '- campaign `rkA` (verdicts set beside this one\'s) → campaign `rkB`: kernel: 6.18.44-fc-v595 → 6.18.44-fc-v657' in text, text
    assert '**⚠ Measured on different hosts**' in text and '⚠ Different hosts (kernel, CPU, microcode or mitigations) are flagged in: [Container networking (demo)]' in text
    assert 'the host building this report' not in text   # the report compares the hosts in its records, never the one rebuilding it
    assert '- kernel build: #1 SMP PREEMPT_DYNAMIC @0; CPU signature: family 26 model 2 stepping 1; microcode: 0x1000065; virtualization: kvm' in text
    assert '- CPU mitigations: 1 not affected | spectre_v2: Mitigation: Retpolines' in text
    assert '- host check: the differences are listed at the top of this section. Compared: campaign `rkA` → `rkB`\n' in text

def test_report_flags_a_resumed_campaign_and_a_rebuild_on_another_host(tmp_path):
    _two_campaigns(tmp_path/'results', {}, resumed={'microcode': '0x1000066', 'mitigations': '{"meltdown": "Not affected", "spectre_v2": "Mitigation: Enhanced IBRS"}'})
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(figures=False)]).read_text()
    assert ('- campaign `rkB` was resumed on another host — run `rkB` → run `rkB2`: microcode: 0x1000065 → 0x1000066; '
            'mitigations.spectre_v2: Mitigation: Retpolines → Mitigation: Enhanced IBRS') in text, text
    assert 'the host building this report' not in text
    assert 'campaign `rkA` (verdicts' not in text   # rkA and rkB's first run: the same host

def test_same_host_everywhere_says_so(tmp_path):
    _two_campaigns(tmp_path/'results', {})
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(figures=False)]).read_text()
    assert '⚠' not in text
    assert ('- host check: the same kernel, kernel build, CPU, microcode, cores, mitigations and virtualization. '
            'Compared: campaign `rkA` → `rkB`\n') in text

def test_old_records_without_the_host_columns_still_report(tmp_path):
    "A records file written before the host facts existed: it loads, its claims are computed, the report says what it could not compare."
    from researchkit.results.records import HOST_COLUMNS
    _fill(tmp_path/'new')
    p = tmp_path/'results'/'cni-demo'/'records.parquet'; p.parent.mkdir(parents=True)
    pl.read_parquet(tmp_path/'new'/'cni-demo'/'records.parquet').drop(HOST_COLUMNS).write_parquet(p)
    assert not set(HOST_COLUMNS) & set(pl.read_parquet(p).columns)
    import os
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_fake_study(figures=False)]).read_text()
    assert '| C1 | vxlan is slower than bridge | ovs-vxlan ≈ 10 % below | ✅ reproduced |' in text
    assert '- kernel build, CPU signature, microcode, mitigations, virtualization: not recorded (measured before the records held them)' in text
    # one campaign, one run: no two hosts in the records, nothing compared (this machine's kernel is not the fixtures' '6.18', and
    # the report does not read it: the same records give the same text on any host)
    assert '⚠' not in text and '- host check' not in text and os.uname().release not in text, text

def test_report_lists_the_quantities_whose_intervals_two_campaigns_keep_apart(tmp_path):
    "A ratio whose 95 % intervals in the two campaigns do not overlap is listed under 'Between campaigns'; one that agrees is not."
    from researchkit.results.records import campaign_complete
    from researchkit.claims import at_least
    st = ResultStore(tmp_path/'results')
    for camp, vx in (('rkA', 0.5), ('rkB', 1.5)):   # vxlan/bridge: ~0.5 in rkA, ~1.5 in rkB, each tight; ipvlan/bridge ~1 in both
        prov = {**PROV, 'campaign': camp, 'run_id': camp}
        for rep in range(4):
            st.append(rows('cni-demo', 'tput', [({'path': 'bridge', 'size': 64}, rep, 10.0 + rep), ({'path': 'vxlan', 'size': 64}, rep, (10.0 + rep) * vx * (1 + 0.01 * rep)),
                                                 ({'path': 'ipvlan', 'size': 64}, rep, (10.0 + rep) * (1 + 0.05 * (-1) ** rep))], prov=prov))
        st.append(campaign_complete('cni-demo', prov))
    def claims():
        return [Claim(c, c, 'p', lambda d, p=p: ratio(d, 'gbps', ['size'], {'path': p}, {'path': 'bridge'}).decide(at_least(1.0), f"{p}/bridge"))
                for c, p in (('C1', 'vxlan'), ('C2', 'ipvlan'))]
    text = build_report(results_root=tmp_path/'results', figures_root=tmp_path/'figures', studies=[_study('cni-demo', 'Demo', claims)]).read_text()
    section = text.split('### Between campaigns')[1].split('###')[0]
    assert '- vxlan/bridge: 1.5' in section and 'in `rkA`' in section and 'ipvlan/bridge' not in section, section

def test_the_committed_report_is_what_the_committed_records_give(tmp_path):
    """`researchkit report` on the committed records, into another directory: REPORT.md byte for byte the committed one, and the
    same figure files. The report reads nothing but the records and the study code (no clock, no facts of the host building it),
    so a reader who rebuilds it anywhere gets the text the repository holds."""
    from researchkit.studies.catalog import study_names, get_study
    root = pathlib.Path(__file__).resolve().parent.parent
    out = _build_report(results_root=root/'results', figures_root=tmp_path, studies=[get_study(s) for s in study_names()])
    assert out.read_text() == (root/'figures'/'REPORT.md').read_text()
    made = {p.relative_to(tmp_path) for p in tmp_path.rglob('*') if p.is_file()}
    committed = {p.relative_to(root/'figures') for p in (root/'figures').rglob('*') if p.is_file()}
    assert made == committed, (made ^ committed)
