"""The Fabric network spec and its templates, without Fabric: bad input refused before anything starts (naming the field),
configtx.yaml, environment, enrollment script, external builder, chaincode package, sdk profile, placement."""
import io, os, re, json, tarfile, subprocess, pytest, yaml
from researchkit.core import ConfigError, current_run_id
from researchkit.teardown import Teardown
from researchkit.runtimes.container import node_limits
from researchkit.ledger.spec import (NetworkSpec, OrgSpec, Limits, Layout, check_limits, check_endorsement, placement, configtx,
    configtx_yaml, peer_env, orderer_env, admin_env, core_yaml, builder_scripts, cc_package, package_id, enroll_script, identities,
    node_ou_yaml, sdk_profile, ca_command, endorsement_flags, FABRIC_ROOT, ORDERER_ORG)
from researchkit.ledger.network import Network

L = Layout(f'{FABRIC_ROOT}/rk0000-00')
def ips(spec): return {n.name: f'198.18.0.{10 + i}' for i, n in enumerate(spec.nodes())}
CORES = node_limits()['cores']

@pytest.mark.parametrize('kw,field', [
    (dict(orderers=0), 'orderers'), (dict(orderers=-1), 'orderers'), (dict(orderers=1.0), 'orderers'),
    (dict(runtime='docker'), 'runtime'), (dict(runtime='RUNC'), 'runtime'),
    (dict(orgs=[OrgSpec('org1'), OrgSpec('org2', peers=0)]), 'orgs[1].peers'),
    (dict(orgs=[]), 'orgs'), (dict(orgs=[OrgSpec('org1'), OrgSpec('org1')]), 'orgs[1].name'),
    (dict(orgs=[OrgSpec('orderer')]), 'orgs[0].name'), (dict(orgs=[OrgSpec('averyveryverylongorg')]), 'orgs[0].name'),
    (dict(orgs=[OrgSpec('org1', peers=2, endorsing=3)]), 'orgs[0].endorsing'),
    (dict(orgs=[OrgSpec('org1', host='m1')]), 'orgs[0].host'), (dict(orderer_host='m1'), 'orderer_host'),
    (dict(limits={'peer': Limits(cpus=0)}), 'limits.peer.cpus'), (dict(limits={'peer': Limits(cpus=0.001)}), 'limits.peer.cpus'),
    (dict(limits={'orderer': Limits(cpuset='2-1')}), 'limits.orderer.cpuset'), (dict(limits={'ca': Limits(memory_mb=0)}), 'limits.ca.memory_mb'),
    (dict(limits={'peer7-org1': Limits(cpus=1)}), 'limits.peer7-org1'), (dict(limits={'peer': {'gpus': 1}}), 'limits.peer.gpus'),
    (dict(endorsement='SOME'), 'endorsement'), (dict(endorsement="AND('Org1MSP.peer','Org3MSP.peer')"), 'endorsement'),
    (dict(endorsement="AND('Org1MSP.peer'"), 'endorsement'), (dict(batch_timeout_s=0), 'batch_timeout_s'),
    (dict(batch_max_messages=0), 'batch_max_messages'), (dict(block_file_mib=0), 'block_file_mib'),
    (dict(gateway_concurrency=0), 'gateway_concurrency'), (dict(channel='Bad_Channel'), 'channel'),
    (dict(chaincode='Kv'), 'chaincode'), (dict(log_level='WARN; rm'), 'log_level'),
    (dict(orgs=[OrgSpec('org1', peers=31), OrgSpec('org2', peers=31)]), 'orgs')])
def test_bad_spec_names_the_field(kw, field):
    with pytest.raises(ConfigError) as e: NetworkSpec(**kw).validate()
    assert e.value.where == field, e.value

def _fabric_dirs_of_this_process() -> list[str]:
    "What is in FABRIC_ROOT but another run's (`rkXXXX-...`): another xdist worker's networks come and go meanwhile; a `Network` made here is `<this run id>-NNNN`."
    mine = lambda d: d.startswith(f'{current_run_id()}-') or not re.match(r'rk[0-9a-f]{4}-', d)
    try: return sorted(d for d in os.listdir(FABRIC_ROOT) if mine(d))
    except FileNotFoundError: return []   # (another run's undo removes it when it empties it)

