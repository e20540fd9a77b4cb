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
