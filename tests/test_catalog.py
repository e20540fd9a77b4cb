"""researchkit.studies.catalog: every shipped parameter file validates; bad ones fail naming the field."""
import pytest, yaml
from researchkit.core import ConfigError
from researchkit.studies.catalog import load_params, study_names, params_path, get_study, PROFILES

@pytest.mark.parametrize('study', study_names())
@pytest.mark.parametrize('profile', PROFILES)
def test_shipped_profiles_validate(study, profile):
    P = load_params(study, profile)
    assert P['repetitions'] >= 1

def _bad(tmp_path, study, change):
    data = yaml.safe_load(params_path(study, 'smoke').read_text())
    change(data)
    p = tmp_path/'bad.yaml'; p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e: load_params(study, path=p)
    return e.value

def test_bad_cni_net_params_name_the_field(tmp_path):
    e = _bad(tmp_path, 'cni-net', lambda d: d.update(datapaths=['bridge', 'vlan-ovs']))
    assert e.where.endswith('datapaths[1]') and 'ovs-vlan' in e.msg
    e = _bad(tmp_path, 'cni-net', lambda d: d['throughput'].update(msg_bytes=[]))
    assert e.where.endswith('throughput.msg_bytes') and 'empty' in e.msg
    e = _bad(tmp_path, 'cni-net', lambda d: d.update(repetitons=3))
    assert e.where.endswith('repetitons') and 'unknown' in e.msg
    e = _bad(tmp_path, 'cni-net', lambda d: d['mpi'].update(pods='eight'))
    assert e.where.endswith('mpi.pods')
    e = _bad(tmp_path, 'cni-net', lambda d: d.pop('repetitions'))
    assert e.where.endswith('repetitions') and 'missing' in e.msg

def test_unknown_study_and_profile():
    with pytest.raises(ConfigError) as e: get_study('cni')
    assert e.value.where == 'study'
    with pytest.raises(ConfigError) as e: load_params('cni-net', 'huge')
    assert e.value.where == 'profile' and 'quick' in e.value.msg

def test_overrides_are_validated():
    assert load_params('cni-net', 'smoke', overrides={'repetitions': 2})['repetitions'] == 2
    with pytest.raises(ConfigError) as e: load_params('cni-net', 'smoke', overrides={'repetitions': 0})
    assert e.value.where.endswith('repetitions')

# ---- the study contract and parameter drift -------------------------------------------------------------
import json, shutil
from researchkit.studies.catalog import parameter_drift, parameters_cell, notebook_path
from researchkit.studies.contract import Study, check_study, RUN_PARAMETERS

@pytest.mark.parametrize('study', study_names())
def test_every_study_keeps_the_contract(study):
    s = get_study(study)
    assert isinstance(s, Study) and check_study(s) is s and s.name == study
    assert notebook_path(s).exists()
    plan = s.plan(load_params(study, 'smoke'))
    assert isinstance(plan, dict) and plan and all(isinstance(v, list) for v in plan.values())

@pytest.mark.parametrize('study', study_names())
def test_no_parameter_drift(study):
    assert parameter_drift(study) == []
    cell = parameters_cell(notebook_path(study))
    assert list(cell) == [*RUN_PARAMETERS, *get_study(study).schema]

def _copy_project(tmp_path, monkeypatch):
    "A copy of params/ and the study notebooks that `project_root()` resolves to."
    from researchkit.core import project_root
    root = project_root()
    shutil.copytree(root/'params', tmp_path/'params'); shutil.copytree(root/'nbs'/'studies', tmp_path/'nbs'/'studies')
    (tmp_path/'pyproject.toml').write_text('')
    monkeypatch.setenv('RESEARCHKIT_HOME', str(tmp_path))
    return tmp_path

def _edit_parameters_cell(nb_path, edit):
    nb = json.loads(nb_path.read_text())
    cell = next(c for c in nb['cells'] if 'parameters' in c.get('metadata', {}).get('tags', []))
    cell['source'] = edit(''.join(cell['source']))
    nb_path.write_text(json.dumps(nb))

def test_drift_is_found(tmp_path, monkeypatch):
    root = _copy_project(tmp_path, monkeypatch)
    nb = root/'nbs'/'studies'/'runtimes-web.ipynb'
    _edit_parameters_cell(nb, lambda s: s.replace('stop_after_collapse = None', 'stop_after_colapse = None'))
    found = parameter_drift('runtimes-web')
    assert any("lacks ['stop_after_collapse']" in p for p in found) and any('stop_after_colapse' in p for p in found), found
    _edit_parameters_cell(nb, lambda s: s + '\nimport os\n')
    with pytest.raises(ConfigError) as e: parameters_cell(nb)
    assert 'parameters cell' in e.value.where
    (root/'params'/'cni-net'/'quick.yaml').write_text((root/'params'/'cni-net'/'quick.yaml').read_text() + '\nrepetitons: 3\n')
    assert any(p.startswith('profile quick') and 'repetitons' in p for p in parameter_drift('cni-net'))

