"""researchkit.cli: bad input fails before anything starts; a run killed midway leaves nothing and resumes."""
import json, os, re, time, signal, subprocess, pathlib
import polars as pl
import pytest
from _cli import cli
import _cli
from researchkit.cli import kernels_of
from researchkit.results.store import ResultStore
from researchkit.studies import cni_net as cn

ROOT = pathlib.Path(__file__).resolve().parent.parent

def _netns():
    out = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    return {l.split()[0] for l in out.splitlines()}

def _leftovers(run_id):
    ns = {n for n in _netns() if n.startswith(run_id)}
    links = subprocess.run(['ip', '-o', 'link'], capture_output=True, text=True).stdout
    procs = subprocess.run(['ps', '-eo', 'args='], capture_output=True, text=True).stdout
    return ns, [l for l in links.splitlines() if f': {run_id}' in l], [l for l in procs.splitlines() if run_id in l and 'pytest' not in l]


@pytest.mark.parametrize('args,field', [
    (['run', 'cni-net', '--profile', 'smoke', '--param', 'datapaths=[bridge, vlan]'], 'datapaths[1]'),
    (['run', 'cni-net', '--profile', 'smoke', '--param', 'repetitions=0'], 'repetitions'),
    (['run', 'cni-net', '--profile', 'nosuch'], 'profile'),
    (['run', 'cni-nett', '--profile', 'smoke'], 'study'),
    (['run', 'cni-net', '--profile', 'smoke', '--testbed', 'tests/data/bad-testbed.yaml'], 'nodes[0].kind'),
])
def test_bad_input_fails_before_anything_starts(args, field, tmp_path):
    _cli.assert_rejected(args, field, tmp_path)   # no namespace of this command's run ids, no results directory

def test_doctor_prints_capabilities():
    r = cli('doctor')
    assert r.returncode == 0, r.stderr
    for item in ('veth', 'vxlan', 'macvlan', 'ipvlan', 'kvm', 'iperf3'):
        assert item in r.stdout
    # last, whether this host measured each committed campaign (the report no longer compares the host that builds it)
    from researchkit.results.store import ResultStore
    committed = [s for s in ResultStore(_cli.ROOT/'results').studies() if ResultStore(_cli.ROOT/'results').campaign_records(s, profile='quick').height]
    tail = r.stdout.rstrip('\n').splitlines()
    assert tail[-1] == f"  {tail[-1].split('/')[0].strip()}/{len(committed)} committed campaigns measured on this host's facts", tail[-8:]
    assert all(any(l.split()[1:2] == [s] for l in tail) for s in committed), tail[-8:]

def _run_of(p) -> tuple[str|None, int|None]:
    """(run id, kernel pid) of the run the CLI `p` started: its Jupyter kernel (a descendant of `p`) and the RESEARCHKIT_RUN_ID the CLI
    gave it; (None, None) before the kernel is up. Never another test's run (another xdist worker runs studies at the same time)."""
    for k in kernels_of(p.pid):
        try: env = pathlib.Path(f'/proc/{k}/environ').read_bytes().split(b'\0')
        except OSError: continue
        rid = next((e.split(b'=', 1)[1].decode() for e in env if e.startswith(b'RESEARCHKIT_RUN_ID=')), None)
        if rid and re.fullmatch(r'rk[0-9a-f]{4}', rid): return rid, k
    return None, None

def _has_netns(run_id) -> bool:
    "The run has namespaces up."
    return any(n.startswith(f'{run_id}-') for n in _netns())

def _kernels_of_run(run_id):
    out = subprocess.run(['pgrep', '-f', 'ipykernel'], capture_output=True, text=True).stdout.split()
    found = []
    for k in out:
        try: env = pathlib.Path(f'/proc/{k}/environ').read_bytes()
        except OSError: continue
        if f'RESEARCHKIT_RUN_ID={run_id}'.encode() in env: found.append(int(k))
    return found

