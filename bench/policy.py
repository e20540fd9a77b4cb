"""`make bench` (policy): ns per hooked call under each policy mechanism, as ratios to the same call with no program, from one run.

rk-trigger (a bench_trigger-style native loop) inside a runc container pinned to CPU 1: `open` (open+close of an allowed
file) for the file mechanisms and `udpconnect` (a UDP connect() that runs the connect hooks and sends nothing) for the
address mechanisms, at 1 and 100 000 blocked entries. Every variant is interleaved per repetition; the policy is proven to
enforce in each container before its calls are timed (`policy.mechanisms.check_enforcement`). Run alone: benchmarks
interfere on 2 cores.
"""
import os, sys, time, argparse, statistics

def med_range(xs): return statistics.median(xs), min(xs), max(xs)

CASES = [('open', 'none', 0), ('open', 'tp-openat', 1), ('open', 'tp-openat', 100000), ('open', 'landlock', 1), ('open', 'landlock', 100000),
         ('udpconnect', 'none', 0), ('udpconnect', 'cgroup-connect', 1), ('udpconnect', 'cgroup-connect', 100000)]

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--reps', type=int, default=5)
    ap.add_argument('--seconds', type=int, default=2, help='measured 1-s intervals per run')
    a = ap.parse_args()
    os.sched_setaffinity(0, {0})
    from researchkit.teardown import Teardown
    from researchkit.runtimes.cnode import ContainerNode
    from researchkit.runtimes.container import Mount
    from researchkit.policy.mechanisms import MECHANISMS, Policy, check_enforcement
    from researchkit.workloads.trigger import trigger
    from researchkit.studies.lsm_bpf import policy_rules, ALLOWED_FILE, FILLER_DIR
    import tempfile, pathlib, shutil
    print(f"# researchkit bench (policy) — {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs; harness on CPU 0, rk-trigger in runc on CPU 1\n")
    avail = {m: MECHANISMS[m].available() for m in MECHANISMS}
    for m, (ok, why) in avail.items():
        if not ok: print(f"- {m}: not measurable here: {why}")
    cases = [c for c in CASES if c[1] == 'none' or avail[c[1]][0]]
    ns = {c: [] for c in cases}
    blocked = tempfile.mkdtemp(prefix='rk-bench-blocked-')
    pathlib.Path(blocked, 'secret').write_text('blocked\n')
    try:
        for rep in range(a.reps):
            for mode, mech, rules in cases:
                with Teardown() as td:
                    pol = None if mech == 'none' else Policy(policy_rules(rules), [mech], teardown=td)
                    def on_start(inst, pol=pol):
                        if pol is not None: pol.prepare(inst); check_enforcement(pol, inst, allowed_file=ALLOWED_FILE)
                    node = ContainerNode('runc', cpuset='1', mounts=[Mount(blocked, FILLER_DIR, readonly=True)], on_start=on_start,
                                         wrap=None if pol is None else pol.wrap, name='bench')
                    m = trigger(node, mode, ALLOWED_FILE if mode == 'open' else '127.0.0.1:9', seconds=a.seconds, warmup=1)
                    ns[(mode, mech, rules)].append(m['ns_per_call'][0])
    finally:
        shutil.rmtree(blocked, ignore_errors=True)
    print(f"{'call':<11} {'mechanism':<15} {'rules':>7} {'ns/call median [min–max]':>28} {'ratio to none':>14} {'added ns':>9}")
    for mode, mech, rules in cases:
        m, lo, hi = med_range(ns[(mode, mech, rules)])
        base = statistics.median(ns[(mode, 'none', 0)])
        print(f"{mode:<11} {mech:<15} {rules:>7} {m:12.0f} [{lo:6.0f}–{hi:6.0f}] {m / base:14.3f} {m - base:9.0f}")
    print(f"\n{a.reps} interleaved repetitions of {a.seconds} s (+1 s warm-up) each; ns/call = median of the 1-s intervals of a run;"
          f"\nratio and added ns against the median of the same call with no program.")

if __name__ == '__main__':
    sys.exit(main())
