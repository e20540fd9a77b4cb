"""sockperf ping-pong between pod namespaces: real sockperf, real veth/bridge."""
import subprocess, pytest
from researchkit.core import ConfigError
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import CommandFailed, LocalNode
from researchkit.workloads.iperf import ServerFailed
from researchkit.workloads.sockperf import sockperf_pingpong, tool_versions, parse_sockperf, SOCKPERF_MAX_MSG
from _pods_fixtures import pods, leftovers

def ns_pids(node) -> str:
    return subprocess.run(['ip', 'netns', 'pids', node.netns], capture_output=True, text=True).stdout.strip()

@pytest.fixture
def net():
    with pods(2) as p: yield p

@pytest.mark.parametrize('tcp', [False, True])
def test_pingpong(net, tcp):
    (srv, cli), ips, td = net
    m = sockperf_pingpong(srv, cli, ips[0], seconds=1, msg_bytes=64, tcp=tcp, server_cpus='0', client_cpus='1', teardown=td)
    assert 0 < m['latency_min_us'][0] <= m['latency_p50_us'][0] <= m['latency_p99_us'][0] <= m['latency_p999_us'][0]
    assert m['latency_avg_us'][0] > 0 and m['observations'][0] > 0 and 'RTT/2' in m['latency_p50_us'][1]
    assert m['pause_skipped_s'][0] == pytest.approx(2.0)  # rk-nopause skipped the one sleep(2), nothing else
    assert ns_pids(srv) == ''  # server stopped

def test_pingpong_without_the_shim(net):
    "sockperf as it is: the same metrics, nothing skipped (the reference `make bench` compares against)."
    (srv, cli), ips, td = net
    m = sockperf_pingpong(srv, cli, ips[0], seconds=1, msg_bytes=64, skip_pauses=False, teardown=td)
    assert m['pause_skipped_s'][0] == 0 and m['observations'][0] > 0 and m['latency_p50_us'][0] > 0

@pytest.mark.exclusive   # the skipped sleep(2) returns within 50 ms of wall time
def test_nopause_only_skips_the_idle_pauses(tmp_path):
    "The shim returns at once from the first sleep(2) only; later ones and usleep (sockperf's TSC calibration) still sleep."
    import time
    from researchkit.workloads.sockperf import build_nopause
    so = build_nopause()
    prog = tmp_path/'p.py'
    prog.write_text("import ctypes, time\nlibc = ctypes.CDLL(None)\nfor f, a in (('sleep', 2), ('usleep', 100000), ('sleep', 2), ('usleep', 50000)):\n"
                    "    t = time.monotonic(); getattr(libc, f)(a); print(f, a, time.monotonic() - t)\n")
    r = subprocess.run(['env', f'LD_PRELOAD={so}', 'python3', str(prog)], capture_output=True, text=True, timeout=30)
    took = [float(l.split()[2]) for l in r.stdout.splitlines()]
    assert took[0] < 0.05 and took[1] >= 0.1 and took[2] >= 2.0 and took[3] >= 0.05  # skipped, slept, slept, slept
    assert 'RK_NOPAUSE skipped_s=2.000' in r.stderr

def test_oversize_refused_or_clamped(net):
    (srv, cli), ips, td = net
    n = len(td)
    with pytest.raises(ConfigError) as e: sockperf_pingpong(srv, cli, ips[0], msg_bytes=65536, teardown=td)
    assert e.value.where == 'msg_bytes' and '65507' in str(e.value) and len(td) == n  # nothing started
    m = sockperf_pingpong(srv, cli, ips[0], msg_bytes=65536, clamp=True, seconds=1, teardown=td)
    assert m['msg_bytes'][0] == SOCKPERF_MAX_MSG and m['latency_p50_us'][0] > 0

@pytest.mark.parametrize('kw,field', [(dict(msg_bytes=13), 'msg_bytes'), (dict(msg_bytes=70000), 'msg_bytes'),
                                      (dict(seconds=0), 'seconds'), (dict(seconds=1.5), 'seconds'), (dict(port=0), 'port'),
                                      (dict(tcp='yes'), 'tcp'), (dict(skip_pauses=1), 'skip_pauses')])
def test_bad_input(kw, field):
    td = Teardown()
    with pytest.raises(ConfigError) as e: sockperf_pingpong(LocalNode(), LocalNode(), '198.18.0.10', teardown=td, **kw)
    assert e.value.where == field and len(td) == 0

def test_server_address_not_on_server(net):
    (srv, cli), ips, td = net
    with pytest.raises(ServerFailed, match='bind'): sockperf_pingpong(srv, cli, ips[1], tcp=True, seconds=1, teardown=td)
    assert ns_pids(srv) == ''

def test_parse_refuses_output_without_summary():
    with pytest.raises(Exception, match='no latency summary'): parse_sockperf("sockperf: '-t' Invalid duration: 0.5\nUsage: ...")

def test_nothing_left_behind():
    with pods(2) as ((srv, cli), ips, td):
        tag = srv.netns.rsplit('-', 1)[0]
        sockperf_pingpong(srv, cli, ips[0], seconds=1, teardown=td)
    assert leftovers(tag) == []

def test_tool_versions():
    assert 'version' in tool_versions(LocalNode())['sockperf']

from _ssh_fixtures import ssh_hosts  # noqa: F401,E402  (fixture)

def test_pods_on_a_machine_reached_over_ssh(ssh_hosts):
    "Server and client in namespaces of an SSH node: started, measured and stopped through SSH."
    from researchkit.testbed.nodes import NetnsNode
    remote = ssh_hosts(port=2222).ssh_node('far')
    with pods(2) as (ps, ips, td):
        srv, cli = (NetnsNode(p.netns, parent=remote) for p in ps)
        m = sockperf_pingpong(srv, cli, ips[0], seconds=1, teardown=td)
        assert m['latency_p50_us'][0] > 0 and ns_pids(ps[0]) == ''
