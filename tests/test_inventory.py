"Testbed inventories: every malformed file fails naming the field; shipped files validate; an SSH inventory works."
import os, copy, pathlib, textwrap, pytest, yaml
from researchkit.core import ConfigError, project_root
from researchkit.testbed.inventory import (load_inventory, inventory_from_dict, inventory_path, Inventory, Testbed,
                                          LOCAL_DEFAULT)
from researchkit.testbed.nodes import LocalNode
from researchkit.testbed.ssh import SSHNode
from researchkit.teardown import reap
from _ssh_fixtures import ssh_hosts, ssh_host  # noqa: F401  (fixtures)

GOOD = {
    'name': 'lab',
    'nodes': [
        {'name': 'bastion', 'kind': 'ssh', 'host': 'b.example.org', 'roles': ['client']},
        {'name': 'h1', 'kind': 'ssh', 'host': '192.0.2.1', 'port': 22, 'user': 'root', 'jump': 'bastion',
         'underlay': {'ifname': 'eth1', 'ip': '198.51.100.1'}},
        {'name': 'vm1', 'kind': 'ssh', 'host': '192.0.2.2', 'roles': ['host', 'vm'], 'jump': 'h1'},
    ],
}


def variant(path, value=None, *, delete=False, base=GOOD):
    "A copy of `base` with the item at `path` (a tuple of keys/indices) set to `value` (or deleted)."
    d = copy.deepcopy(base); cur = d
    for k in path[:-1]: cur = cur[k]
    if delete: del cur[path[-1]]
    else: cur[path[-1]] = value
    return d


