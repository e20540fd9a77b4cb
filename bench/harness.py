"""`make bench`: what the harness itself costs, as ratios measured in one run.

1. Topology setup and teardown time per data path and placement (every path interleaved per repetition,
   median and range over repetitions, ratio to the plain bridge).
2. Harness overhead of a sweep: wall time not spent in the workload tool / total wall time.

Benchmarks interfere with each other on a 2-core VM: run one at a time. The harness is pinned to CPU 0;
workload client and server are pinned to CPUs 0 and 1 by the study parameters.
"""
import os, sys, time, json, tempfile, pathlib, argparse, statistics

def med_range(xs):
    return statistics.median(xs), min(xs), max(xs)

def bench_topologies(reps:int, datapaths, placements):
    from researchkit.teardown import Teardown
    from researchkit.networks.datapaths import Topology
    from researchkit.testbed.capabilities import probe
    from researchkit.testbed.nodes import LocalNode
    caps = probe(LocalNode())
    t = {}
    for rep in range(reps):
        for pl_ in placements:
            for dp in datapaths:
                with Teardown() as td:
                    t0 = time.perf_counter(); topo = Topology(dp, placement=pl_, pods=2, teardown=td, capabilities=caps).up()
                    up = time.perf_counter() - t0
                    t0 = time.perf_counter(); topo.down(); down = time.perf_counter() - t0
                t.setdefault((dp, pl_), []).append((up, down))
    return t

def bench_sweep(reps:int):
    from researchkit.teardown import Teardown
    from researchkit.results.store import ResultStore
    from researchkit.results.records import provenance
    from researchkit.studies import cni_net
    from researchkit.testbed.nodes import LocalNode
    from researchkit.testbed.capabilities import probe
    P = {'datapaths': ['bridge', 'macvlan'], 'placements': ['different-host'], 'scenarios': ['BMP2BMP'], 'repetitions': reps,
         'throughput': {'protocols': ['tcp'], 'msg_bytes': [1024, 16384], 'seconds': 1.0},
         'latency': {'protocol': 'udp', 'msg_bytes': [64], 'seconds': 1.0},
         'mpi': {'datapaths': ['bridge'], 'pods': 2, 'ranks_per_pod': [1], 'msg_bytes': 1024, 'iterations': 1, 'warmup': 0},
         'vm_msg_bytes': 16384, 'client_cpus': '0', 'server_cpus': '1'}
    node = LocalNode(); caps = probe(node)
    store = ResultStore(pathlib.Path(tempfile.mkdtemp(prefix='rk-bench-')))
    prov = provenance('local', node, profile='bench')
    out = {}
    with Teardown() as td:
        topos = cni_net.Topologies(td, capabilities=caps)
        for exp in ('throughput', 'latency'):
            t0 = time.perf_counter()
            s = cni_net.run_experiment(exp, P, store, topologies=topos, teardown=td, prov=prov, testbed_name='local', capabilities=caps, progress=False)
            wall = time.perf_counter() - t0
            n = len(cni_net.plan(P)[exp]) * reps
            workload = n * P[exp]['seconds']
            out[exp] = dict(points=n, wall_s=wall, measure_s=s.measure_s, workload_s=workload)
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--reps', type=int, default=5)
    a = ap.parse_args()
    os.sched_setaffinity(0, {0})
    from researchkit.studies.cni_net import DATAPATH_NAMES
    from researchkit.networks.datapaths import PLACEMENTS
    print(f"# researchkit bench — {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, harness pinned to CPU 0\n")
    t = bench_topologies(a.reps, DATAPATH_NAMES, PLACEMENTS)
    print(f"## 1. Topology setup / teardown (2 pods), median [min–max] over {a.reps} interleaved repetitions\n")
    print(f"{'data path':<15} {'placement':<15} {'setup ms':>22} {'teardown ms':>22} {'setup / bridge':>15}")
    for pl_ in PLACEMENTS:
        base = statistics.median(u for u, _ in t[('bridge', pl_)])
        for dp in DATAPATH_NAMES:
            ups, downs = [u for u, _ in t[(dp, pl_)]], [d for _, d in t[(dp, pl_)]]
            (mu, lu, hu), (md, ld, hd) = med_range(ups), med_range(downs)
            print(f"{dp:<15} {pl_:<15} {mu*1e3:8.0f} [{lu*1e3:5.0f}–{hu*1e3:5.0f}] {md*1e3:8.0f} [{ld*1e3:5.0f}–{hd*1e3:5.0f}] {mu/base:15.2f}")
    print(f"\n## 2. Harness overhead of a sweep (bridge + macvlan + host baseline, different hosts, {3} repetitions)\n")
    s = bench_sweep(3)
    print(f"{'experiment':<12} {'points':>6} {'wall s':>8} {'in measure s':>13} {'workload s':>11} {'harness share':>14} {'outside measure':>16}")
    for exp, r in s.items():
        print(f"{exp:<12} {r['points']:6d} {r['wall_s']:8.1f} {r['measure_s']:13.1f} {r['workload_s']:11.1f} "
              f"{(r['wall_s']-r['workload_s'])/r['wall_s']:14.1%} {(r['wall_s']-r['measure_s'])/r['wall_s']:16.1%}")
    print("\nharness share = (wall - nominal workload time) / wall: tool start-up, server readiness, topology builds, "
          "parsing, records; outside measure = bookkeeping of the sweep itself (resume check, parquet writes, provenance).")

if __name__ == '__main__':
    sys.exit(main())
