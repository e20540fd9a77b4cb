"""`make bench` (ledger): rk-load against Caliper 0.6.0 on one Fabric network, the same write load at the same rate (issue 10).

One runc network, the paper's default topology (researchkit.ledger.network: orderer, 2 orgs x 1 peer, 2 CAs, 2 chaincode
containers), every Fabric container on CPU 1; both load generators run in the network's client pod pinned to CPU 0, each in a
cpuacct cgroup of its own, so client CPU is counted the same way for both (Caliper's local workers are not waited-for children,
so getrusage would miss them; ledger.md §3.1). Both do open-loop `put KEY VALUE` with a fresh key and a 100-byte value through
org1's gateway peer: rk-load at `--rate` (researchkit.workloads.fabload.open_loop), Caliper with its fixed-rate controller, the
fabric:2.4 (fabric-gateway) binding and tools/caliper/workload.js. Each repetition runs rk-load, Caliper, and a Caliper launch with
a 1-transaction round (its launch cost, subtracted from the per-transaction CPU), interleaved, `--reps` times. Both get a 3-s
warm-up before the measured window, inside the same command. Latency: rk-load from each transaction's intended send time to its
commit (its rows); Caliper from its TxStatus create to final time (its report has no percentiles, so the workload module writes
them). Caliper is installed by tools/install-caliper (npm ci from tools/caliper/package-lock.json, outside the checkout).
Rate: 100 tx/s by default, the highest rate at which Caliper sent on schedule on one core here (at 150 it fell 10-22 % short,
ledger.md §3.1), and well inside what the network commits (~150 tx/s with Fabric on one core). Run alone.
"""
import os, sys, json, time, shlex, shutil, argparse, statistics, subprocess, tempfile, secrets, re
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

def run_caliper(net, cal, td, *, rate, duration, warmup, payload, cpus, label):
    """One `caliper launch manager` in the client pod, in a cpuacct cgroup of its own. duration None: a single 1-tx round
    (the launch cost). Returns Caliper's table, latencies from workload.js, the cgroup CPU and the wall time."""
    from researchkit.core import current_run_id
    from researchkit.teardown import Teardown
    from researchkit.runtimes.adapters import cgroup_undo
    from researchkit.workloads.fabload import parse_caliper_table, CGROUP_CPUACCT
    gw, node = net.gateway(), net.client
    host, q = node.parent, shlex.quote
    tag = f"{current_run_id()}-calbench-{secrets.token_hex(3)}"
    cg = f"{CGROUP_CPUACCT}/researchkit/{tag}"
    with Teardown(td.ledger) as rtd:
        ws = f"{tempfile.gettempdir()}/{tag}"   # Caliper's workspace: configs with key paths, workload.js, its latencies
        rtd.add(f"caliper workspace {ws}", lambda: shutil.rmtree(ws, ignore_errors=True), undo=f"rm -rf {q(ws)}", node=host.ledger_node)
        os.mkdir(ws, 0o700)
        rtd.add(f"cgroup {tag}", lambda: host.run(cgroup_undo(tag), check=False, timeout=60), undo=cgroup_undo(tag), node=host.ledger_node)
        # network config from the running Network's gateway info: TLS CA, MSP dir (cert + key), peer address, channel, chaincode
        key = sorted(Path(gw['msp'], 'keystore').iterdir())[0]
        ccp = {'name': 'rk', 'version': '1.0.0', 'client': {'organization': gw['mspid']},
               'organizations': {gw['mspid']: {'mspid': gw['mspid'], 'peers': ['gw-peer']}},
               'peers': {'gw-peer': {'url': f"grpcs://{gw['peer']}", 'tlsCACerts': {'path': gw['tlsca']}}}}
        netcfg = {'name': 'rk', 'version': '2.0.0', 'caliper': {'blockchain': 'fabric'},
                  'channels': [{'channelName': gw['channel'], 'contracts': [{'id': gw['chaincode']}]}],
                  'organizations': [{'mspid': gw['mspid'], 'identities': {'certificates': [{'name': 'user1',
                                     'clientPrivateKey': {'path': str(key)}, 'clientSignedCert': {'path': f"{gw['msp']}/signcerts/cert.pem"}}]},
                                     'connectionProfile': {'path': f"{ws}/ccp.json", 'discover': False}}]}
        shutil.copy(ROOT / 'tools/caliper/workload.js', f"{ws}/workload.js")
        args = {'cc': gw['chaincode'], 'payload': payload, 'out': ws}
        rnd = lambda lbl, **n: {'label': lbl, **n, 'rateControl': {'type': 'fixed-rate', 'opts': {'tps': rate}},
                                'workload': {'module': f"{ws}/workload.js", 'arguments': args}}
        rounds = [rnd('launch', txNumber=1)] if duration is None else [rnd('warmup', txDuration=warmup)] * (warmup > 0) + [rnd('measure', txDuration=duration)]
        bench = {'test': {'name': 'rk', 'workers': {'number': 1}, 'rounds': rounds}}
        for f, d in (('ccp.json', ccp), ('network.json', netcfg), ('bench.json', bench)): Path(ws, f).write_text(json.dumps(d))
        cmd = ['ip', 'netns', 'exec', node.netns, 'taskset', '-c', cpus, f"{cal}/node_modules/.bin/caliper", 'launch', 'manager',
               '--caliper-workspace', ws, '--caliper-networkconfig', f"{ws}/network.json", '--caliper-benchconfig', f"{ws}/bench.json",
               '--caliper-flow-only-test', '--caliper-fabric-gateway-enabled', '--caliper-report-path', f"{ws}/report.html",
               '--caliper-logging-target-file-enabled', 'false']
        inner = 'echo $$ > "$0/cgroup.procs" && exec ' + shlex.join(cmd)
        line = (f"unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY all_proxy ALL_PROXY; cd {q(ws)} && mkdir -p {cg} && "
                f"sh -c {q(inner)} {cg}; rc=$?; echo \"@@cgroup_cpu_ns $(cat {cg}/cpuacct.usage)\"; exit $rc")
        r = host.run(line, timeout=(duration or 0) + warmup + 120, check=False)
        table = parse_caliper_table(r.stdout)
        m = re.search(r'^@@cgroup_cpu_ns (\d+)$', r.stdout, re.M)
        want = 'launch' if duration is None else 'measure'
        if r.rc != 0 or want not in table or not m:
            sys.stderr.write(r.stdout[-4000:] + r.stderr[-2000:])
            raise RuntimeError(f"{label}: caliper exited {r.rc} without a '{want}' round or cgroup reading")
        lat = {}
        for f in Path(ws).glob('lat-*.txt'):
            rd = int(f.name.split('-')[1])
            lat.setdefault(rd, []).extend(tuple(int(x) for x in l.split()) for l in f.read_text().split('\n') if l.strip())
    return dict(table=table, lat=lat, cpu=int(m[1]) / 1e9, wall=r.seconds)

