"""`make bench`: where the variance of every claim's quantity lives, read from the committed campaigns (no measuring).

For each ratio a claim decides on (`claims.collecting`): the spread of the log ratio between repetitions (minutes apart in
every study: a repetition is one pass over the points), the spread of each arm on its own, and what pairing by repetition
keeps of it (var(log a/b) / (var(log a) + var(log b)): 1 = the arms are independent, near 0 = a drift both arms share
cancels). From that spread: the repetitions the claim would need at 95 % if its estimate stays where it is (`needed_n`).
Beside it, the same spread in the campaign before (a change of method, e.g. the arms run back to back in rounds, shows
there as a change of spread with everything else the same). Levels this cannot split (within a run, seconds apart) need
runs made for it; the output says so.

Usage: python bench/variance.py [--study NAME ...] [--results results]
"""
import argparse, math, pathlib, sys
import polars as pl

ROOT = pathlib.Path(__file__).resolve().parent.parent

def _sd(xs):
    if len(xs) < 2: return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))

def split(label, r, band):
    "One row: quantity, n, sd of the log ratio, of each arm, the share pairing keeps, and the repetitions a decision needs."
    from researchkit.claims import needed_n
    logs = [math.log(x) for x in (r.samples[0] if r.paired and r.samples else []) if x > 0]
    sr = _sd(logs)
    arms = [[math.log(x) for x in side if x > 0] for side in r.arms] if r.arms else []
    sa, sb = (_sd(arms[0]), _sd(arms[1])) if arms else (None, None)
    keep = sr ** 2 / (sa ** 2 + sb ** 2) if sr is not None and sa and sb else None
    est = math.exp(sum(logs) / len(logs)) if logs else None
    edges = [e for e in band.edges() if e > 0]
    need = None
    if est and edges and sr is not None:
        dist = min(abs(math.log(est) - math.log(e)) for e in edges)
        need = needed_n(sr, dist, 1, 0.95) if dist > 0 else None
    return label, r.n, sr, sa, sb, keep, est, str(band), need

def knee_rows(df, before, f):
    "runtimes-web's knee ratios (runsc/runc per endpoint), which claims 1-3 decide on: each repetition's ratio of interpolated knees, its spread, and the grid cells' resolution (what a knee is known to, whatever the spread)."
    from researchkit.studies import runtimes_web as rw
    def one(d, ep):
        a, b = rw.RepCurves(d, 'runsc', ep), rw.RepCurves(d, 'runc', ep)
        reps = sorted(set(a.reps) & set(b.reps))
        logs = [math.log(a.knee([r]) / b.knee([r])) for r in reps]
        (la, ua), (lb, ub) = a.cell(reps), b.cell(reps)
        return len(reps), _sd(logs), math.exp(sum(logs) / len(logs)) if logs else None, (la / ub, ua / lb if lb else math.inf)
    for ep in rw.ENDPOINTS:
        try: n, sr, est, (lo, hi) = one(df, ep)
        except Exception as e: print(f"| knee runsc/runc {ep} | — | no knees: {e} |"); continue
        try: old = one(before, ep)[1] if before is not None else None
        except Exception: old = None
        print(f"| knee runsc/runc {ep} (interpolated; cells {lo:.2f}–{hi:.2f}) | {n} | {f(sr)} | {f(old)} | — | — | — | {f(est, 2)} | claims 1–3 | the cells, not the spread, bound it |")

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--study', action='append'); ap.add_argument('--results', default=str(ROOT / 'results'))
    a = ap.parse_args(argv)
    from researchkit.claims import evaluate, collecting
    from researchkit.results.store import ResultStore
    from researchkit.studies.catalog import study_names, get_study
    store = ResultStore(a.results)
    f = lambda x, d=3: '—' if x is None else f"{x:.{d}f}"
    print("# Variance split per claim quantity (committed quick campaigns; between repetitions = minutes apart)\n")
    for name in a.study or study_names():
        df = store.campaign_records(name, profile='quick')
        if df.height == 0: print(f"## {name}: no committed quick campaign\n"); continue
        with collecting() as got: evaluate(list(get_study(name).claims()), df)
        camps = store.campaigns(name).filter(pl.col('complete') & (pl.col('profile') == 'quick'))['campaign'].to_list()
        prev = camps[camps.index(df['campaign'][0]) - 1] if df['campaign'][0] in camps and camps.index(df['campaign'][0]) > 0 else None
        before = {}
        if prev is not None:
            with collecting() as old: evaluate(list(get_study(name).claims()), store.campaign_records(name, prev))
            before = {(label, str(band)): split(label, r, band)[2] for label, r, band in old}
        print(f"## {name} (campaign {df['campaign'][0]}; the one before: {prev or 'none'})\n")
        print("| quantity | n | sd log ratio | before | sd log a | sd log b | pairing keeps | estimate | band | n to decide at 95 % |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        seen = set()
        for label, r, band in got:
            if (label, str(band)) in seen: continue
            seen.add((label, str(band)))
            q, n, sr, sa, sb, keep, est, b, need = split(label, r, band)
            print(f"| {q} | {n} | {f(sr)} | {f(before.get((label, str(band))))} | {f(sa)} | {f(sb)} | {f(keep, 2)} | {f(est, 2)} | {b} | {need or '> 1000 or on the edge'} |")
        if name == 'runtimes-web': knee_rows(df, store.campaign_records(name, prev) if prev else None, f)
        print("\nWithin-run and seconds-apart levels: not in the records (each point is one run per repetition); "
              "`bench/runtimes.py` and `bench/harness.py` measure back-to-back repeats of their own.\n")

if __name__ == '__main__':
    sys.path.insert(0, str(ROOT)); main()