BAD = [  # (inventory, the field the error must name, a word of the message)
    (variant(('nodes', 1, 'port'), '22'), 'nodes[1].port', 'expected integer'),
    (variant(('nodes', 1, 'port'), 70000), 'nodes[1].port', 'maximum'),
    (variant(('nodes', 1, 'port'), True), 'nodes[1].port', 'expected integer'),
    (variant(('nodes', 0, 'kind'), 'docker'), 'nodes[0].kind', "'docker' is not one of"),
    (variant(('nodes', 0, 'kind'), None, delete=True), 'nodes[0].kind', 'required'),
    (variant(('nodes', 0, 'name'), None, delete=True), 'nodes[0].name', 'required'),
    (variant(('nodes', 0, 'name'), 'Bastion_1'), 'nodes[0].name', 'not a valid name'),
    (variant(('nodes', 2, 'roles'), ['host', 'gpu']), 'nodes[2].roles[1]', "'gpu' is not one of"),
    (variant(('nodes', 2, 'roles'), 'host'), 'nodes[2].roles', 'expected list'),
    (variant(('nodes', 2, 'roles'), []), 'nodes[2].roles', 'must not be empty'),
    (variant(('nodes', 2, 'roles'), ['host', 'host']), 'nodes[2].roles', 'duplicate role'),
    (variant(('nodes', 1, 'hostname'), 'x'), 'nodes[1].hostname', 'unknown field'),
    (variant(('nodes', 1, 'underlay'), {'ifname': 'eth1'}), 'nodes[1].underlay.ip', 'required'),
    (variant(('nodes', 1, 'underlay'), {'ifname': 'eth1', 'ip': '10.0.0.300'}), 'nodes[1].underlay.ip', 'not an IP'),
    (variant(('nodes', 1, 'underlay'), {'ifname': 'eth1', 'ip': '1.2.3.4', 'mtu': 9000}), 'nodes[1].underlay.mtu', 'unknown field'),
    (variant(('nodes', 1, 'underlay'), 'eth1'), 'nodes[1].underlay', 'expected mapping'),
    (variant(('nodes', 1, 'trust_unknown_host'), 'yes'), 'nodes[1].trust_unknown_host', 'expected boolean'),
    (variant(('nodes', 1, 'host'), None, delete=True), 'nodes[1].host', 'required for kind ssh'),
    (variant(('nodes', 1, 'host'), ''), 'nodes[1].host', 'must not be empty'),
    (variant(('nodes', 2, 'name'), 'h1'), 'nodes[2].name', 'duplicate node name'),
    (variant(('nodes', 1, 'jump'), 'nowhere'), 'nodes[1].jump', "no node named 'nowhere'"),
    (variant(('nodes', 0, 'jump'), 'vm1'), 'nodes[0].jump', 'jump cycle'),
    (variant(('nodes', 1, 'jump'), 'h1'), 'nodes[1].jump', 'jump cycle'),
    (variant(('nodes',), []), 'nodes', 'no node: list at least one machine, or give a `kubernetes:` section'),
    (variant(('nodes',), None, delete=True), 'nodes', 'no node'),
    (variant(('nodes',), {'name': 'x'}), 'nodes', 'expected list'),
    (variant(('nodes', 0), 'bastion'), 'nodes[0]', 'expected mapping'),
    (variant(('name',), None, delete=True), 'name', 'required'),
    (variant(('name',), 3), 'name', 'expected string'),
    (variant(('nodes', 1, 'roles'), ['client'], base=variant(('nodes', 2, 'roles'), ['vm'])), 'nodes', 'no node has role host'),
    (variant(('local',), {'hosts': 2}), 'local', 'only for testbeds whose nodes are all kind local'),
    (variant(('colour',), 'blue'), 'colour', 'unknown field'),
    # ssh fields on a local node
    *[({'name': 't', 'nodes': [{'name': 'n', 'kind': 'local', k: v}]}, f'nodes[0].{k}', 'only for kind ssh')
      for k, v in [('host', 'x'), ('port', 22), ('user', 'root'), ('key', '~/.ssh/k'), ('jump', 'n'),
                   ('known_hosts', '/k'), ('trust_unknown_host', False), ('ssh_config', '/c'), ('connect_timeout', 3)]],
    # a local node cannot be a jump host
    ({'name': 't', 'nodes': [{'name': 'l', 'kind': 'local'}, {'name': 's', 'kind': 'ssh', 'host': 'x', 'jump': 'l'}]},
     'nodes[1].jump', 'must be an ssh node'),
    ({'name': 't', 'local': {'hosts': 0}, 'nodes': [{'name': 'l', 'kind': 'local'}]}, 'local.hosts', 'below the minimum'),
    ({'name': 't', 'local': {'hosts': 2, 'wire_rate': 1}, 'nodes': [{'name': 'l', 'kind': 'local'}]}, 'local.wire_rate', 'unknown field'),
    ({'name': 't', 'local': {'wire_rate_mbit': 'fast'}, 'nodes': [{'name': 'l', 'kind': 'local'}]}, 'local.wire_rate_mbit', 'expected number'),
    # a Kubernetes cluster as the testbed (researchkit.testbed.kube): checked here as far as the file goes, the cluster itself by `Testbed`
    ({'name': 'k', 'kubernetes': {'kubeconfig': '/nonexistent/kubeconfig'}}, 'kubernetes.kubeconfig', 'no such file'),
    ({'name': 'k', 'kubernetes': {}}, 'kubernetes.kubeconfig', 'required'),
    ({'name': 'k', 'kubernetes': {'kubeconfig': '/etc/hostname', 'runtime_classes': {'podman': None}}}, 'kubernetes.runtime_classes', "unknown runtime 'podman'"),
    ({'name': 'k', 'kubernetes': {'kubeconfig': '/etc/hostname', 'runtime_classes': {'runsc': 'G Visor'}}}, 'kubernetes.runtime_classes', 'not a RuntimeClass name'),
    ({'name': 'k', 'kubernetes': {'kubeconfig': '/etc/hostname', 'namespace': 'My_NS'}}, 'kubernetes.namespace', 'not a namespace name'),
    ({'name': 'k', 'kubernetes': {'kubeconfig': '/etc/hostname', 'node_selector': {'zone': 3}}}, 'kubernetes.node_selector', 'label values are strings'),
    ({'name': 'k', 'kubernetes': {'kubeconfig': '/etc/hostname', 'cluster': 'x'}}, 'kubernetes.cluster', 'unknown field'),
    ({'name': 'k', 'kubernetes': {'kubeconfig': '/etc/hostname', 'networks': {'macvlan': {'master': 'eth1'}}}}, 'kubernetes.networks', "a CNI configuration with a 'type'"),
    ({'name': 'k', 'local': {'hosts': 2}, 'kubernetes': {'kubeconfig': '/etc/hostname'}}, 'local', 'a Kubernetes cluster'),
]