def quantile(xs, p):
    xs = sorted(xs); k = (len(xs) - 1) * p; i = int(k)
    return xs[i] if i + 1 >= len(xs) else xs[i] + (xs[i + 1] - xs[i]) * (k - i)

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
    cal = caliper_install()
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
            c = run_caliper(net, cal, td, rate=a.rate, duration=a.seconds, warmup=a.warmup, payload=a.payload, cpus='0', label=f'rep {rep}')
            T = c['table']['measure']
            lats = sorted(f - s for rd in c['lat'] for s, f, ok in c['lat'][rd] if ok and rd == max(c['lat'])) if c['lat'] else []
            all_tx = sum(v['succ'] + v['fail'] for v in c['table'].values())
            cl.append(dict(tps=T['throughput'], send=T['send_rate'], mean=T['lat_avg'], p95=quantile(lats, .95) / 1e3 if lats else float('nan'),
                           mean_wl=statistics.mean(lats) / 1e3 if lats else float('nan'), n_wl=len(lats),
                           ok=T['succ'], failed=T['fail'], cpu=c['cpu'], tx=all_tx, ms=1e3 * c['cpu'] / all_tx, wall=c['wall']))
            x = cl[-1]
            print(f"  rep {rep} Caliper  TPS {x['tps']:.1f}, send {x['send']:.1f}/s, latency mean {x['mean']:.3f} s p95 {x['p95']:.3f} s "
                  f"(workload.js: mean {x['mean_wl']:.3f} s over {x['n_wl']} tx), {x['ok']}/{x['ok'] + x['failed']} ok, "
                  f"CPU {x['cpu']:.2f} s for {x['tx']} tx = {x['ms']:.2f} ms/tx, wall {x['wall']:.1f} s", flush=True)
            l = run_caliper(net, cal, td, rate=a.rate, duration=None, warmup=0, payload=a.payload, cpus='0', label=f'rep {rep} launch')
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
          f"Caliper its own report's formulas;\nlatency: rk-load intended send → commit, Caliper TxStatus create → final (p95 from workload.js).")

if __name__ == '__main__':
    sys.exit(main())
