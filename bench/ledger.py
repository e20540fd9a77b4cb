"""`make bench` (ledger): rk-load against Caliper 0.6.0 on one Fabric network, the same write load at the same rate (issue 10).

One runc network, the paper's default topology (researchkit.ledger.network: orderer, 2 orgs x 1 peer, 2 CAs, 2 chaincode
containers), every Fabric container on CPU 1; both load generators run in the network's client pod pinned to CPU 0, each in a
cpuacct cgroup of its own, so client CPU is counted the same way for both (Caliper's local workers are not waited-for children,
so getrusage would miss them; ledger.md §3.1). Both do open-loop `put KEY VALUE` with a fresh key and a 100-byte value through
org1's gateway peer: rk-load at `--rate` (researchkit.workloads.fabload.open_loop), Caliper with its fixed-rate controller, the
fabric:2.4 (fabric-gateway) binding and the library's workload module (researchkit.workloads.fabload.caliper). Each repetition runs rk-load, Caliper, and a Caliper launch with
a 1-transaction round (its launch cost, subtracted from the per-transaction CPU), interleaved, `--reps` times. Both get a 3-s
warm-up before the measured window, inside the same command. Latency: rk-load from each transaction's intended send time to its
commit (its rows); Caliper from its TxStatus create to final time (its report has no percentiles, so the workload module writes
them). Caliper is installed by tools/install-caliper (npm ci from tools/caliper/package-lock.json, outside the checkout).
Rate: 100 tx/s by default, the highest rate at which Caliper sent on schedule on one core here (at 150 it fell 10-22 % short,
ledger.md §3.1), and well inside what the network commits (~150 tx/s with Fabric on one core). Run alone.
"""
import os, sys, time, argparse, statistics, subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL = 4.0  # rk-load must be >= 4x cheaper per transaction than Caliper (issue 10)

def med_range(xs): return statistics.median(xs), min(xs), max(xs)
def fmt(xs, f='.2f'):
    m, lo, hi = med_range(xs)
    return f"{m:{f}} [{lo:{f}}–{hi:{f}}]"

def caliper_install() -> str:
    r = subprocess.run([str(ROOT / 'tools/install-caliper')], stdout=subprocess.PIPE, text=True)
    if r.returncode != 0: sys.exit(f"tools/install-caliper failed ({r.returncode})")
    return r.stdout.strip().splitlines()[-1]