def test_good_inventory_validates():
    inv = inventory_from_dict(GOOD)
    assert inv.name == 'lab' and inv.spec['local'] is None
    assert inv.nodes[0]['roles'] == ['client'] and inv.nodes[2]['roles'] == ['host', 'vm']
    assert inv.nodes[1]['underlay'] == {'ifname': 'eth1', 'ip': '198.51.100.1'}


def test_kind_and_the_preflights_that_check_this_machine_only_for_a_local_testbed():
    "A study's preflight checks CPU lists and budgets against this machine's cores only on a local testbed: a cluster's nodes are checked where its pods start, an SSH node's where it is reached (a Kubernetes inventory has no nodes, so 'all nodes local' held for it)."
    import os
    from researchkit.studies import runtimes_web as rw, hlf_kata, hlf_ec
    from researchkit.studies.campaign import resolve_params
    kube = inventory_from_dict({'name': 'k', 'kubernetes': {'kubeconfig': '/etc/hostname',   # (with the images its pods run: `check_images` passes)
                                                          'images': {'web': 'registry.example.org/web:1', 'fabric': 'registry.example.org/fabric:1'}}})
    local = inventory_from_dict(LOCAL_DEFAULT)
    assert (kube.kind, local.kind, inventory_from_dict(GOOD).kind) == ('kubernetes', 'local', 'ssh')
    beyond = str(os.cpu_count() + 6)   # a CPU this machine does not have, as a bigger cluster node may
    P, _ = resolve_params(rw.study, 'smoke', {'server_cpus': beyond})
    rw.preflight(P, kube)
    with pytest.raises(ConfigError) as e: rw.preflight(P, local)
    assert e.value.where.endswith('server_cpus'), str(e.value)
    for study, field in ((hlf_kata, 'fabric_cpus'), (hlf_ec, 'peer_cpus')):
        P, _ = resolve_params(study.study, 'smoke', {field: beyond})
        study.preflight(P, kube)
        with pytest.raises(ConfigError): study.preflight(P, local)


@pytest.mark.parametrize('data,field,words', BAD, ids=[f"{b[1]}:{b[2]}" for b in BAD])
def test_malformed_inventory_names_the_field(data, field, words, tmp_path):
    p = tmp_path / 'bad.yaml'; p.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e: load_inventory(p)
    assert e.value.where == f"{p}: {field}", str(e.value)
    assert words in e.value.msg, str(e.value)
    assert str(e.value).startswith(f"{p}: {field}: ")


def test_file_errors(tmp_path):
    p = tmp_path / 'broken.yaml'; p.write_text("name: x\nnodes: [\n")
    with pytest.raises(ConfigError, match='not valid YAML'): load_inventory(p)
    p.write_text('')
    with pytest.raises(ConfigError, match='expected a mapping'): load_inventory(p)
    with pytest.raises(ConfigError, match='no inventory named .no-such-testbed.'): load_inventory('no-such-testbed')
    with pytest.raises(ConfigError, match='no such inventory file'): load_inventory(tmp_path / 'absent.yaml')


def test_shipped_inventories_validate():
    local = load_inventory()
    assert local.path == inventory_path('local') and local.name == 'local'
    assert local.spec == inventory_from_dict(LOCAL_DEFAULT).spec  # the built-in default equals the shipped file
    assert local.spec['local']['hosts'] == 2
    ex = load_inventory('example-ssh')
    assert ex.name == 'example-ssh'
    tb = Testbed(ex)
    assert not tb.is_local and tb.local is None
    assert [n.name for n in tb.vms()] and len(tb.hosts()) >= 3
    assert all(n.kind == 'ssh' and not n.connected for n in tb)   # nothing is contacted by just loading
    assert all(n.underlay for n in tb.hosts())
    assert tb.nodes['bm1'].jump is tb.nodes['bastion']
    # errors in a file under params/ are reported relative to the project
    assert str(ex.path).startswith(str(project_root()))


