"""`make bench` (erasure): the chosen Reed-Solomon coder against raw ISA-L, per core, in one run (issue 12; goal ≥ 0.5× raw ISA-L).

The chosen coder is rk-ec (github.com/klauspost/reedsolomon, pinned in tools/go/rk-ec/go.sum), which researchkit's E-Fabric
agents run inside the peers' containers. The reference is raw ISA-L: Debian's libisal2 driven by bench/isal_ec.c, compiled
here with the system clang. Both encode a 64-MiB buffer RS(n, k) on one core (GOMAXPROCS=1 / one thread, pinned to one CPU)
and decode after losing the first n − k data shards (ISA-L's decode includes inverting the matrix and building its tables;
reedsolomon's includes the same, through its inversion cache after the first time). GB/s counts file bytes per second. The
two are interleaved `--reps` times (each a median over `--inner` repetitions) and reported as median [min–max] with the ratio;
every record carries the library and SIMD level it used: the best this CPU offers, and `--levels` lower ones for comparison.
Run alone: benchmarks interfere on 2 cores.
"""
import os, sys, json, time, shutil, argparse, statistics, subprocess, tempfile

GOAL = 0.5   # rk-ec at least half of raw ISA-L's speed per core (issue 12)
HERE = os.path.dirname(os.path.abspath(__file__))

def med_range(xs): return statistics.median(xs), min(xs), max(xs)

def isal_harness(d:str) -> tuple[str|None, str]:
    "Compile bench/isal_ec.c against libisal (apt.txt: libisal-dev); (path, '') or (None, the reason)."
    if not os.path.exists('/usr/include/isa-l/erasure_code.h'): return None, "libisal-dev is not installed (apt.txt; `make setup`)"
    cc = shutil.which('clang') or shutil.which('cc')
    if not cc: return None, "no C compiler (clang, apt.txt)"
    out = os.path.join(d, 'isal_ec')
    r = subprocess.run([cc, '-O2', '-o', out, os.path.join(HERE, 'isal_ec.c'), '-lisal'], capture_output=True, text=True)
    return (out, '') if r.returncode == 0 else (None, f"{cc} failed: {r.stderr.strip()[-500:]}")

def isal_version() -> str:
    r = subprocess.run(['dpkg-query', '-W', '-f', '${Version}', 'libisal2'], capture_output=True, text=True)
    return r.stdout.strip() or 'unknown'

def run_json(argv:list, cpu:int) -> dict:
    r = subprocess.run(['taskset', '-c', str(cpu), *map(str, argv)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0: raise RuntimeError(f"{argv[0]} failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--n', type=int, default=20)
    ap.add_argument('--k', type=int, default=14)
    ap.add_argument('--mib', type=int, default=64)
    ap.add_argument('--reps', type=int, default=5, help='interleaved rounds')
    ap.add_argument('--inner', type=int, default=5, help='repetitions inside each round (its median is the round)')
    ap.add_argument('--cpu', type=int, default=0, help='CPU both run on, one at a time')
    ap.add_argument('--levels', default='avx2', help='lower SIMD levels to measure too (comma-separated; empty: none)')
    ap.add_argument('--json', help='also write the records to this file')
    a = ap.parse_args()
    from researchkit.ledger.ec import ec_binary
    rk = ec_binary()
    ver = run_json([rk, 'version'], a.cpu)
    print(f"# researchkit bench (erasure) — {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, "
          f"{ver['cpu']}; RS({a.n},{a.k}) of {a.mib} MiB on CPU {a.cpu}, one core each, {a.reps} interleaved rounds × {a.inner}\n")
    records, res = [], {}
    with tempfile.TemporaryDirectory() as d:
        isal, why = isal_harness(d)
        variants = {('rk-ec', 'auto'): lambda lv: [rk, 'bench', '-n', a.n, '-k', a.k, '-mib', a.mib, '-reps', a.inner, '-threads', 1, '-simd', lv]}
        lower = [l for l in a.levels.split(',') if l]
        for lv in lower: variants[('rk-ec', lv)] = variants[('rk-ec', 'auto')]
        if isal:
            variants[('isa-l', 'auto')] = lambda lv: [isal, a.n, a.k, a.mib, a.inner, lv]
            for lv in lower: variants[('isa-l', lv)] = variants[('isa-l', 'auto')]
        else: print(f"raw ISA-L: not measurable here — {why}\n")
        for rnd in range(a.reps):
            for (lib, lv), argv in variants.items():
                try: r = run_json(argv(lv), a.cpu)
                except RuntimeError as e: print(f"{lib} {lv}: {e}"); continue
                r.update(round=rnd, requested=lv, load=os.getloadavg()[0], tool=lib)
                if lib == 'isa-l': r['lib'] = f"isa-l {isal_version()} (Debian libisal2)"
                records.append(r); res.setdefault((lib, lv), []).append(r)
    print(f"{'coder':<40} {'SIMD':<12} {'encode GB/s':>26} {'decode GB/s':>26}")
    for (lib, lv), rs in res.items():
        e, dd = med_range([r['encode_gbps'] for r in rs]), med_range([r['decode_gbps'] for r in rs])
        print(f"{rs[0]['lib']:<40} {rs[0]['simd']:<12} {e[0]:>9.2f} [{e[1]:.2f}–{e[2]:.2f}]    {dd[0]:>9.2f} [{dd[1]:.2f}–{dd[2]:.2f}]")
    if ('isa-l', 'auto') in res and ('rk-ec', 'auto') in res:
        print()
        for op in ('encode', 'decode'):   # ratio per round (interleaved), then its median
            ratios = [r[f'{op}_gbps'] / i[f'{op}_gbps'] for r, i in zip(res[('rk-ec', 'auto')], res[('isa-l', 'auto')])]
            m = med_range(ratios)
            print(f"{op}: rk-ec / raw ISA-L = {m[0]:.2f} [{m[1]:.2f}–{m[2]:.2f}] per core (goal ≥ {GOAL}): {'met' if m[0] >= GOAL else 'NOT met'}")
    if a.json:
        with open(a.json, 'w') as f: json.dump(records, f, indent=1)

if __name__ == '__main__': main()
