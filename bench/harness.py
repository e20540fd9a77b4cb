"""`make bench`: what the harness itself costs, as ratios measured in one run.

1. Topology setup and teardown time per data path and placement (every path interleaved per repetition,
   median and range over repetitions, ratio to the plain bridge).
2. Harness share of each cni-net sweep kind with the quick profile's settings (bridge + macvlan + the host baseline,
   different hosts): wall time not spent in the nominal workload / wall time (goal <= 10 %).
3. sockperf with and without rk-nopause (its idle pauses skipped): wall time per call and median latency, as ratios.

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
    "Each cni-net sweep kind with the quick profile's settings on a subset of data paths, through the study's own measure functions, on a campaign like any study's."
    from researchkit.studies import cni_net
    from researchkit.studies.campaign import Campaign
    from researchkit.networks.topologies import topologies
    from researchkit.studies.catalog import read_yaml, params_path
    from researchkit.claims import select
    q = read_yaml(params_path('cni-net', 'quick'))
    d = pathlib.Path(tempfile.mkdtemp(prefix='rk-bench-'))
    run = Campaign('cni-net', profile='quick', results_dir=d/'results', figures_dir=d/'figures', progress=False,
                   params=dict(datapaths=['bridge', 'macvlan'], placements=['different-host'], scenarios=['BMP2BMP'], repetitions=reps,
                               mpi={**q['mpi'], 'datapaths': ['bridge', 'macvlan']}))
    P, out = run.P, {}
    try:
        topos = topologies(run.testbed, run.teardown, capabilities=run.capabilities)
        for exp in ('throughput', 'latency', 'mpi'):
            t0 = time.perf_counter()
            s = run.sweep(exp, cni_net.plan(P)[exp], cni_net.measure_fn(exp, P, topos, run.teardown, capabilities=run.capabilities))
            wall = time.perf_counter() - t0
            n = len(cni_net.plan(P)[exp]) * reps
            if exp == 'mpi':   # the collective itself: average all-to-all time x (iterations + warm-up) of every run
                m = select(run.records(), 'alltoall_avg_ms', experiment='mpi')
                workload = float((m['value'] * (P['mpi']['iterations'] + P['mpi']['warmup'])).sum()) / 1000
            else: workload = n * P[exp]['seconds']
            out[exp] = dict(points=n, wall_s=wall, measure_s=s.measure_s, workload_s=workload)
    finally: run.close()
    return out

def sockperf_nopause(reps:int):
    "sockperf pp with and without rk-nopause on loopback, interleaved: wall time per 1-s call and the median latency, per variant."
    from researchkit.teardown import Teardown
    from researchkit.testbed.nodes import LocalNode
    from researchkit.workloads.sockperf import sockperf_pingpong, sockperf_server
    out = {True: [], False: []}
    with Teardown() as td:
        node = LocalNode()
        srv = sockperf_server(node, '127.0.0.1', cpus='1', teardown=td)
        for _ in range(reps):
            for skip in (False, True):
                t0 = time.perf_counter()
                m = sockperf_pingpong(node, node, '127.0.0.1', seconds=1, msg_bytes=64, client_cpus='0', skip_pauses=skip, running=srv, teardown=td)
                out[skip].append((time.perf_counter() - t0, m['latency_p50_us'][0]))
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
    print(f"\n## 2. Where a sweep's wall time goes (cni-net quick settings; bridge + macvlan + host baseline, different hosts, 3 repetitions)\n")
    s = bench_sweep(3)
    print(f"{'sweep':<12} {'points':>6} {'wall s':>8} {'workload s':>11} {'harness share':>14} {'goal':>5} {'bookkeeping':>12} {'in measure, not workload':>25}")
    for exp, r in s.items():
        harness = (r['wall_s'] - r['workload_s']) / r['wall_s']
        book = (r['wall_s'] - r['measure_s']) / r['wall_s']
        print(f"{exp:<12} {r['points']:6d} {r['wall_s']:8.1f} {r['workload_s']:11.1f} {harness:14.1%} {'ok' if harness <= 0.10 else 'over':>5} "
              f"{book:12.1%} {harness - book:25.1%}")
    print(f"\nharness share = (wall - nominal workload) / wall, goal <= 10 %; of which bookkeeping = the sweep's own (resume check, provenance,"
          f"\nrecords) and the rest inside measure(): topology (re)builds, server readiness, tool start-up, warm-up and pauses."
          f"\nMPI's workload is the collectives themselves (mean all-to-all time x calls); each run also pays one mpirun launch.")
    sp = sockperf_nopause(a.reps)
    (w0, l0), (w1, l1) = [[statistics.median(x) for x in zip(*sp[k])] for k in (False, True)]
    print(f"\n## 3. sockperf pp with and without rk-nopause (loopback, 1-s runs, {a.reps} interleaved repetitions, medians)\n")
    print(f"{'variant':<22} {'wall s per call':>16} {'p50 latency µs':>16}")
    for name, k in (('sockperf as it is', False), ('with rk-nopause', True)):
        w, l = zip(*sp[k]); (mw, lw, hw), (ml, ll, hl) = med_range(w), med_range(l)
        print(f"{name:<22} {mw:6.2f} [{lw:.2f}–{hw:.2f}] {ml:7.1f} [{ll:.1f}–{hl:.1f}]")
    print(f"ratio with / without: wall {w1 / w0:.2f}, p50 latency {l1 / l0:.2f} (the shim skips idle sleeps only: latency ratio ~1)")

if __name__ == '__main__':
    sys.exit(main())