@pytest.mark.parametrize('spec,field', [
    (NetworkSpec(orderers=0), 'orderers'), (NetworkSpec(runtime='kubernetes'), 'runtime'),
    (NetworkSpec(limits={'peer': Limits(cpus=float(CORES + 1))}), 'limits.peer.cpus'),
    (NetworkSpec(limits={'peer0-org1': Limits(cpus=1.5, cpuset='0')}), 'limits.peer0-org1.cpus'),
    (NetworkSpec(orgs=[OrgSpec('org1'), OrgSpec('org2', peers=0)]), 'orgs[1].peers'),
    ({'orgs': [{'name': 'org1', 'peers': 0}]}, 'orgs[0].peers'), ({'orderers': 1, 'bogus': 2}, 'bogus'),
    (NetworkSpec(block_file_mib=3), 'block_file_mib')])
def test_network_rejects_bad_input_before_anything_starts(spec, field):
    before = _fabric_dirs_of_this_process()
    with Teardown() as td:
        with pytest.raises(ConfigError) as e: Network(spec, teardown=td)
        assert len(td) == 0   # nothing was registered, so nothing was created
    assert e.value.where == field, e.value
    assert _fabric_dirs_of_this_process() == before

def test_quota_above_the_hosts_cores_says_so():
    with pytest.raises(ConfigError, match=f'above the {CORES} cores'):
        NetworkSpec(limits={'all': Limits(cpus=CORES + 0.5)}).validate({'local': node_limits()})
    NetworkSpec(limits={'all': Limits(cpus=CORES)}).validate({'local': node_limits()})   # exactly the cores is fine

def test_default_is_the_papers_topology():
    s = NetworkSpec().validate()
    roles = [n.role for n in s.containers()]
    assert len(roles) == 7 and roles.count('ca') == 2 and roles.count('peer') == 2 and roles.count('chaincode') == 2 and roles.count('orderer') == 1
    assert {n.org for n in s.containers() if n.role == 'peer'} == {'org1', 'org2'}
    assert s.node('ca-orderer').setup_only and s.runtime == 'runc' and s.endorsement == 'MAJORITY'

def test_peers_per_org_and_endorsing_are_parameters():
    s = NetworkSpec(orgs=[OrgSpec('org1', peers=10, endorsing=1), OrgSpec('org2', peers=10, endorsing=1)]).validate()
    assert sum(n.role == 'peer' for n in s.nodes()) == 20 and [n.name for n in s.nodes() if n.role == 'chaincode'] == ['cc-peer0-org1', 'cc-peer0-org2']
    assert all(len(n.name) <= 32 for n in NetworkSpec(orgs=[OrgSpec('abcdefghijkl', peers=9)]).validate().nodes())
    assert NetworkSpec(limits={'peer': Limits(0.5), 'peer1-org1': Limits(0.2), 'all': Limits(cpuset='1')},
                       orgs=[OrgSpec('org1', peers=2)]).validate().limits_for('peer1-org1') == (Limits(0.2), 'peer1-org1')

def test_from_dict():
    s = NetworkSpec.from_dict({'orgs': [{'name': 'a', 'peers': 2, 'endorsing': 1}], 'runtime': 'runsc', 'limits': {'peer': {'cpus': 0.5, 'cpuset': '1'}}}).validate()
    assert s.orgs[0].n_endorsing == 1 and s.limits['peer'] == Limits(0.5, '1') and s.runtime == 'runsc'
    with pytest.raises(ConfigError) as e: NetworkSpec.from_dict({'orgs': [{'name': 'a', 'pears': 2}]})
    assert e.value.where == 'orgs[0].pears'

def test_limits_check_against_the_node():
    lim = {'cores': 2, 'online': [0, 1], 'memory_mb': 1000}
    assert check_limits(Limits(2.0), node_lim=lim).cpus == 2.0
    for l, field in [(Limits(1.01, '1'), 'limits.cpus'), (Limits(cpuset='2'), 'limits.cpuset'), (Limits(memory_mb=2000), 'limits.memory_mb')]:
        with pytest.raises(ConfigError) as e: check_limits(l, node_lim=lim)
        assert e.value.where == field