def test_bare_name_and_default(tmp_path, monkeypatch):
    root = tmp_path / 'proj'; (root / 'params' / 'testbeds').mkdir(parents=True)
    monkeypatch.setenv('RESEARCHKIT_HOME', str(root))
    inv = load_inventory()                      # no local.yaml: the built-in default
    assert inv.path is None and inv.spec == inventory_from_dict(LOCAL_DEFAULT).spec
    (root / 'params' / 'testbeds' / 'mine.yaml').write_text(yaml.safe_dump(
        {'name': 'mine', 'nodes': [{'name': 'n0', 'kind': 'local', 'roles': ['host', 'client']}], 'local': {'hosts': 3}}))
    assert load_inventory('mine').spec['local'] == {'hosts': 3, 'wire_rate_mbit': None}
    monkeypatch.setenv('RESEARCHKIT_TESTBED', 'mine')
    assert load_inventory().name == 'mine'
    (root / 'params' / 'testbeds' / 'bad.yaml').write_text('name: bad\nnodes:\n  - {name: n0, kind: local, port: 22}\n')
    with pytest.raises(ConfigError) as e: load_inventory('bad')
    assert str(e.value).startswith('params/testbeds/bad.yaml: nodes[0].port: only for kind ssh')


def test_local_testbed():
    with Testbed() as tb:
        assert tb.is_local and tb.name == 'local' and list(tb.nodes) == ['node0']
        assert isinstance(tb.nodes['node0'], LocalNode) and tb.hosts() == [tb.nodes['node0']]
        assert tb.runners()['node0']('echo $((1+1))').stdout == '2\n'
        assert 'node0' in tb._repr_html_() and 'emulating 2 hosts' in tb._repr_html_()
        assert tb.provenance()['testbed'] == 'local'
        with pytest.raises(ConfigError): tb.with_role('gpu')


def test_ssh_inventory_yields_working_testbed(ssh_hosts, tmp_path):
    a = ssh_hosts(port=2222)
    b = ssh_hosts(behind=a)
    kh = a.known_hosts(str(tmp_path / 'known_hosts')); b.known_hosts(kh)
    p = tmp_path / 'lab.yaml'
    p.write_text(textwrap.dedent(f"""\
        name: lab
        nodes:
          - name: gw
            kind: ssh
            roles: [client]
            host: {a.addr}
            port: {a.port}
            user: root
            key: {a.key}
            known_hosts: {kh}
          - name: h1
            kind: ssh
            roles: [host, server]
            host: {b.addr}
            user: root
            key: {b.key}
            known_hosts: {kh}
            jump: gw
            underlay: {{ifname: {b.veth[:-1]}b, ip: {b.addr}}}
          - name: h2
            kind: ssh
            roles: [host, vm]
            host: {a.addr}
            port: {a.port}
            user: root
            key: {a.key}
            trust_unknown_host: true
            known_hosts: {tmp_path / 'empty'}
        """))
    with Testbed(p) as tb:
        assert [n.name for n in tb.hosts()] == ['h1', 'h2'] and [n.name for n in tb.vms()] == ['h2']
        assert tb['h1'].jump is tb['gw']
        assert b.addr in tb['h1'].run('ip -4 -o addr show').stdout          # through the jump host
        assert a.addr in tb['h2'].run('ip -4 -o addr show').stdout
        assert tb['h1'].underlay == {'ifname': b.veth[:-1] + 'b', 'ip': b.addr}
        assert tb['h1'].underlay['ifname'] in tb['h1'].run('ip -o link show').stdout
        runners = tb.runners()
        assert runners['h1']('hostname').stdout == os.uname().nodename + '\n'
        assert all(tb[k].connected for k in ('gw', 'h1', 'h2'))
        html = tb._repr_html_()
        assert 'via gw' in html and 'h2' in html
    assert not any(n.connected for n in tb)