def _start(background, tmp_path):
    return background('run', 'cni-net', '--profile', 'smoke', '--results', str(tmp_path/'results'), '--figures', str(tmp_path/'figures'), '--no-progress')

def _tracked_changes():
    return subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], capture_output=True, text=True, cwd=ROOT).stdout

SMOKE_RESULTS = ROOT/'runs'/'smoke'/'results'

def _smoke_records(**eq):
    "This checkout's smoke records (runs/smoke/, where a smoke run with the default directories records) matching `eq`."
    if not (SMOKE_RESULTS/'cni-net'/'records.parquet').exists(): return None
    df = ResultStore(SMOKE_RESULTS).load('cni-net', expand=False)
    for k, v in eq.items(): df = df.filter(pl.col(k) == v)
    return df

def test_run_killed_midway_leaves_nothing_and_resumes_and_no_tracked_file_changes(background):
    """A smoke run with the default directories, Ctrl-C'd mid-sweep and run again: exit 130 and nothing of the run left; the
    rerun resumes the campaign without measuring a recorded point again; it records under runs/smoke/ and draws into
    runs/smoke/figures/, and never touches results/, figures/ or REPORT.md. (One smoke run carries both paths: a separate
    uninterrupted run measured the same points again, ~45 s.)"""
    tracked, report = _tracked_changes(), (ROOT/'figures'/'REPORT.md').read_bytes()
    p = background('run', 'cni-net', '--profile', 'smoke', '--new-campaign', '--no-progress')
    run_id, deadline = None, time.monotonic() + 240
    # wait until the run has recorded some measurements and has namespaces up
    while time.monotonic() < deadline:
        time.sleep(1)
        if run_id is None:
            rid, _ = _run_of(p)
            if rid and _has_netns(rid): run_id = rid
        r = _smoke_records(run_id=run_id) if run_id else None
        if r is not None and (r['experiment'] == 'throughput').sum() >= 3: break
        assert p.poll() is None, p.communicate()
    assert run_id, 'the run never created its namespaces'
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=180)
    assert p.returncode == 130, err[-2000:]
    assert _leftovers(run_id) == (set(), [], []), _leftovers(run_id)
    campaign = _smoke_records(run_id=run_id)['campaign'][0]
    first = _smoke_records(campaign=campaign)
    assert first.filter(pl.col('experiment') == 'throughput').height >= 3
    # resume: the same command (without --new-campaign) finishes the rest without measuring recorded points again
    p = background('run', 'cni-net', '--profile', 'smoke', '--no-progress')
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    final = _smoke_records(campaign=campaign)
    assert final.height > first.height and final['run_id'].n_unique() == 2   # the same campaign, two runs
    keys = ['experiment', 'point_key', 'repetition', 'metric', 'testbed']
    assert final.select(keys).unique().height == final.height, 'a recorded point was measured twice'
    old = first.filter(pl.col('experiment') == 'throughput').select(*keys, 'run_id')
    assert old.join(final.select(*keys, 'run_id'), on=keys).filter(pl.col('run_id') != pl.col('run_id_right')).is_empty()
    # a smoke run never changes tracked files: its records and figures are under runs/smoke/
    assert _tracked_changes() == tracked
    assert (ROOT/'figures'/'REPORT.md').read_bytes() == report
    assert set(final['profile']) == {'smoke'} and (final['experiment'] == 'campaign').any()
    figs = ROOT/'runs'/'smoke'/'figures'/'cni-net'
    assert figs.is_dir() and any(p.stat().st_mtime >= final['timestamp'].min().timestamp() for p in figs.glob('*.png'))

