"""wrk against a real HTTP/1.1 server in a pod namespace: keep-alive vs Connection: close (connects counted by the
server and by the client netns), pinning, errors when nobody listens or the server answers 404, inside a runc
container in the client pod, and bad input refused before anything starts."""
import shlex, pytest
from researchkit.core import ConfigError, current_run_id
from researchkit.testbed.nodes import LocalNode, CommandFailed
from researchkit.runtimes.cnode import ContainerNode
from researchkit.workloads.iperf import serve
from researchkit.workloads.webapp import http_get
from researchkit.workloads.wrk import wrk, tool_versions, UNITS
from _pods_fixtures import pods, leftovers

COUNTING_SERVER = r'''import http.server, sys, threading
accepted = 0; lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def setup(self):
        global accepted
        with lock: accepted += 1
        super().setup()
    def do_GET(self):
        if self.path == '/missing': self.send_response(404); self.send_header('Content-Length', '0'); self.end_headers(); return
        body = (str(accepted) if self.path == '/count' else 'hello').encode() + b'\n'
        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()
'''

@pytest.fixture(scope='module')
def net():
    "A server pod running the counting server and a client pod."
    with pods(2) as ((srv, cli), ips, td):
        proc, port = serve(srv, lambda p: f"/usr/bin/python3 -c {shlex.quote(COUNTING_SERVER)} {ips[0]} {p}", teardown=td, label='counting server')
        yield srv, cli, f"http://{ips[0]}:{port}/"

def accepted(cli, url) -> int:
    "Connections the server accepted so far (this probe's own one included)."
    code, body, _ = http_get(cli, url + 'count')
    assert code == 200, body
    return int(body)

@pytest.mark.exclusive   # > 50 requests/s in 1 s and wrk's duration 0.9-1.5 s
def test_keepalive_connects_once_per_connection(net):
    srv, cli, url = net
    n0 = accepted(cli, url)
    m = wrk(cli, url, threads=2, connections=6, seconds=1, cpus=0)
    assert accepted(cli, url) - n0 - 1 == 6 + 1 == m['tcp_active_opens'][0]  # + wrk's reachability check in main()
    assert m['requests'][0] > 50 and m['requests_per_s'][0] > 50 and m['transfer_per_s'][0] > 0
    assert m['errors_connect'][0] == m['errors_read'][0] == m['errors_timeout'][0] == m['non_2xx_3xx'][0] == 0
    assert 0 < m['latency_min_us'][0] <= m['latency_p50_us'][0] <= m['latency_p90_us'][0] <= m['latency_p99_us'][0] <= m['latency_max_us'][0]
    assert m['latency_mean_us'][0] > 0 and m['latency_stdev_us'][0] >= 0 and 0.9 < m['duration_s'][0] < 1.5
    assert set(m) <= set(UNITS)

def test_connection_close_reconnects_per_request(net):
    srv, cli, url = net
    n0 = accepted(cli, url)
    m = wrk(cli, url, threads=1, connections=4, seconds=1, close=True, cpus=0)
    server_side = accepted(cli, url) - n0 - 1
    assert m['requests'][0] > 20
    # one connect per completed request, plus the (at most `connections`) requests still in flight when wrk stopped, plus wrk's check
    assert m['requests'][0] <= m['tcp_active_opens'][0] == server_side <= m['requests'][0] + 4 + 1

def test_errors_are_counted(net):
    srv, cli, url = net
    m = wrk(cli, url + 'missing', threads=1, connections=2, seconds=1)
    assert m['non_2xx_3xx'][0] == m['requests'][0] > 0
    host = url.split('//')[1].split(':')[0]
    with pytest.raises(CommandFailed) as e: wrk(cli, f"http://{host}:1/", threads=1, connections=2, seconds=1)  # nobody listens
    assert 'unable to connect' in str(e.value)

def test_inside_a_runc_container_in_the_client_pod(net):
    srv, cli, url = net
    box = ContainerNode('runc', name='wrk', netns=cli.netns)
    n0 = accepted(cli, url)
    m = wrk(box, url, threads=1, connections=3, seconds=1)
    assert m['requests'][0] > 20 and m['tcp_active_opens'][0] == 3 + 1 == accepted(cli, url) - n0 - 1

@pytest.mark.parametrize('kw,field', [
    (dict(threads=0), 'threads'), (dict(threads=65), 'threads'), (dict(threads=1.5), 'threads'), (dict(connections=0), 'connections'),
    (dict(threads=4, connections=2), 'connections'), (dict(connections=10**6), 'connections'), (dict(seconds=0), 'seconds'),
    (dict(seconds=2.5), 'seconds'), (dict(url='198.18.0.10/'), 'url'), (dict(url='http://a b/'), 'url'), (dict(url=None), 'url'),
    (dict(timeout=0), 'timeout'), (dict(timeout=0.5), 'timeout'), (dict(timeout=float('nan')), 'timeout'), (dict(close=1), 'close'), (dict(cpus='one'), 'cpus'),
    (dict(margin=-1), 'margin')])
def test_bad_input_fails_before_running(kw, field):
    args = dict(url='http://198.18.0.10/') | kw
    with pytest.raises(ConfigError) as e: wrk(LocalNode(name='nowhere'), args.pop('url'), **args)
    assert e.value.where == field

def test_nothing_left_behind():
    with pods(2) as ((srv, cli), ips, td):
        tag = srv.netns.rsplit('-', 1)[0]
        proc, port = serve(srv, lambda p: f"/usr/bin/python3 -c {shlex.quote(COUNTING_SERVER)} {ips[0]} {p}", teardown=td)
        wrk(cli, f"http://{ips[0]}:{port}/", threads=1, connections=1, seconds=1)
    assert leftovers(tag) == [] and not LocalNode().run(f"ls /tmp/rk-wrk-{current_run_id()}-* 2>/dev/null", check=False).stdout

def test_tool_versions():
    assert tool_versions(LocalNode())['wrk'].startswith('wrk ')