def run_caliper(net, td, *, rate, duration, warmup, payload, cpus):
    """One Caliper launch through the library (researchkit.workloads.fabload.caliper): duration None is a 1-tx round with no
    warm-up (its launch cost). Returns Caliper's table, latencies, the cgroup CPU, every tx of all rounds and the wall time."""
    from researchkit.workloads.fabload import caliper
    kw = dict(tx_number=1, warmup=0) if duration is None else dict(duration=duration, warmup=warmup)
    r = caliper(net, rate=rate, payload=payload, cpus=cpus, teardown=td, **kw)
    M, rounds = r.metrics, r.summary['rounds']
    return dict(table=rounds, cpu=M['gen_cgroup_cpu_s'][0], tx=sum(v['succ'] + v['fail'] for v in rounds.values()), wall=M['wall_s'][0],
                p95=M['latency_p95_s'][0] if 'latency_p95_s' in M else float('nan'),
                mean_wl=M['latency_mean_wl_s'][0] if 'latency_mean_wl_s' in M else float('nan'), n_wl=r.summary['latencies'])

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--rate', type=float, default=100)
    ap.add_argument('--seconds', type=float, default=12)
    ap.add_argument('--warmup', type=float, default=3)
    ap.add_argument('--payload', type=int, default=100)
    a = ap.parse_args()
    from researchkit.core import ConfigError
    from researchkit.workloads.fabload import check_rate, check_seconds, check_payload
    check_rate(a.rate); check_seconds('seconds', a.seconds); check_seconds('warmup', a.warmup, zero_ok=True); check_payload(a.payload)
    if a.reps < 1: raise ConfigError('reps', f"expected >= 1, got {a.reps}")
    os.sched_setaffinity(0, {0})
    caliper_install()   # tools/install-caliper: the pinned, locked Caliper the library's driver looks for
    from researchkit.teardown import Teardown, signals_unwind
    from researchkit.ledger.spec import NetworkSpec, Limits
    from researchkit.ledger.network import Network
    from researchkit.workloads.fabload import open_loop
    print(f"# researchkit bench (ledger) — {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs; "
          f"Fabric (runc, paper topology) on CPU 1, generators on CPU 0; {a.rate:g} tx/s, {a.warmup:g}-s warm-up + {a.seconds:g}-s rounds, "
          f"{a.payload}-byte values, {a.reps} interleaved repetitions\n", flush=True)
    rk, cl, ln = [], [], []
    with signals_unwind(), Teardown() as td:   # SIGTERM/SIGHUP unwind like Ctrl-C: the network, cgroups and workspaces go
        t = time.monotonic()
        net = Network(NetworkSpec(limits={'all': Limits(cpuset='1')}), teardown=td).up()
        print(f"network up in {time.monotonic() - t:.1f} s; gateway {net.gateway()['peer']} ({net.gateway()['mspid']})", flush=True)
        for rep in range(a.reps):
            r = open_loop(net, rate=a.rate, duration=a.seconds, warmup=a.warmup, payload=a.payload, cpus='0', teardown=td)
            M = r.metrics
            rk.append(dict(tps=M['throughput'][0], send=M['send_rate'][0], mean=M['latency_mean_s'][0], p95=M['latency_p95_s'][0],
                           ok=M['ok'][0], sent=M['sent'][0], failed=M['failed'][0], cpu=M['gen_cgroup_cpu_s'][0],
                           ms=M['gen_cgroup_cpu_ms_per_tx'][0], ru_ms=M.get('gen_cpu_ms_per_tx', (float('nan'),))[0],
                           tx=round(M['gen_cgroup_cpu_s'][0] * 1000 / M['gen_cgroup_cpu_ms_per_tx'][0]), wall=M['wall_s'][0]))
            x = rk[-1]
            print(f"  rep {rep} rk-load  TPS {x['tps']:.1f}, send {x['send']:.1f}/s, latency mean {x['mean']:.3f} s p95 {x['p95']:.3f} s, "
                  f"{x['ok']:.0f}/{x['sent']:.0f} ok, CPU {x['cpu']:.2f} s for {x['tx']} tx = {x['ms']:.2f} ms/tx (getrusage {x['ru_ms']:.2f}), "
                  f"wall {x['wall']:.1f} s", flush=True)
            c = run_caliper(net, td, rate=a.rate, duration=a.seconds, warmup=a.warmup, payload=a.payload, cpus='0')
            T = c['table']['measure']
            cl.append(dict(tps=T['throughput'], send=T['send_rate'], mean=T['lat_avg'], p95=c['p95'], mean_wl=c['mean_wl'], n_wl=c['n_wl'],
                           ok=T['succ'], failed=T['fail'], cpu=c['cpu'], tx=c['tx'], ms=1e3 * c['cpu'] / c['tx'], wall=c['wall']))
            x = cl[-1]
            print(f"  rep {rep} Caliper  TPS {x['tps']:.1f}, send {x['send']:.1f}/s, latency mean {x['mean']:.3f} s p95 {x['p95']:.3f} s "
                  f"(workload module: mean {x['mean_wl']:.3f} s over {x['n_wl']} tx), {x['ok']}/{x['ok'] + x['failed']} ok, "
                  f"CPU {x['cpu']:.2f} s for {x['tx']} tx = {x['ms']:.2f} ms/tx, wall {x['wall']:.1f} s", flush=True)
            l = run_caliper(net, td, rate=a.rate, duration=None, warmup=0, payload=a.payload, cpus='0')
            ln.append(dict(cpu=l['cpu'], wall=l['wall']))
            x['ms_sub'] = 1e3 * (x['cpu'] - l['cpu']) / (x['tx'] - 1)
            print(f"  rep {rep} Caliper launch (1-tx round): CPU {l['cpu']:.2f} s, wall {l['wall']:.1f} s -> Caliper "
                  f"{x['ms_sub']:.2f} ms/tx launch-subtracted", flush=True)
    print(f"\n{'generator':<28} {'TPS':>20} {'send rate tx/s':>20} {'latency mean s':>22} {'latency p95 s':>22} {'client CPU ms/tx':>22}")
    row = lambda n, rs, k='ms': print(f"{n:<28} {fmt([r['tps'] for r in rs], '.1f'):>20} {fmt([r['send'] for r in rs], '.1f'):>20} "
                                      f"{fmt([r['mean'] for r in rs], '.3f'):>22} {fmt([r['p95'] for r in rs], '.3f'):>22} {fmt([r[k] for r in rs]):>22}")
    row('rk-load (whole command)', rk)
    row('Caliper (whole command)', cl)
    row('Caliper (launch-subtracted)', cl, 'ms_sub')
    print(f"\nCaliper launch alone (1-tx round): CPU {fmt([r['cpu'] for r in ln])} s, wall {fmt([r['wall'] for r in ln], '.1f')} s")
    raw = [c['ms'] / r['ms'] for c, r in zip(cl, rk)]; sub = [c['ms_sub'] / r['ms'] for c, r in zip(cl, rk)]
    print(f"ratio Caliper/rk-load, client CPU per tx (per repetition, median [min–max]): whole command {fmt(raw)}, "
          f"launch-subtracted {fmt(sub)}  (goal ≥ {GOAL:g}: {'met' if min(sub) >= GOAL else 'NOT met'})")
    print(f"ratio Caliper/rk-load: TPS {fmt([c['tps'] / r['tps'] for c, r in zip(cl, rk)], '.3f')}, latency mean "
          f"{fmt([c['mean'] / r['mean'] for c, r in zip(cl, rk)], '.3f')}, p95 {fmt([c['p95'] / r['p95'] for c, r in zip(cl, rk)], '.3f')}")
    print(f"\nclient CPU = cpuacct of each generator's own cgroup (whole process tree, start-up included) / every tx it sent, warm-up "
          f"included;\nCaliper launch-subtracted = (its CPU − the 1-tx launch's CPU) / (tx − 1). TPS and send rate: rk-load from its rows, "
          f"Caliper its own report's formulas;\nlatency: rk-load intended send → commit, Caliper TxStatus create → final (p95 from the workload module).")

if __name__ == '__main__':
    sys.exit(main())