def test_crashed_kernel_is_reaped(tmp_path, background):
    "SIGKILL of the kernel (no finally, no atexit): the CLI replays the run's ledger."
    p = _start(background, tmp_path)
    deadline, kernel, run_id = time.monotonic() + 240, None, None
    while time.monotonic() < deadline:
        time.sleep(0.5)
        run_id, k = _run_of(p)   # this CLI's own kernel, once its run has namespaces up
        if run_id and _has_netns(run_id): kernel = k; break
        assert p.poll() is None, p.communicate()
    assert kernel, 'no kernel found'
    os.kill(kernel, signal.SIGKILL)
    out, err = p.communicate(timeout=180)
    assert p.returncode != 0
    assert _leftovers(run_id) == (set(), [], []), _leftovers(run_id)

def test_killed_cli_stops_its_run_and_cleanup_reaps_it(tmp_path, background):
    "SIGKILL of the CLI itself: papermill and the kernel go too, and `researchkit cleanup` removes what they left."
    p = _start(background, tmp_path)
    deadline, run_id = time.monotonic() + 240, None
    while time.monotonic() < deadline and not run_id:
        time.sleep(0.5)
        rid, _ = _run_of(p)   # this CLI's own kernel, once its run has namespaces up
        if rid and _has_netns(rid): run_id = rid
        assert p.poll() is None, p.communicate()
    assert run_id, 'the run never started'
    p.kill(); p.wait()
    deadline = time.monotonic() + 120
    while _kernels_of_run(run_id) and time.monotonic() < deadline: time.sleep(0.5)
    assert not _kernels_of_run(run_id), 'the kernel outlived its CLI'
    r = cli('cleanup')
    assert r.returncode == 0, r.stderr
    assert _leftovers(run_id) == (set(), [], []), _leftovers(run_id)

# ---- claims: the verdict rule on synthetic campaigns, through the command a researcher types ----------------------
def _synthetic_campaign(store, campaign, ratios, custom=None):
    "A cni-net campaign whose same-host TCP ovs-vxlan/flannel and ovs-gre/flannel ratios are `ratios` per repetition (`custom`: the parameters its run recorded as set otherwise than the profile)."
    from researchkit.results.records import records, campaign_complete, CAMPAIGN
    prov = {'run_id': campaign, 'campaign': campaign, 'profile': 'quick', 'testbed': 'local', 'package_version': '0', 'git_commit': 'x',
            'hostname': 'h', 'kernel': 'k', 'cores': 2, 'cpu_model': 'c', 'loadavg': 0.0, 'tool_versions': '{}'}
    rows = []
    for rep, r in enumerate(ratios):
        for dp, v in (('flannel-vxlan', 1000.0), ('ovs-vxlan', 1000.0 * r), ('ovs-gre', 1000.0 * r)):
            for size in (1024, 65536):
                pt = dict(scenario='BMP2BMP', placement='same-host', datapath=dp, proto='tcp', msg_bytes=size, seconds=1)
                rows += records('cni-net', 'throughput', pt, rep, {'throughput_mbit': (v, 'Mbit/s')}, prov)
    if custom:
        rows += [{**r, 'note': json.dumps(custom)} for r in records('cni-net', CAMPAIGN, {'run': campaign}, 0, {'custom_fields': (float(len(custom)), '')}, prov)]
    store.append(rows); store.append(campaign_complete('cni-net', prov))

@pytest.mark.parametrize('ratios,verdict', [
    ([1.10, 1.12, 1.09, 1.11, 1.10], 'reproduced'),   # the interval lies inside the band (>= 1.03)
    ([0.90, 0.93, 0.91, 0.92, 0.91], 'refuted'),      # ... wholly outside it
    ([0.97, 1.08, 1.01, 1.12, 1.00], 'inconclusive'), # ... straddles its edge
    ([0.90, 0.93, 0.91, 0.92], 'inconclusive'),       # ... outside it, but on fewer repetitions than a throughput claim rests on
])
def test_claims_command_decides_on_the_interval(ratios, verdict, tmp_path):
    import json
    _synthetic_campaign(ResultStore(tmp_path), 'rkSYN1', ratios)
    r = cli('claims', 'cni-net', '--results', str(tmp_path), '--campaign', 'rkSYN1', '--json')
    assert r.returncode == 0, r.stderr
    table = {c['id']: c for c in json.loads(r.stdout)}
    assert table['1']['verdict'] == verdict, table['1']
    assert table['1']['campaign'] == 'rkSYN1' and table['5']['verdict'] == 'not measurable'
    if verdict == 'inconclusive' and len(ratios) >= cn.TPUT_MIN_N: assert 'straddles 1.03' in table['1']['reason'] and table['1']['needed'] > len(ratios)
    if len(ratios) < cn.TPUT_MIN_N: assert 'outside the band, but on 4 repetitions' in table['1']['reason'] and table['1']['needed'] == cn.TPUT_MIN_N

