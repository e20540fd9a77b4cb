"""iperf3 between pod namespaces: real iperf3, real veth/bridge."""
import subprocess, pytest
from researchkit.core import ConfigError, current_run_id
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import CommandFailed, LocalNode, NetnsNode
from researchkit.workloads.iperf import iperf3, tool_versions, free_port, serve, ServerFailed, UDP_MAX_PAYLOAD
from _pods_fixtures import pods, leftovers

def ns_pids(node) -> str:
    return subprocess.run(['ip', 'netns', 'pids', node.netns], capture_output=True, text=True).stdout.strip()

@pytest.fixture
def net():
    with pods(2) as p: yield p

def test_tcp(net):
    (srv, cli), ips, td = net
    m = iperf3(srv, cli, ips[0], seconds=1, msg_bytes=16384, teardown=td)
    assert m['throughput_mbit'][0] > 0 and 'receiver' in m['throughput_mbit'][1]
    assert m['retransmits'][0] >= 0 and 'udp_loss_pct' not in m
    assert m['client_cpu_pct'][0] > 0 and m['server_cpu_pct'][0] > 0
    assert m['msg_bytes'] == (16384.0, 'B')
    assert ns_pids(srv) == ''  # the one-shot server is gone

def test_udp(net):
    (srv, cli), ips, td = net
    m = iperf3(srv, cli, ips[0], proto='udp', seconds=1, msg_bytes=1400, udp_mbit=200, teardown=td)
    assert m['throughput_mbit'][0] > 0 and 0 <= m['udp_loss_pct'][0] <= 100 and m['udp_jitter_ms'][0] >= 0
    assert m['udp_packets'][0] > 0 and 'retransmits' not in m
    assert ns_pids(srv) == ''

def test_big_messages_and_pinning(net):
    (srv, cli), ips, td = net
    m = iperf3(srv, cli, ips[0], seconds=1, msg_bytes=65536, server_cpus='0', client_cpus='1', teardown=td)
    assert m['throughput_mbit'][0] > 0 and m['msg_bytes'][0] == 65536
    u = iperf3(srv, cli, ips[0], proto='udp', seconds=1, msg_bytes=65536, clamp=True, teardown=td)  # unlimited rate
    assert u['msg_bytes'][0] == UDP_MAX_PAYLOAD and u['throughput_mbit'][0] > 0

def test_fixed_port(net):
    (srv, cli), ips, td = net
    m = iperf3(srv, cli, ips[0], seconds=1, port=25123, teardown=td)
    assert m['throughput_mbit'][0] > 0

@pytest.mark.parametrize('kw,field', [
    (dict(proto='sctp'), 'proto'), (dict(msg_bytes=0), 'msg_bytes'), (dict(msg_bytes=-5), 'msg_bytes'),
    (dict(msg_bytes=2 << 20), 'msg_bytes'), (dict(proto='udp', msg_bytes=65508), 'msg_bytes'),
    (dict(seconds=0), 'seconds'), (dict(seconds=0.5), 'seconds'), (dict(udp_mbit=100), "udp_mbit"), (dict(msg_bytes=1.5), "msg_bytes"),
    (dict(proto='udp', udp_mbit=0), 'udp_mbit'), (dict(port=70000), 'port'), (dict(omit=-1), 'omit')])
def test_bad_input_fails_before_starting(kw, field):
    td = Teardown()
    with pytest.raises(ConfigError) as e: iperf3(LocalNode(), LocalNode(), '198.18.0.10', teardown=td, **kw)
    assert e.value.where == field and len(td) == 0  # nothing was started or registered

def test_client_failure_stops_server(net):
    (srv, cli), ips, td = net
    with pytest.raises(CommandFailed): iperf3(srv, cli, ips[1], seconds=1, teardown=td)  # nobody listens at the client's own address
    assert ns_pids(srv) == ''

def test_server_that_cannot_start(net):
    (srv, cli), ips, td = net
    with pytest.raises(ServerFailed): serve(srv, lambda p: f"sh -c 'echo no such server; exit 1'", teardown=td, tries=1)
    assert ns_pids(srv) == ''

def test_free_port_avoids_listening_sockets(net):
    (srv, cli), ips, td = net
    proc, port = serve(srv, lambda p: f"iperf3 -s -p {p}", teardown=td)
    assert all(free_port(srv, lo=port, hi=port + 2) == port + 1 for _ in range(20))
    proc.stop()

def test_nothing_left_behind():
    with pods(2) as ((srv, cli), ips, td):
        tag = srv.netns.rsplit('-', 1)[0]
        iperf3(srv, cli, ips[0], seconds=1, teardown=td)
    assert leftovers(tag) == []

def test_tool_versions():
    assert tool_versions(LocalNode())['iperf3'].startswith('iperf 3')

def test_udp_default_size(net):
    (srv, cli), ips, td = net
    m = iperf3(srv, cli, ips[0], proto='udp', seconds=1, udp_mbit=50, teardown=td)
    assert m['msg_bytes'][0] == 1460 and m['throughput_mbit'][0] > 0

from _ssh_fixtures import ssh_hosts  # noqa: F401,E402  (fixture)

def test_pods_on_a_machine_reached_over_ssh(ssh_hosts):
    "Server and client in namespaces of an SSH node: started, measured and stopped through SSH."
    remote = ssh_hosts(port=2222).ssh_node('far')
    with pods(2) as (ps, ips, td):
        srv, cli = (NetnsNode(p.netns, parent=remote) for p in ps)  # the test 'remote' host shares this file system
        m = iperf3(srv, cli, ips[0], seconds=1, teardown=td)
        assert m['throughput_mbit'][0] > 0 and ns_pids(ps[0]) == ''
