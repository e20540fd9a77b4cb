"""`make bench` (runtimes): container start-to-ready time and CPU seconds per request, per runtime, as ratios to runc.

1. Start-to-ready: the runtimes-web server container (Apache + PHP from the cached image, one CPU) from `start` until
   an HTTP GET from the client pod succeeds, then delete; every runtime interleaved per repetition.
2. CPU seconds per request in the container's cgroup (runsc: sentry + gofer included), per endpoint, by the study's
   closed-loop method (`runtimes_web.closed_fn`: wrk with one connection, steady state, counted until the request in
   flight at the end is done, over the requests answered plus that one) — no backlog, whatever a runtime's capacity.
3. That CPU per request against requests sent one at a time (a Python client on CPU 0, keep-alive, as many requests as a
   window serves, cgroup CPU until the server is idle again), CPU endpoint, per runtime: sequential / closed loop, pooled
   over paired rounds (the order rotating), beside the closed loop against itself (A/A: how far this VM's drift alone moves
   the ratio). It was a test until 2026-11-26: the ratio moved 1.01–1.16 from run to run on this VM, A/A 0.95.

Harness pinned to CPU 0 with vegeta; the server container on CPU 1. Run alone: benchmarks interfere on 2 cores.
"""
import os, sys, time, argparse, statistics

def med_range(xs): return statistics.median(xs), min(xs), max(xs)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--seconds', type=int, default=5, help='seconds of load per CPU measurement')
    ap.add_argument('--rounds', type=int, default=12, help='paired rounds of section 3')
    ap.add_argument('--inflight-rounds', type=int, default=6, help='rounds of section 4, each runtime and endpoint')
    a = ap.parse_args()
    os.sched_setaffinity(0, {0})
    from researchkit.teardown import Teardown
    from researchkit.networks.datapaths import Topology
    from researchkit.runtimes.rootfs import rootfs_image
    from researchkit.runtimes.adapters import runtime_rows
    from researchkit.studies import runtimes_web as rw
    from researchkit.workloads.webserver import WebServers
    from researchkit.core import validate
    from researchkit.testbed.nodes import LocalNode
    rows = runtime_rows(LocalNode())
    rts = [n for n, ok, _ in rows if ok and n != 'kata'] + [n for n, ok, _ in rows if ok and n == 'kata']
    print(f"# researchkit bench (runtimes) — {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs; harness + vegeta on CPU 0, server on CPU 1\n")
    for n, ok, why in rows:
        if not ok: print(f"- {n}: not measurable here — {why}")
    eps = ('cpu', 'io')
    P = validate({'runtimes': ['runc'], 'endpoints': list(eps), 'duration': 1, 'repetitions': 1, 'drain_s': 15,
                  'rates': {e: {'log10_from': 0, 'log10_to': 0} for e in eps},
                  'closed_loop': {'seconds': {e: a.seconds for e in eps}, 'drain_s': 60}}, rw.SCHEMA)
    start, cpu = {r: [] for r in rts}, {(r, e): [] for r in rts for e in eps}
    with Teardown() as td:
        topo = Topology('bridge', placement='different-host', pods=2, teardown=td).up()
        servers = WebServers(td, P, topology=topo, configs=rw.configs(P), image=rootfs_image())
        closed = rw.closed_fn(P, servers)
        for rep in range(a.reps):
            for rt in (rts if rep % 2 == 0 else rts[::-1]):      # alternate the order: drift spreads over all
                servers.start(rt); start[rt].append(servers.start_s[-1])
                for ep in eps:
                    m = closed(dict(runtime=rt, endpoint=ep, connections=1, seconds=a.seconds, config='default'), rep)
                    if 'cpu_s_per_request' in m: cpu[(rt, ep)].append(m['cpu_s_per_request'][0])
                servers.close()
    print(f"\n## 1. Start-to-ready of the web server container, median [min–max] over {a.reps} interleaved repetitions\n")
    print(f"{'runtime':<10} {'start-to-ready ms':>26} {'ratio to runc':>14}")
    base = statistics.median(start['runc']) if start.get('runc') else None
    for rt in rts:
        m, lo, hi = med_range(start[rt])
        print(f"{rt:<10} {m*1e3:10.0f} [{lo*1e3:6.0f}–{hi*1e3:6.0f}] {m/base if base else float('nan'):14.2f}")
    print(f"\n## 2. Container CPU per request (cgroup cpuacct, closed loop: wrk, 1 connection, {a.seconds} s, until the "
          f"request in flight is done), median [min–max]\n")
    print(f"{'runtime':<10} {'endpoint':<9} {'CPU ms/request':>26} {'ratio to runc':>14}")
    for ep in eps:
        b = statistics.median(cpu[('runc', ep)]) if cpu.get(('runc', ep)) else None
        for rt in rts:
            xs = cpu[(rt, ep)]
            if not xs: print(f"{rt:<10} {ep:<9} {'no idle point':>26}"); continue
            m, lo, hi = med_range(xs)
            print(f"{rt:<10} {ep:<9} {m*1e3:10.2f} [{lo*1e3:6.2f}–{hi*1e3:6.2f}] {m/b if b else float('nan'):14.2f}")

    print(f"\n## 3. Requests sent one at a time vs the closed loop, CPU endpoint, {a.rounds} paired rounds (order rotating)\n")
    print(f"{'runtime':<10} {'sequential/closed pooled':>25} {'per round median [min–max]':>30} {'A/A closed/closed':>18}")
    for rt in [r for r in ('runc', 'runsc') if r in rts]:
        seq, aa = sequential_rounds(rt, a.rounds)
        pooled = lambda rs: (sum(r[2] for r in rs) / sum(r[3] for r in rs)) / (sum(r[0] for r in rs) / sum(r[1] for r in rs))
        m, lo, hi = med_range([(r[2] / r[3]) / (r[0] / r[1]) for r in seq])
        print(f"{rt:<10} {pooled(seq):25.3f} {m:12.3f} [{lo:.2f}–{hi:.2f}]      {pooled(aa):18.3f}")

    print(f"\n## 4. CPU per request with 32 requests in flight (while they grow Apache's pool, and on the pool they grew) and with 4 "
          f"on the grown pool, over 4 in flight on the pool as started; MaxSpareServers as the study sets it (the pool does not "
          f"shrink); {a.inflight_rounds} rounds, geometric mean [min–max]\n")
    print(f"{'runtime':<10} {'endpoint':<9} {'c=32 growing / c=4':>24} {'c=32 grown / c=4':>24} {'c=4 grown / c=4 fresh':>26}")
    for rt in [r for r in ('runc', 'runsc') if r in rts]:
        for ep in eps:
            rs = inflight_rounds(rt, ep, a.inflight_rounds, a.seconds)
            print(f"{rt:<10} {ep:<9} {geo_range([b / f for f, b, s, g in rs]):>24} {geo_range([s / f for f, b, s, g in rs]):>24} "
                  f"{geo_range([g / f for f, b, s, g in rs]):>26}")

