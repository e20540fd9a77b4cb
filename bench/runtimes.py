"""`make bench` (runtimes): container start-to-ready time and CPU seconds per request, per runtime, as ratios to runc.

1. Start-to-ready: the runtimes-web server container (Apache + PHP from the cached image, one CPU) from `start` until
   an HTTP GET from the client pod succeeds, then delete; every runtime interleaved per repetition.
2. CPU seconds per request in the container's cgroup (runsc: sentry + gofer included), per endpoint, by the study's
   closed-loop method (`runtimes_web.closed_fn`: wrk with one connection, steady state, counted until the request in
   flight at the end is done, over the requests answered plus that one) — no backlog, whatever a runtime's capacity.

Harness pinned to CPU 0 with vegeta; the server container on CPU 1. Run alone: benchmarks interfere on 2 cores.
"""
import os, sys, time, argparse, statistics

def med_range(xs): return statistics.median(xs), min(xs), max(xs)

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--seconds', type=int, default=5, help='seconds of load per CPU measurement')
    a = ap.parse_args()
    os.sched_setaffinity(0, {0})
    from researchkit.teardown import Teardown
    from researchkit.networks.datapaths import Topology
    from researchkit.runtimes.rootfs import rootfs_image
    from researchkit.runtimes.adapters import runtime_rows
    from researchkit.studies import runtimes_web as rw
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
        servers = rw.Servers(td, P, topology=topo, image=rootfs_image())
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

if __name__ == '__main__':
    sys.exit(main())