def test_a_parameter_line_papermill_cannot_read_is_drift(tmp_path, monkeypatch):
    "papermill reads a parameters cell with its own parser: a comment holding '=' hides the line from it (every run then warned 'Passed unknown parameter: core_per_paper_cpu')."
    root = _copy_project(tmp_path, monkeypatch)
    _edit_parameters_cell(root/'nbs'/'studies'/'hlf-kata.ipynb', lambda s: s.replace("8 pCPU become 1 core", "8 pCPU = 1 core"))
    found = parameter_drift('hlf-kata')
    assert any('papermill cannot read' in p and "'core_per_paper_cpu'" in p for p in found), found


ROOMS = ['## Parameters', '## The plan', '## What the method asks of the testbed', '## The method', '## Claims', '## Figures',
         '## Notes for the report', '## The study']

@pytest.mark.parametrize('study', study_names())
def test_every_study_library_notebook_has_the_same_rooms_in_the_same_order(study):
    "A study's library notebook (the one its module is exported from) has the same second-level sections as every other, in the same order, and its export cells sit in them: a new study copies the shape, a reader finds the method in the same place in each."
    import importlib, pathlib, re
    from researchkit.studies.catalog import STUDIES
    mod = pathlib.Path(importlib.import_module(STUDIES[study]).__file__)
    src = re.search(r'File to edit: (\S+\.ipynb)', mod.read_text()).group(1)
    nb = json.loads((mod.parent/src).resolve().read_text())
    heads = [l for c in nb['cells'] if c['cell_type'] == 'markdown' for l in ''.join(c['source']).splitlines() if l.startswith('## ')]
    assert heads == ROOMS, (src, heads)
    first = next(i for i, c in enumerate(nb['cells']) if c['cell_type'] == 'markdown' and ''.join(c['source']).startswith('## Parameters'))
    late = [c['id'] for c in nb['cells'][first:] if c['cell_type'] == 'code' and ''.join(c['source']).startswith('#| export')
            and re.match(r'#\| export\nfrom __future__', ''.join(c['source']))]
    assert not late, (src, late)   # the imports come before the rooms


def _guide_files() -> dict[str, str]:
    "The files README's 'Adding a study' spells out: fenced blocks whose info string names a file after the language."
    import pathlib, re
    text = (pathlib.Path(__file__).resolve().parent.parent/'README.md').read_text()
    guide = text[text.index('## Adding a study\n'):]
    guide = guide[:guide.index('\n## ', 5)]
    return {m.group(1): m.group(2) for m in re.finditer(r'^```\w+ (\S+)\n(.*?)^```$', guide, re.M | re.S)}

def test_a_study_added_from_the_guide_runs_and_decides(tmp_path, monkeypatch):
    "The toy study of README's 'Adding a study', built from the guide's own text (its module, its smoke profile, its line in `STUDIES`): the catalog loads it and checks the contract, its library has the rooms, a smoke campaign on this machine measures real TCP between two pods on a bridge and host to host through the layers, and its claim gets a verdict from the records, with its figure."
    import sys
    import polars as pl
    from researchkit.studies import catalog
    from researchkit.studies.campaign import Campaign
    files = _guide_files()
    assert set(files) == {'toy_bridge.py', 'params/toy-bridge/smoke.yaml'}, sorted(files)
    assert [l for l in files['toy_bridge.py'].splitlines() if l.startswith('# ')] == \
        ['# Parameters', '# The plan: the two arms of the claim side by side at each size',
         '# What the method asks of the testbed: two endpoints on a data path (`networks.topologies`), built once per run',
         '# The method: one iperf3 run per point', '# ... and its order: the two paths of a size back to back (`pair`)',
         '# Claims: a ratio per repetition (geometric mean over sizes), decided on its interval',
         '# Figures: from the records alone', '# The study']
    (tmp_path/'mods').mkdir(); (tmp_path/'mods'/'toy_bridge.py').write_text(files['toy_bridge.py'])
    (tmp_path/'params'/'toy-bridge').mkdir(parents=True)   # the guide's params/toy-bridge/, here (a test writes no tracked file)
    (tmp_path/'params'/'toy-bridge'/'smoke.yaml').write_text(files['params/toy-bridge/smoke.yaml'])
    real = catalog.params_path
    monkeypatch.setattr(catalog, 'params_path', lambda study, profile: tmp_path/'params'/'toy-bridge'/f'{profile}.yaml'
                        if getattr(study, 'name', study) == 'toy-bridge' else real(study, profile))
    monkeypatch.syspath_prepend(str(tmp_path/'mods'))
    monkeypatch.setitem(catalog.STUDIES, 'toy-bridge', 'toy_bridge')   # the guide's line in STUDIES
    study = catalog.get_study('toy-bridge')
    run = Campaign('toy-bridge', profile='smoke', results_dir=tmp_path/'results', figures_dir=tmp_path/'figures', progress=False)
    try: run.measure()
    finally: run.close()
    df = run.records()
    tput = df.filter(pl.col('metric') == 'throughput_mbit')
    assert sorted(set(tput['path'])) == ['bridge', 'host'] and tput.height == 2 * 2 * 3 and (tput['value'] > 10).all(), tput
    c = run.claims()
    assert c.height == 1 and c['status'][0] in ('reproduced', 'refuted', 'inconclusive') and 'TCP bridge/host' in c['measured'][0], c
    assert [p.name for p in run.figures()] == ['toy_bridge.png', 'toy_bridge.svg']
    sys.modules.pop('toy_bridge', None)
