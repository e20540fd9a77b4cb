"""MPI_Alltoall across pod namespaces: real Open MPI, real veth/bridge, real rsh agent."""
import os, subprocess, tempfile, pytest
from researchkit.core import ConfigError, current_run_id
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import CommandTimeout, CommandFailed, LocalNode, NetnsNode
from researchkit.workloads.mpi import mpi_alltoall, agent_script, build, tool_versions, kill_tagged_cmd, parse_alltoall
from _pods_fixtures import pods, leftovers

def tagged() -> str:
    "Processes of any MPI job of this run (they carry RK_MPI_TAG=<run>-mpi-...)."
    return subprocess.run(f"grep -lzF 'RK_MPI_TAG={current_run_id()}-mpi-' /proc/[0-9]*/environ 2>/dev/null",
                          shell=True, capture_output=True, text=True).stdout.strip()

def in_pods(ps) -> str:
    return ''.join(subprocess.run(['ip', 'netns', 'pids', p.netns], capture_output=True, text=True).stdout for p in ps).strip()

def workdirs() -> list[str]:
    return [d for d in os.listdir('/tmp') if d.startswith(f"{current_run_id()}-mpi-")]

def test_4_pods_x_2_ranks():
    with pods(4) as (ps, ips, td):
        m = mpi_alltoall(ps, ips, ranks_per_pod=2, msg_bytes=16384, iterations=5, warmup=1, teardown=td, timeout=120)
        assert m['ranks'][0] == 8 and m['pods'][0] == 4  # every pod ran its ranks under its own host name
        assert 0 < m['alltoall_min_ms'][0] <= m['alltoall_avg_ms'][0] <= m['alltoall_max_ms'][0]
        assert m['osu_avg_ms'][0] > 0 and m['msg_bytes'][0] == 16384 and m['iterations'][0] == 5
        assert in_pods(ps) == '' and tagged() == ''
    assert workdirs() == []

def test_traffic_crosses_the_pod_network():
    "Ranks in different pods talk over eth0 (TCP through the bridge), not shared memory."
    with pods(2) as (ps, ips, td):
        br = NetnsNode(ps[0].netns.rsplit('-', 1)[0] + '-br')
        rx = lambda: int(br.run('cat /sys/class/net/v1/statistics/rx_bytes').stdout)
        before = rx()
        mpi_alltoall(ps, ips, ranks_per_pod=1, msg_bytes=65536, iterations=20, warmup=0, teardown=td, timeout=120)
        assert rx() - before >= 20 * 65536  # pod 1 sent pod 0 at least one block per call

def test_8_pods_x_2_ranks():
    with pods(8) as (ps, ips, td):
        tag = ps[0].netns.rsplit('-', 1)[0]
        m = mpi_alltoall(ps, ips, ranks_per_pod=2, msg_bytes=16384, iterations=10, warmup=2, teardown=td, timeout=180)
        assert m['ranks'][0] == 16 and m['pods'][0] == 8 and m['alltoall_avg_ms'][0] > 0
    assert leftovers(tag) == [] and tagged() == '' and workdirs() == []

def test_timeout_kills_everything():
    with pods(4) as (ps, ips, td):
        with pytest.raises(CommandTimeout):
            mpi_alltoall(ps, ips, ranks_per_pod=2, msg_bytes=16384, iterations=10**6, warmup=0, teardown=td, timeout=3)
        assert in_pods(ps) == '' and tagged() == ''  # mpirun, orted and every rank are gone
    assert workdirs() == []

def test_failed_job_raises_and_cleans_up():
    with pods(2) as (ps, ips, td):
        with pytest.raises(CommandFailed, match='eth9'):
            mpi_alltoall(ps, ips, ranks_per_pod=1, iterations=2, warmup=0, ifname='eth9', teardown=td, timeout=60)
        assert in_pods(ps) == '' and tagged() == ''

def _two(): return [NetnsNode('rk0000-x'), NetnsNode('rk0000-y')], ['198.18.0.1', '198.18.0.2']

@pytest.mark.parametrize('kw,field', [
    (dict(ranks_per_pod=0), 'ranks_per_pod'), (dict(msg_bytes=0), 'msg_bytes'), (dict(msg_bytes=1 << 30), 'msg_bytes'),
    (dict(iterations=0), 'iterations'), (dict(warmup=-1), 'warmup'), (dict(timeout=0), 'timeout'), (dict(ifname=''), 'ifname'),
    (dict(pods=[NetnsNode('rk0000-x')], pod_ips=['198.18.0.1']), 'pods'), (dict(pod_ips=['198.18.0.1']), 'pod_ips'),
    (dict(pod_ips=['198.18.0.1', '198.18.0.1']), 'pod_ips'), (dict(pod_ips=['198.18.0.1', 'a b']), 'pod_ips[1]'),
    (dict(pods=[NetnsNode('rk0000-x'), NetnsNode('rk0000-x')]), 'pods')])
