"Shared helpers for the networks tests: TCP checks run inside namespaces, leak checks."
import json, time
from researchkit.testbed.nodes import LocalNode
from researchkit.workloads.iperf import wait_listening

SERVER = ("import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind((sys.argv[1],int(sys.argv[2])));"
          "s.listen(64);s.settimeout(float(sys.argv[3]))\n"
          "try:\n while True:\n  c,_=s.accept();n=0\n  while (d:=c.recv(65536)): n+=len(d)\n  print(n,flush=True)\nexcept OSError: pass")
# argv: port, seconds, addresses. Every address gets its own thread that retries until the deadline: a pair counts as
# unreachable only after `seconds` of failed attempts, not after one 2-s connect (the first flows of a fresh topology
# resolve neighbours and fill bridge/tunnel tables; one lost ARP or SYN costs a 1-s retransmission, two cost the old
# single attempt) — and the unreachable pairs of an isolation test wait once per client, not once per address.
CLIENT = ("import socket,sys,time,threading\nport,end=int(sys.argv[1]),time.monotonic()+float(sys.argv[2])\nok=[]\n"
          "def one(a):\n while True:\n  try:\n"
          "   s=socket.create_connection((a,port),timeout=max(0.2,min(2.0,end-time.monotonic())));s.sendall(b'x'*4096);s.close();ok.append(a);return\n"
          "  except OSError:\n   if time.monotonic()>=end: return\n   time.sleep(0.1)\n"
          "ts=[threading.Thread(target=one,args=(a,)) for a in sys.argv[3:]]\n"
          "for t in ts: t.start()\n"
          "for t in ts: t.join()\n"
          "print(' '.join(ok))")

def tcp_bytes(srv, cli, ip, n=1_000_000, timeout=6, port=7):
    "Bytes that arrive at `srv` (listening on ip:port) when `cli` sends `n` bytes over TCP; 0 if none."
    p = srv.spawn(['python3', '-c', SERVER, ip, str(port), str(timeout)])
    if not wait_listening(srv, port, p, timeout=20): return 0
    cli.run(['timeout', str(timeout), 'python3', '-c',
             f"import socket;s=socket.create_connection(('{ip}',{port}),timeout={timeout});s.sendall(b'x'*{n});s.close()"],
            check=False, timeout=timeout + 5)
    deadline = time.monotonic() + timeout
    while not p.output().strip() and p.alive() and time.monotonic() < deadline: time.sleep(0.05)
    p.stop(grace=0.5)
    out = p.output().split()
    return int(out[0]) if out and out[0].isdigit() else 0

def all_pairs(pods, timeout=8):
    "{(i, j): True/False} — can pod i open a TCP connection to pod j (and send 4 KiB) within `timeout` seconds of retries?"
    srv = [p.node.spawn(['python3', '-c', SERVER, p.ip, '7', '120']) for p in pods]
    res = {}
    try:   # every server listens before the first client connects (8 Pythons starting on a busy 2-core host can take over 0.5 s)
        for p, s in zip(pods, srv): assert wait_listening(p.node, 7, s, timeout=20), s.output()
        for i, p in enumerate(pods):
            others = [q.ip for q in pods if q is not p]
            out = p.node.run(['python3', '-c', CLIENT, '7', str(timeout), *others], timeout=timeout + 30).stdout.split()
            for j, q in enumerate(pods):
                if q is not p: res[(i, j)] = q.ip in out
    finally:
        for s in srv: s.stop(grace=0.2)
    return res

def leftovers(prefix):
    "Namespaces and root-namespace links whose name starts with `prefix`."
    n = LocalNode()
    ns = [l.split()[0] for l in n.run('ip netns list').stdout.splitlines() if l.startswith(prefix)]
    links = [l['ifname'] for l in json.loads(n.run('ip -j link show').stdout) if l['ifname'].startswith(prefix)]
    return ns + links
