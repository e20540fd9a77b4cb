"""rk-trigger for real: compiled once, every mode on this host and in a pod namespace, inside a runc container,
failures counted by errno, and bad input refused (naming the field) before anything runs."""
import os, pytest
from researchkit.core import ConfigError
from researchkit.testbed.nodes import LocalNode
from researchkit.runtimes.cnode import ContainerNode
from researchkit.workloads.trigger import trigger, build, source_hash, tool_versions, MODES
from _pods_fixtures import pods

L = LocalNode()

def test_build_is_cached_and_static():
    exe = build()
    assert exe.endswith(f"rk-trigger-{source_hash()}") and os.access(exe, os.X_OK)
    mtime = os.stat(exe).st_mtime
    assert build() == exe and os.stat(exe).st_mtime == mtime
    assert 'statically linked' in L.run(['file', exe], check=False).stdout or 'not a dynamic' in L.run(['ldd', exe], check=False).stdout + L.run(['ldd', exe], check=False).stderr

@pytest.mark.parametrize('mode,target', [('getpgid', None), ('open', '/etc/hostname'), ('udpconnect', '127.0.0.1:9'),
                                         ('udpconnect', '[::1]:9')])
@pytest.mark.exclusive   # calls/s x ns/call within 50 % of 1 over two 1-s intervals, > 10 000 calls
def test_modes_on_the_host(mode, target):
    m = trigger(L, mode, target, seconds=2, warmup=0, cpus=0)
    assert m['calls'][0] > 10_000 and m['failed_calls'][0] == 0 and m['intervals'][0] == 2
    assert 0 < m['ns_per_call_min'][0] <= m['ns_per_call'][0] <= m['ns_per_call_max'][0] < 1e6
    assert abs(m['calls_per_s'][0] * m['ns_per_call'][0] / 1e9 - 1) < 0.5

def test_refused_tcp_connect_in_a_pod_namespace():
    with pods(1) as ((pod,), ips, td):
        m = trigger(pod, 'tcpconnect', f"{ips[0]}:1", seconds=1, warmup=0)
    assert m['calls'][0] > 100 and m['errors_ECONNREFUSED'][0] == m['calls'][0] == m['failed_calls'][0]

def test_failures_are_counted_by_errno():
    m = trigger(L, 'open', '/nonexistent/rk-trigger', seconds=1, warmup=0)
    assert m['errors_ENOENT'][0] == m['calls'][0] > 0

@pytest.mark.exclusive   # getpgid's ns/call below open's, measured one after the other
def test_floor_is_below_open():
    g = trigger(L, 'getpgid', seconds=1, warmup=0, cpus=0)
    o = trigger(L, 'open', '/etc/hostname', seconds=1, warmup=0, cpus=0)
    assert g['ns_per_call'][0] < o['ns_per_call'][0]

@pytest.mark.parametrize('mode,target', [('getpgid', None), ('open', '/etc/hostname'), ('udpconnect', '127.0.0.1:9')])
def test_inside_a_runc_container(mode, target):
    box = ContainerNode('runc', name='trig')
    m = trigger(box, mode, target, seconds=1, warmup=0, cpus=0)
    assert m['calls'][0] > 1000 and m['failed_calls'][0] == 0
    assert box.mounts == ContainerNode('runc', name='trig').mounts  # the binary's bind went to a copy, not to `box`

def test_unreachable_inside_a_container_without_network():
    "A fresh runc netns has only lo: a UDP connect to a pod address fails with ENETUNREACH, counted, nothing sent."
    m = trigger(ContainerNode('runc', name='trig'), 'udpconnect', '198.18.0.10:9', seconds=1, warmup=0)
    assert m['errors_ENETUNREACH'][0] == m['calls'][0] > 0

@pytest.mark.parametrize('args,kw,field', [
    (('connect',), {}, 'mode'), ((None,), {}, 'mode'), (('open', None), {}, 'target'), (('open', 'etc/hostname'), {}, 'target'),
    (('open', '/a b'), {}, 'target'), (('open', '/a"b'), {}, 'target'), (('udpconnect', 'localhost:9'), {}, 'target'),
    (('udpconnect', '127.0.0.1'), {}, 'target'), (('tcpconnect', '127.0.0.1:0'), {}, 'target'), (('tcpconnect', '127.0.0.1:70000'), {}, 'target'),
    (('udpconnect', '300.0.0.1:9'), {}, 'target'), (('getpgid', '/etc'), {}, 'target'), (('getpgid',), dict(seconds=0), 'seconds'),
    (('getpgid',), dict(seconds=1.5), 'seconds'), (('getpgid',), dict(seconds=10**4), 'seconds'), (('getpgid',), dict(warmup=-1), 'warmup'),
    (('getpgid',), dict(cpus='0-1'), 'cpus'), (('getpgid',), dict(cpus=True), 'cpus'), (('getpgid',), dict(binary='rk-trigger'), 'binary')])
def test_bad_input_fails_before_running(args, kw, field):
    with pytest.raises(ConfigError) as e: trigger(LocalNode(name='nowhere'), *args, **kw)
    assert e.value.where == field

def test_tool_versions():
    v = tool_versions(L)
    assert source_hash() in v['rk-trigger'] and 'clang' in v['clang']
