"Tests of researchkit.networks.netdev on real namespaces and devices."
import time
import pytest
from researchkit.core import ConfigError, current_run_id
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import LocalNode
from researchkit.networks.netdev import (add_netns, list_netns, del_netns, add_veth, set_up, set_mtu, add_addr, batch,
                                         link_info, link_stats, kind_of, rate_limit, rate_limit_lines, tc, Script)
from _net_fixtures import tcp_bytes, leftovers

@pytest.fixture
def pair():
    rid = current_run_id()
    with Teardown() as td:
        a, b = add_netns([f'{rid}-nta', f'{rid}-ntb'], teardown=td)
        add_veth(LocalNode(), f'{rid}-x', f'{rid}-y', a_ns=a.netns, b_ns=b.netns)
        batch(a, [f'link set dev {rid}-x up', f'addr add 198.18.210.1/24 dev {rid}-x'])
        batch(b, [f'link set dev {rid}-y up', f'addr add 198.18.210.2/24 dev {rid}-y'])
        yield a, b, rid
    assert leftovers(f'{rid}-nt') == []

def test_namespaces_created_and_removed():
    rid = current_run_id()
    with Teardown() as td:
        nodes = add_netns([f'{rid}-nt{i}' for i in range(3)], teardown=td)
        assert sorted(list_netns(f'{rid}-nt')) == [f'{rid}-nt{i}' for i in range(3)]
        p = nodes[0].spawn('sleep 60')            # a process inside does not keep the namespace alive
        deadline = time.monotonic() + 10          # inside: `ip netns exec` has entered the namespace (spawn returns before that)
        while not LocalNode().run(f'ip netns pids {rid}-nt0', check=False).stdout.strip():
            assert time.monotonic() < deadline, "the process never entered the namespace"
            time.sleep(0.05)
        del_netns(nodes[0]); p.wait(5)
        assert f'{rid}-nt0' not in list_netns(f'{rid}-nt')
    assert list_netns(f'{rid}-nt') == []

def test_veth_mtu_addresses_and_traffic(pair):
    a, b, rid = pair
    set_mtu(a, f'{rid}-x', 1400)
    info = link_info(a, f'{rid}-x')
    assert info['mtu'] == 1400 and kind_of(info) == 'veth'
    assert f'{rid}-x' not in LocalNode().run('ip -o link').stdout          # created directly in the namespace
    before = link_stats(b, f'{rid}-y')['rx_bytes']
    assert tcp_bytes(b, a, '198.18.210.2', n=500_000) == 500_000
    assert link_stats(b, f'{rid}-y')['rx_bytes'] - before > 500_000

def test_veth_name_too_long():
    with pytest.raises(ConfigError):
        add_veth(LocalNode(), 'x' * 16, 'y', a_ns='nope', b_ns='nope')

def test_script_runs_batches_in_namespaces(pair):
    a, b, rid = pair
    Script(LocalNode()).batch(a.netns, [f'addr add 198.18.211.1/24 dev {rid}-x']).sysctl(a.netns, net__ipv4__ip_forward=1).run()
    assert '198.18.211.1' in a.run(f'ip -br addr show dev {rid}-x').stdout
    assert a.run('cat /proc/sys/net/ipv4/ip_forward').stdout.strip() == '1'
    assert LocalNode().run('cat /proc/sys/net/ipv4/ip_forward').stdout.strip() in ('0', '1')   # untouched root (either is fine)
    with pytest.raises(Exception):
        Script(LocalNode()).batch(a.netns, ['link set dev nosuchdev up']).run()

@pytest.mark.parametrize('kind', ['tbf', 'htb'])
def test_rate_limit_installs(pair, kind):
    a, b, rid = pair
    rate_limit(a, f'{rid}-x', 50, kind=kind)
    assert kind in tc(a, f'qdisc show dev {rid}-x').stdout
    assert tcp_bytes(b, a, '198.18.210.2', n=200_000) == 200_000

def test_rate_limit_bad_values():
    with pytest.raises(ConfigError): rate_limit_lines('x', -1)
    with pytest.raises(ConfigError): rate_limit_lines('x', 10, kind='netem')