def geo_range(xs):
    import math
    return f"{math.exp(sum(map(math.log, xs)) / len(xs)):.3f} [{min(xs):.2f}–{max(xs):.2f}]"

def inflight_rounds(rt:str, ep:str, rounds:int, seconds:int):
    "Rounds of CPU per request (fresh c=4, c=32 growing the pool, c=32 on the pool it grew, c=4 on that pool), each round on a fresh server after a warm-up window."
    from researchkit.teardown import Teardown
    from researchkit.networks.datapaths import Topology
    from researchkit.runtimes.rootfs import rootfs_image
    from researchkit.studies import runtimes_web as rw
    from researchkit.workloads.webserver import WebServers
    from researchkit.core import validate
    P = validate({'runtimes': [rt], 'endpoints': [ep], 'duration': 1, 'repetitions': 1, 'drain_s': 15,
                  'rates': {e: {'log10_from': 0, 'log10_to': 0} for e in ('cpu', 'io')}, 'closed_loop': {'drain_s': 60}}, rw.SCHEMA)
    out = []
    with Teardown() as td:
        topo = Topology('bridge', placement='different-host', pods=2, teardown=td).up()
        servers = WebServers(td, P, topology=topo, configs=rw.configs(P), image=rootfs_image())
        closed = rw.closed_fn(P, servers)
        cpu = lambda c: closed(dict(runtime=rt, endpoint=ep, connections=c, seconds=seconds, config='default'), 0)['cpu_s_per_request'][0]
        for _ in range(rounds):
            servers.close(); servers.start(rt)
            cpu(4)   # warm-up: a fresh server's first requests
            out.append((cpu(4), cpu(32), cpu(32), cpu(4)))
        servers.close()
    return out

_SEQ_PY = r'''import http.client, sys
host, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = http.client.HTTPConnection(host, 80, timeout=120)
ok = 0
for _ in range(n):
    c.request('GET', path); r = c.getresponse(); r.read(); ok += r.status == 200
print(ok)
'''

def sequential_rounds(rt:str, rounds:int):
    "Rounds of (closed CPU, closed requests, other CPU, other requests): sequential vs closed, and closed vs closed (A/A)."
    import math, shlex
    from researchkit.teardown import Teardown
    from researchkit.networks.datapaths import Topology
    from researchkit.runtimes.rootfs import rootfs_image
    from researchkit.studies import runtimes_web as rw
    from researchkit.workloads.webserver import WebServers
    from researchkit.core import validate
    P = validate({'runtimes': [rt], 'endpoints': ['cpu'], 'duration': 1, 'repetitions': 1, 'drain_s': 5,
                  'rates': {'cpu': {'log10_from': 1, 'log10_to': 1}, 'io': {'log10_from': 0, 'log10_to': 0}}}, rw.SCHEMA)
    with Teardown() as td:
        topo = Topology('bridge', placement='different-host', pods=2, teardown=td).up()
        servers = WebServers(td, P, topology=topo, configs=rw.configs(P), image=rootfs_image())
        closed = rw.closed_fn(P, servers)
        pt = lambda s: dict(runtime=rt, endpoint='cpu', connections=1, seconds=s, config='default')
        rate = closed(pt(3), 0)['requests'][0] / 3
        seconds = min(15, max(2, math.ceil(8 / rate))) if rate > 0 else 15
        n = max(3, round(rate * seconds))
        path = servers.url('cpu').split(servers.server_pod.ip, 1)[1]
        def window():
            m = closed(pt(seconds), 0); k = m['requests'][0] + 1
            return m['cpu_s_per_request'][0] * k, k
        def sequential():
            inst = servers.inst
            assert servers.drain(within=30)
            c0 = inst.cpu_seconds()
            r = servers.client_pod.node.run(f"taskset -c 0 python3 -c {shlex.quote(_SEQ_PY)} {servers.server_pod.ip} {path} {n}", timeout=300)
            assert int(r.stdout.split()[-1]) == n
            assert servers.drain(within=30)
            return inst.cpu_seconds() - c0, n
        fns = [('closed', window), ('seq', sequential), ('closed2', window)]
        seq, aa = [], []
        for i in range(rounds):
            got = dict((k, f()) for k, f in fns[i % 3:] + fns[:i % 3])
            seq.append((*got['closed'], *got['seq'])); aa.append((*got['closed'], *got['closed2']))
    return seq, aa

if __name__ == '__main__':
    sys.exit(main())