def test_endorsement_policies():
    msps = ['Org1MSP', 'Org2MSP']
    assert check_endorsement('ANY', msps) == 'ANY' and check_endorsement("OutOf(2, 'Org1MSP.peer', 'Org2MSP.member')", msps)
    assert endorsement_flags(NetworkSpec(endorsement="OR('Org1MSP.peer','Org2MSP.peer')").validate()) == ['--signature-policy', "OR('Org1MSP.peer','Org2MSP.peer')"]
    with pytest.raises(ConfigError): check_endorsement("AND('Org1MSP.root')", msps)

def test_configtx_carries_every_org_anchor_and_consenter():
    s = NetworkSpec(orgs=[OrgSpec('org1', peers=2), OrgSpec('org2'), OrgSpec('org3')], orderers=3, batch_timeout_s=0.2,
                    batch_max_messages=50, endorsement='ALL').validate()
    ip = ips(s)
    text = configtx_yaml(s, L, ip)
    c = yaml.safe_load(text)
    assert '&id' not in text and '*id' not in text   # no YAML anchors or aliases
    app, ordr = c['Profiles']['RK']['Application'], c['Profiles']['RK']['Orderer']
    assert [o['ID'] for o in app['Organizations']] == ['Org1MSP', 'Org2MSP', 'Org3MSP']
    assert [o['AnchorPeers'][0]['Host'] for o in app['Organizations']] == [ip['peer0-org1'], ip['peer0-org2'], ip['peer0-org3']]
    assert [x['Host'] for x in ordr['EtcdRaft']['Consenters']] == [ip['orderer0'], ip['orderer1'], ip['orderer2']]
    assert all(x['ClientTLSCert'] == f"{L.tls(f'orderer{i}')}/server.crt" for i, x in enumerate(ordr['EtcdRaft']['Consenters']))
    assert ordr['Organizations'][0]['OrdererEndpoints'] == [f"{ip[f'orderer{i}']}:7050" for i in range(3)]
    assert ordr['BatchTimeout'] == '200ms' and ordr['BatchSize']['MaxMessageCount'] == 50 and ordr['EtcdRaft']['Options']['TickInterval'] == '100ms'
    assert app['Policies']['Endorsement']['Rule'] == 'ALL Endorsement' and app['Capabilities'] == {'V2_5': True}
    assert app['Organizations'][0]['MSPDir'] == L.org_msp('org1')

def test_node_environment():
    s = NetworkSpec(orgs=[OrgSpec('org1', peers=2, endorsing=1), OrgSpec('org2')], gateway_concurrency=900, log_level='INFO').validate()
    ip = ips(s)
    e = peer_env(s, L, 'peer1-org1', ip)
    assert e['CORE_PEER_GOSSIP_BOOTSTRAP'] == f"{ip['peer0-org1']}:7051" and e['CORE_PEER_GOSSIP_EXTERNALENDPOINT'] == f"{ip['peer1-org1']}:7051"
    assert 'RK_CC_ADDRESS' not in e and e['CORE_PEER_LIMITS_CONCURRENCY_GATEWAYSERVICE'] == 900 and e['FABRIC_LOGGING_SPEC'] == 'INFO'
    assert peer_env(s, L, 'peer0-org1', ip)['RK_CC_ADDRESS'] == f"{ip['cc-peer0-org1']}:9999"
    assert all(v.startswith(L.node('peer1-org1')) for k, v in e.items() if k.endswith(('_FILE', 'PATH', 'ROOTDIR')) and k != 'FABRIC_CFG_PATH')
    o = orderer_env(s, L, 'orderer0')
    assert o['ORDERER_FILELEDGER_LOCATION'] == L.data('orderer0') and o['ORDERER_ADMIN_LISTENADDRESS'] == '0.0.0.0:7053'
    a = admin_env(s, L, 'peer0-org2', ip)
    assert a['CORE_PEER_MSPCONFIGPATH'] == L.admin_msp('org2') and a['CORE_PEER_LOCALMSPID'] == 'Org2MSP'
    assert admin_env(s, L, 'peer0-org2', ip, user='user1')['CORE_PEER_MSPCONFIGPATH'] == L.user_msp('org2')
    ca = ca_command('/bin/fabric-ca-server', L, 'org1', '198.18.0.10')
    assert '--tls.enabled' in ca and ca[ca.index('--csr.hosts') + 1] == '198.18.0.10,localhost,127.0.0.1'
    assert L.ledger('peer0-org1', 'rkch') == f"{L.data('peer0-org1')}/ledgersData/chains/chains/rkch"