def test_bad_input_fails_before_starting(kw, field):
    ps, ips = _two(); args = dict(pods=ps, pod_ips=ips) | kw
    td = Teardown()
    with pytest.raises(ConfigError) as e: mpi_alltoall(args.pop('pods'), args.pop('pod_ips'), teardown=td, **args)
    assert e.value.where == field and len(td) == 0

def test_agent_enters_the_pod_with_command_intact():
    "The generated agent runs mpirun's command line (one shell parse) in the pod's namespace, under the pod's host name."
    with pods(2) as (ps, ips, td):
        d = tempfile.mkdtemp(prefix=f"{current_run_id()}-agent-")
        td.add('agent dir', lambda: subprocess.run(['rm', '-rf', d]), undo=f"rm -rf {d}")
        agent = f"{d}/agent.sh"
        with open(agent, 'w') as f: f.write(agent_script(ps, ips, f"{current_run_id()}-mpi-t"))
        os.chmod(agent, 0o755)
        r = subprocess.run([agent, ips[1], 'X="a;b c"', ';', 'echo', '"$X"', '$(hostname)', '$RK_MPI_TAG',
                            '$(ip -o -4 addr show eth0 | grep -o "198[.0-9]*")'], capture_output=True, text=True, timeout=20)
        assert r.stdout.split() == ['a;b', 'c', ps[1].name, f"{current_run_id()}-mpi-t", ips[1]], r
        assert subprocess.run([agent, '198.18.9.9', 'true'], capture_output=True).returncode == 255

def test_agent_for_remote_and_plain_nodes():
    "Namespaces on another machine and plain hosts are reached with ssh (from the root namespace when mpirun is in a pod)."
    class Remote(LocalNode): kind = 'ssh'
    far = Remote('h2'); far.host, far.user, far.port = '10.0.0.2', 'root', 2222
    s = agent_script([NetnsNode('rk0000-a'), NetnsNode('rk0000-b', parent=far)], ['198.18.0.1', '198.18.0.2'], 'rk0000-mpi-t')
    line = [l for l in s.splitlines() if l.startswith('  198.18.0.2)')][0]
    assert 'nsenter --net=/proc/1/ns/net ssh' in line and '-p 2222' in line and 'root@10.0.0.2' in line and 'ip netns exec rk0000-b' in line
    s = agent_script([Remote('a'), Remote('b')], ['a', 'b'], 'rk0000-mpi-t')
    assert "b) exec ssh -o BatchMode=yes b 'sh -c" in s and "nsenter" not in s

def test_kill_tagged_only_hits_the_tag():
    tag, other = f"{current_run_id()}-mpi-k1", f"{current_run_id()}-mpi-k2"
    a = subprocess.Popen(['sleep', '30'], env={**os.environ, 'RK_MPI_TAG': tag})
    b = subprocess.Popen(['sleep', '30'], env={**os.environ, 'RK_MPI_TAG': other})
    try:
        subprocess.run(['sh', '-c', kill_tagged_cmd(tag)], timeout=20, check=True)
        assert a.wait(5) == -9 and b.poll() is None
    finally:
        for p in (a, b): p.kill(); p.wait()

def test_build_is_cached():
    exe = build()
    assert build() == exe and os.access(exe, os.X_OK)

def test_parse_refuses_corrupt_data():
    with pytest.raises(Exception, match='wrong data'):
        parse_alltoall('RK_ALLTOALL ranks=4 hosts=2 msg_bytes=8 iterations=1 warmup=0 avg_ms=1 min_ms=1 max_ms=1 osu_avg_ms=1 bad_blocks=3')

def test_tool_versions():
    v = tool_versions(LocalNode())
    assert 'Open MPI' in v['mpirun'] and v['mpicc'] != 'not installed'

from _ssh_fixtures import ssh_hosts  # noqa: F401,E402  (fixture)

def test_pods_on_a_machine_reached_over_ssh(ssh_hosts):
    "The same job with the pods' namespaces on an SSH node: built, launched and cleaned up through SSH."
    remote = ssh_hosts(port=2222).ssh_node('far')
    with pods(2) as (ps, ips, td):
        far = [NetnsNode(p.netns, parent=remote) for p in ps]  # the test 'remote' host shares this file system
        m = mpi_alltoall(far, ips, ranks_per_pod=2, msg_bytes=4096, iterations=3, warmup=1, teardown=td, timeout=120)
        assert m['ranks'][0] == 4 and m['pods'][0] == 2
        assert in_pods(ps) == '' and tagged() == ''
    assert workdirs() == []
