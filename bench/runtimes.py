"""`make bench` (runtimes): container start-to-ready time and CPU seconds per request, per runtime, as ratios to runc.

1. Start-to-ready: the runtimes-web server container (Apache + PHP from the cached image, one CPU) from `start` until
   an HTTP GET from the client pod succeeds, then delete; every runtime interleaved per repetition.
2. CPU seconds per request in the container's cgroup (runsc: sentry + gofer included), per endpoint, at a rate far
   below every runtime's knee (open loop, vegeta), counted until the container is idle again.

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
    from researchkit.workloads.vegeta import attack
    from researchkit.testbed.nodes import LocalNode
    rows = runtime_rows(LocalNode())
    rts = [n for n, ok, _ in rows if ok and n != 'kata'] + [n for n, ok, _ in rows if ok and n == 'kata']
    print(f"# researchkit bench (runtimes) — {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs; harness + vegeta on CPU 0, server on CPU 1\n")
    for n, ok, why in rows:
        if not ok: print(f"- {n}: not measurable here — {why}")
    rates = {'cpu': 10, 'io': 2}
    P = {'server_cpus': '1', 'client_cpus': '0', 'cpu_quota': None, 'memory_mb': None, 'drain_s': 15}
    start, cpu = {r: [] for r in rts}, {(r, e): [] for r in rts for e in rates}
    with Teardown() as td:
        topo = Topology('bridge', placement='different-host', pods=2, teardown=td).up()
        servers = rw.Servers(td, P, topology=topo, image=rootfs_image())
        for rep in range(a.reps):
            for rt in (rts if rep % 2 == 0 else rts[::-1]):      # alternate the order: drift spreads over all
                servers.start(rt); start[rt].append(servers.start_s[-1])
                for ep, rate in rates.items():
                    inst = servers.inst
                    c0 = inst.cpu_seconds()
                    m = attack(servers.client_pod.node, servers.url(ep), rate=rate, duration=a.seconds, cpus='0')
                    if servers.drain() and m['ok']: cpu[(rt, ep)].append((inst.cpu_seconds() - c0) / m['ok'])
                servers.close()
    print(f"\n## 1. Start-to-ready of the web server container, median [min–max] over {a.reps} interleaved repetitions\n")
    print(f"{'runtime':<10} {'start-to-ready ms':>26} {'ratio to runc':>14}")
    base = statistics.median(start['runc']) if start.get('runc') else None
    for rt in rts:
        m, lo, hi = med_range(start[rt])
        print(f"{rt:<10} {m*1e3:10.0f} [{lo*1e3:6.0f}–{hi*1e3:6.0f}] {m/base if base else float('nan'):14.2f}")
    print(f"\n## 2. Container CPU per request (cgroup cpuacct until idle), median [min–max], {a.seconds} s at "
          f"{rates['cpu']} req/s (CPU endpoint) and {rates['io']} req/s (I/O endpoint)\n")
    print(f"{'runtime':<10} {'endpoint':<9} {'CPU ms/request':>26} {'ratio to runc':>14}")
    for ep in rates:
        b = statistics.median(cpu[('runc', ep)]) if cpu.get(('runc', ep)) else None
        for rt in rts:
            xs = cpu[(rt, ep)]
            if not xs: print(f"{rt:<10} {ep:<9} {'no idle point':>26}"); continue
            m, lo, hi = med_range(xs)
            print(f"{rt:<10} {ep:<9} {m*1e3:10.2f} [{lo*1e3:6.2f}–{hi*1e3:6.2f}] {m/b if b else float('nan'):14.2f}")

if __name__ == '__main__':
    sys.exit(main())