def test_core_yaml_keeps_the_rest():
    sample = "peer:\n  id: jdoe\n  gateway:\n    enabled: true\nchaincode:\n  externalBuilders:\n    - name: ccaas_builder\n      path: /opt/x\n  logging:\n    level: info\n"
    c = yaml.safe_load(core_yaml(sample, L.builder))
    assert c['peer']['gateway']['enabled'] is True and c['chaincode']['logging']['level'] == 'info'
    assert c['chaincode']['externalBuilders'] == [{'name': 'rkccaas', 'path': L.builder, 'propagateEnvironment': ['RK_CC_ADDRESS']}]

def test_enroll_script(tmp_path):
    s = NetworkSpec(orgs=[OrgSpec('org1', peers=2), OrgSpec('org2')], orderers=2).validate()
    ip = ips(s)
    for org, n in (('org1', 4), (ORDERER_ORG, 3)):
        ids = identities(s, L, org, ip)
        assert len(ids) == n
        sc = enroll_script('/t/fabric-ca-client', L, org, ip[f'ca-{org}'], ids)
        assert subprocess.run(['sh', '-n'], input=sc, text=True).returncode == 0
        assert sc.count('cl register') == n and sc.count('--enrollment.profile tls') == n - 1 - (org != ORDERER_ORG)
    assert [i.name for i in identities(s, L, 'org1', ip)] == ['peer0', 'peer1', 'orgadmin', 'user1']   # never 'admin' (the bootstrap id)
    ou = yaml.safe_load(node_ou_yaml())['NodeOUs']
    assert ou['Enable'] is True and {k for k in ou if k != 'Enable'} == {'ClientOUIdentifier', 'PeerOUIdentifier', 'AdminOUIdentifier', 'OrdererOUIdentifier'}

def _sh(d, name, *args, env=None):
    return subprocess.run([str(d / name), *map(str, args)], env={'PATH': os.environ['PATH'], **(env or {})}, capture_output=True, text=True)

def test_builder_scripts_under_sh(tmp_path):
    for k, v in builder_scripts().items(): (tmp_path / k).write_text(v); (tmp_path / k).chmod(0o755)
    src, meta, out, rel = (tmp_path / x for x in ('src', 'meta', 'out', 'rel'))
    for d in (src, meta, out): d.mkdir()
    (meta / 'metadata.json').write_text('{"type":"ccaas","label":"kv_1"}')
    (src / 'connection.json').write_text('{"address":"@ADDRESS@","dial_timeout":"10s"}')
    assert _sh(tmp_path, 'detect', src, meta).returncode == 0
    (meta / 'metadata.json').write_text('{"type":"golang"}')
    assert _sh(tmp_path, 'detect', src, meta).returncode == 1
    assert _sh(tmp_path, 'build', src, meta, out).returncode == 0 and (out / 'connection.json').exists()
    r = _sh(tmp_path, 'release', out, rel, env={'RK_CC_ADDRESS': '198.18.0.17:9999'})
    assert r.returncode == 0 and json.loads((rel / 'chaincode/server/connection.json').read_text())['address'] == '198.18.0.17:9999'
    assert _sh(tmp_path, 'release', out, tmp_path / 'rel2').returncode == 1   # no address: refuse rather than point at nothing

