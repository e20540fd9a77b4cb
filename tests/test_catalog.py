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