def test_claims_command_reads_the_committed_campaign_and_names_a_missing_one(tmp_path):
    import json
    from researchkit.studies.catalog import get_study
    r = cli('claims', 'runtimes-web')
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('runtimes-web, campaign ') and '| id | claim | paper | verdict | measured |' in r.stdout
    r = cli('claims', 'cni-net', '--json')
    ids = [c['id'] for c in json.loads(r.stdout)]
    assert ids == [c.id for c in get_study('cni-net').claims()]
    assert all(c['verdict'] in ('reproduced', 'refuted', 'inconclusive', 'not measurable') for c in json.loads(r.stdout))
    r = cli('claims', 'cni-net', '--campaign', 'rkNOSUCH')
    assert r.returncode == 1 and 'rkNOSUCH' in r.stderr, r.stderr

def test_prepare_builds_what_the_studies_name_and_says_why_not(tmp_path):
    "`researchkit prepare` (what `make setup` runs beside the Go builds): the web image for the studies that name it, 'nothing' for the others; an unknown study is bad input; a build that cannot run fails naming the study and the reason."
    r = cli('prepare', 'runtimes-web', 'cni-net')
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith('runtimes-web: rootfs apache2 libapache2-mod-php: '))
    image = pathlib.Path(line.split(': ')[2].split(' (')[0])
    assert (image/'usr/sbin/apache2').exists() and (image/'usr/lib/apache2/modules/libphp8.2.so').exists()
    assert 'cni-net: nothing to prepare' in r.stdout
    r = cli('prepare', 'no-such-study')
    assert r.returncode == 2 and "study: 'no-such-study'" in r.stderr, r.stderr
    # an empty image cache and no debootstrap on PATH: nothing can be built, and the command says so
    env = {**os.environ, 'RESEARCHKIT_ROOTFS': str(tmp_path/'rootfs'), 'PATH': '/usr/local/bin:/usr/bin:/bin'}
    r = cli('prepare', 'lsm-bpf', env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert 'lsm-bpf: not prepared:' in r.stderr and 'debootstrap is not installed' in r.stderr, r.stderr
    assert not any((tmp_path/'rootfs').glob('bookworm-*')), list((tmp_path/'rootfs').iterdir())

def test_prepare_stopped_mid_build_leaves_nothing(tmp_path):
    "tools/bootstrap stops `researchkit prepare` with SIGTERM when a Go build fails: the debootstrap it started is killed and its half-made image, /proc mount included, removed."
    import glob
    root = tmp_path/'rootfs'
    env = {**os.environ, 'RESEARCHKIT_ROOTFS': str(root)}   # an empty image cache: a real build starts
    p = subprocess.Popen([*_cli.CLI, 'prepare', 'runtimes-web'], cwd=_cli.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t_end = time.monotonic() + 120
        while not glob.glob(str(root/'.build-*/debootstrap')) and time.monotonic() < t_end and p.poll() is None: time.sleep(0.2)
        assert glob.glob(str(root/'.build-*/debootstrap')), (p.poll(), p.stderr.read() if p.poll() is not None else '')   # debootstrap is at work
        time.sleep(2)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None: p.kill(); p.communicate()
    assert p.returncode == 130, (out, err)
    assert 'runtimes-web: stopped while preparing' in err, err
    assert not list(root.iterdir()) or [x.name for x in root.iterdir()] == ['.lock'], list(root.iterdir())
    assert str(root) not in open('/proc/self/mountinfo').read()
    ps = subprocess.run(['ps', '-eo', 'args='], capture_output=True, text=True).stdout
    assert str(root) not in ps, [l for l in ps.splitlines() if str(root) in l]

def test_claims_fail_on_gates_on_the_verdicts(tmp_path):
    "`--fail-on`: exit 3 (table printed, the claims named on stderr) when a verdict is one it names, 0 when none is; a bad verdict name is bad input, before anything is read."
    _synthetic_campaign(ResultStore(tmp_path), 'rkSYN2', [0.90, 0.93, 0.91, 0.92, 0.91])   # claim 1 refuted
    r = cli('claims', 'cni-net', '--results', str(tmp_path), '--fail-on', 'refuted,inconclusive')
    assert r.returncode == 3 and '| 1 |' in r.stdout and 'claim(s) 1 (refuted)' in r.stderr, (r.returncode, r.stderr)
    r = cli('claims', 'cni-net', '--results', str(tmp_path), '--fail-on', 'reproduced', '--json')
    assert r.returncode == 0, r.stderr
    assert not any(c['verdict'] == 'reproduced' for c in __import__('json').loads(r.stdout))
    r = cli('claims', 'cni-net', '--results', str(tmp_path/'none'), '--fail-on', 'refuted,maybe')
    assert r.returncode == 2 and '--fail-on' in r.stderr and 'maybe' in r.stderr, r.stderr   # (no records there: never read)

def test_claims_names_the_parameters_a_custom_run_changed(tmp_path):
    _synthetic_campaign(ResultStore(tmp_path), 'rkSYN3', [1.10, 1.12, 1.09, 1.11, 1.10], custom={'repetitions': 5, 'placements': ['same-host']})
    r = cli('claims', 'cni-net', '--results', str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith('cni-net, campaign rkSYN3 (custom parameters: placements=["same-host"]; repetitions=5):\n'), r.stdout[:300]

def test_export_writes_a_campaigns_records_elsewhere(tmp_path):
    "`researchkit export`: the campaign's every record and column, as CSV or JSON lines on stdout, or Parquet in a file; a missing campaign says so; Parquet without a file is bad input."
    import io
    _synthetic_campaign(ResultStore(tmp_path/'r'), 'rkSYN4', [1.10, 1.12, 1.09])
    want = ResultStore(tmp_path/'r').campaign_records('cni-net', 'rkSYN4')
    r = cli('export', 'cni-net', '--results', str(tmp_path/'r'), '--campaign', 'rkSYN4')
    assert r.returncode == 0, r.stderr
    csv = pl.read_csv(io.StringIO(r.stdout))
    assert csv.height == want.height and set(csv.columns) == set(want.columns) and sorted(csv['value'].to_list()) == sorted(want['value'].to_list())
    r = cli('export', 'cni-net', '--results', str(tmp_path/'r'), '--format', 'jsonl')   # the latest finished quick campaign: rkSYN4
    assert r.returncode == 0 and [json.loads(l)['campaign'] for l in r.stdout.splitlines()] == ['rkSYN4'] * want.height, r.stderr
    r = cli('export', 'cni-net', '--results', str(tmp_path/'r'), '--format', 'parquet', '--out', str(tmp_path/'x.parquet'))
    assert r.returncode == 0 and r.stdout == '' and pl.read_parquet(tmp_path/'x.parquet').height == want.height, r.stderr
    r = cli('export', 'cni-net', '--results', str(tmp_path/'r'), '--format', 'parquet')
    assert r.returncode == 2 and '--out' in r.stderr, r.stderr
    r = cli('export', 'cni-net', '--results', str(tmp_path/'r'), '--campaign', 'rkNOSUCH')
    assert r.returncode == 1 and 'rkNOSUCH' in r.stderr, r.stderr

@pytest.mark.parametrize('args,field', [
    (['plan', 'hlf-ec', '--param', 'repetitions=0'], 'repetitions'),
    (['plan', 'cni-nett'], 'study'),
    (['plan', 'cni-net', '--profile', 'nosuch'], 'profile'),
    (['plan', 'cni-net', '--testbed', 'tests/data/bad-testbed.yaml'], 'nodes[0].kind'),
])
def test_plan_refuses_bad_input_naming_the_field(args, field, tmp_path):
    _cli.assert_rejected(args, field, tmp_path)

def test_plan_reads_the_records_and_starts_nothing():
    "`researchkit plan`: each experiment's points, the adaptive allowance, the wall time of the recorded campaigns of the profile (or the latest scaled by the planned point-repetitions), what the testbed could not measure; no tracked file, namespace or process changes."
    before_git, before_ns = _tracked_changes(), _cli.netns_names()
    r = cli('plan', 'lsm-bpf')
    assert r.returncode == 0, r.stderr
    got = r.stdout
    for want in ('lsm-bpf, profile quick, testbed local (local): nothing is started', 'percall', 'fio', 'wrk',
                 'up to 8 repetitions while the campaign is under 4.5 min', 'recorded quick campaign(s) on this testbed', 'claim lsm: '):
        assert want in got, (want, got)
    n = {e: (int(c), int(m)) for e, c, m in re.findall(r'^  (\w+)\s+(\d+) points? +(\d+) measurements?$', got, re.M)}
    from researchkit.studies.catalog import get_study, load_params
    s, P = get_study('lsm-bpf'), load_params('lsm-bpf', 'quick')
    # every point of the plan, measured `repetitions` times but the figure-only ones (fio's and wrk's hook-heavy variants) once
    once = {e: sum(1 for p in pts if p.get('variant') in ('open', 'close')) for e, pts in s.plan(P).items()}
    assert n == {e: (len(p), P['repetitions'] * (len(p) - once[e]) + once[e]) for e, p in s.plan(P).items()} and once['fio'], n
    r = cli('plan', 'hlf-ec', '--param', 'repetitions=6')   # a custom run: the quick campaigns scaled, 6 / 4 repetitions
    assert r.returncode == 0 and 'profile quick+custom' in r.stdout and '54 point-repetitions × ' in r.stdout, r.stdout   # 9 points x 6
    for study in ('cni-net', 'runtimes-web', 'lsm-bpf', 'hlf-kata', 'hlf-ec'):   # every full profile validates and plans
        r = cli('plan', study, '--profile', 'full')
        assert r.returncode == 0 and 'profile full' in r.stdout and re.search(r'estimated wall time: ~\d+\.\d min', r.stdout), (study, r.stdout, r.stderr)
        # the paper's scale pins Fabric to CPUs this host may not have: the plan says a run would be refused, naming the field
        pinned = {'hlf-kata': ('fabric_cpus', 9), 'hlf-ec': ('peer_cpus', 8)}.get(study)   # (field, the CPUs it needs online)
        refused = re.search(r'^a run here would be refused before anything starts: (\w+): ', r.stdout, re.M)
        assert (refused.group(1) if refused else None) == (pinned[0] if pinned and len(os.sched_getaffinity(0)) < pinned[1] else None), (study, r.stdout)
    assert _tracked_changes() == before_git and not _cli.new_netns(before_ns, _cli.run_ids())


def _costed_campaign(store, campaign, wall_s, reps, P=None):
    "A complete cni-net quick campaign on testbed local of `reps` repetitions of two 1-s throughput points, `wall_s` of measuring, and (`P`) the parameters its run recorded."
    from researchkit.results.records import records, campaign_complete, CAMPAIGN
    prov = {'run_id': campaign, 'campaign': campaign, 'profile': 'quick', 'testbed': 'local', 'package_version': '0', 'git_commit': 'x',
            'hostname': 'h', 'kernel': 'k', 'cores': 2, 'cpu_model': 'c', 'loadavg': 0.0, 'tool_versions': '{}'}
    rows = [r for rep in range(reps) for dp in ('flannel-vxlan', 'ovs-vxlan')
            for r in records('cni-net', 'throughput', dict(scenario='BMP2BMP', placement='same-host', datapath=dp, proto='tcp', msg_bytes=1024, seconds=1),
                             rep, {'throughput_mbit': (1000.0, 'Mbit/s')}, prov)]
    extra = {} if P is None else {'params': (float(len(P)), '')}
    for r in records('cni-net', CAMPAIGN, {'run': campaign}, 0, {'wall_s': (wall_s, 's'), **extra}, prov):
        rows.append({**r, 'note': json.dumps(P, sort_keys=True)} if r['metric'] == 'params' else r)
    store.append(rows); store.append(campaign_complete('cni-net', prov))

def test_plan_estimates_from_campaigns_run_with_the_same_parameters(tmp_path):
    """`plan`'s wall time: the median of the recorded campaigns that ran with exactly the parameters asked for; otherwise the latest
    campaign of the profile scaled by what it measured (its records, not today's profile file). Campaigns recorded before runs kept
    their parameters never count as run with them."""
    from researchkit.studies.catalog import get_study
    from researchkit.studies.campaign import resolve_params
    from researchkit.studies.planning import planned_load
    P, _ = resolve_params(get_study('cni-net'), 'quick', None)
    st = ResultStore(tmp_path)
    _costed_campaign(st, 'rkOLD1', 100.0, 3)             # parameters not recorded
    _costed_campaign(st, 'rkSAME', 300.0, 3, P)          # the quick profile as it is now
    _costed_campaign(st, 'rkLAST', 200.0, 4, {**P, 'repetitions': 4})   # the latest, with other parameters
    r = cli('plan', 'cni-net', '--results', str(tmp_path))
    assert r.returncode == 0 and 'estimated wall time: 5.0 min (median of 1 recorded quick campaign(s) on this testbed with these parameters' in r.stdout, r.stdout
    r = cli('plan', 'cni-net', '--results', str(tmp_path), '--param', 'repetitions=6')
    n, load = planned_load(get_study('cni-net'), {**P, 'repetitions': 6})
    per = (200.0 - 8 * 1.0) / 8   # rkLAST: 8 point-repetitions of 1 s each
    want = f"estimated wall time: ~{(per * n + load) / 60:.1f} min ({n} point-repetitions × {per:.1f} s each besides their load, as campaign rkLAST (quick, 3.3 min for 8; its parameters differ)"
    assert r.returncode == 0 and want in r.stdout, (want, r.stdout)


@pytest.mark.parametrize('profile', ['smoke', 'quick', 'full'])
def test_the_kernel_trusts_exactly_the_parameters_the_cli_resolved(profile):
    "Resolved once per run: what `researchkit run` validates reaches the kernel through papermill (YAML, then Python literals) and its token still matches, so the kernel neither validates nor preflights again; one changed value and the token no longer matches."
    import yaml
    from papermill.translators import PythonTranslator
    from researchkit.studies.catalog import STUDIES, get_study
    from researchkit.studies.campaign import resolve_params, resolved_token, trusted
    for name in STUDIES:
        s = get_study(name)
        P, recorded = resolve_params(s, profile)
        ns = {}; exec(PythonTranslator.codify(yaml.safe_load(yaml.safe_dump(P))), ns)   # what the notebook's injected cell sets
        given = {k: ns.get(k) for k in s.schema}
        token = resolved_token(name, profile, 'local', P, recorded)
        assert trusted(name, profile, 'local', given, token) == recorded, name
        assert trusted(name, profile, 'local', {**given, 'repetitions': given['repetitions'] + 1}, token) is None, name