def test_chaincode_package():
    a, b = cc_package('kv_1'), cc_package('kv_1')
    assert a == b and package_id('kv_1', a) == package_id('kv_1', b) != package_id('kv_1', cc_package('kv_2'))
    with tarfile.open(fileobj=io.BytesIO(a)) as t:
        assert t.getnames() == ['metadata.json', 'code.tar.gz'] and json.load(t.extractfile('metadata.json')) == {'type': 'ccaas', 'label': 'kv_1'}
        with tarfile.open(fileobj=io.BytesIO(t.extractfile('code.tar.gz').read())) as c:
            assert json.load(c.extractfile('connection.json'))['address'] == '@ADDRESS@'

def test_package_id_matches_fabric(tmp_path):
    "Our package id is the one `peer lifecycle chaincode calculatepackageid` computes (when the peer is built)."
    from researchkit.testbed.tools import tool_path
    try: peer = tool_path('peer')
    except ConfigError as e: pytest.skip(f'peer is not a pinned tool here: {e}')
    from researchkit.ledger.network import fabric_config_dir
    cfg = fabric_config_dir()
    if not peer or not cfg: pytest.skip('peer or its sampleconfig not built: run tools/install-go-tools')
    (tmp_path / 'kv.tgz').write_bytes(cc_package('kv_1'))
    r = subprocess.run([peer, 'lifecycle', 'chaincode', 'calculatepackageid', str(tmp_path / 'kv.tgz')], capture_output=True, text=True,
                       env={'PATH': os.environ['PATH'], 'FABRIC_CFG_PATH': cfg})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == package_id('kv_1', cc_package('kv_1'))

def test_sdk_profile():
    s = NetworkSpec(orgs=[OrgSpec('org1', peers=2), OrgSpec('org2')]).validate()
    ip = ips(s)
    p = sdk_profile(s, L, ip, {'org1': '/k1', 'org2': '/k2'}, '/kvs')
    assert set(p['peers']) == {'peer0-org1', 'peer1-org1', 'peer0-org2'} and p['organizations']['Org1MSP']['peers'] == ['peer0-org1', 'peer1-org1']
    assert all(':' in v['url'] and '://' not in v['url'] for v in [*p['peers'].values(), *p['orderers'].values()])   # bare ip:port
    assert p['peers']['peer1-org1']['grpcOptions']['grpc.ssl_target_name_override'] == ip['peer1-org1']

def test_placement_on_two_machines():
    lim = {'cores': 2, 'online': [0, 1], 'memory_mb': 1000}
    s = NetworkSpec(orgs=[OrgSpec('org1', peers=2), OrgSpec('org2', host='m1')], orderer_host='m1').validate({'m0': lim, 'm1': lim})
    kind, n, idx = placement(s, ['m0', 'm1'])
    half = n // 2
    assert kind == 'different-host' and len(set(idx.values())) == len(s.nodes())
    on_m1 = {k for k, v in idx.items() if v >= half}
    assert on_m1 == {'orderer0', 'peer0-org2', 'cc-peer0-org2'} and max(idx.values()) < n
    assert placement(NetworkSpec().validate(), ['local'])[:2] == ('same-host', 9)
    three = NetworkSpec(orgs=[OrgSpec('org1', host='m1'), OrgSpec('org2', host='m2')]).validate({'m0': lim, 'm1': lim, 'm2': lim})
    with pytest.raises(ConfigError, match='at most 2') as e: placement(three, ['m0', 'm1', 'm2'])   # the Topology spans 2 machines
    assert e.value.where == 'orgs'
    with pytest.raises(ConfigError) as e: NetworkSpec(orgs=[OrgSpec('org1', host='m9')]).validate({'m0': lim})
    assert e.value.where == 'orgs[0].host'

def test_a_runtime_the_host_cannot_run_is_not_measurable_before_anything_starts():
    from researchkit.core import NotMeasurable
    from researchkit.runtimes.adapters import get_runtime
    ok, why = get_runtime('kata').available(deep=False)
    if ok: pytest.skip('this host runs Kata')
    with Teardown() as td:
        with pytest.raises(NotMeasurable) as e: Network(NetworkSpec(runtime='kata'), teardown=td)
        assert len(td) == 0
    assert 'kvm' in e.value.reason, e.value.reason
