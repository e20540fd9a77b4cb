"""The intervals the claims are decided on keep their promise on noise shaped like this VM's (seeded simulations, seconds).

Noise model (measured on this machine kind, see the studies' params): the host runs in phases (throughput x1.6 between them,
lasting several runs), per-run noise is heavy-tailed (Student t with 3 df) with a CV of 5-50 %, and one run in 20 is a fast
outlier (x1.5). Arms measured back to back share their round's phase; arms measured apart do not.
"""
import math, random
import pytest
from researchkit.claims import (Ratio, decide, at_least, at_most, level_at, log_t_interval, welch_log_interval, t_interval,
                                t_quantile, t_cdf, needed_n)

PHASE, SWITCH, OUTLIER = math.log(1.6), 0.3, (0.05, math.log(1.5))

class VM:
    "A host in phases: `log_noise()` is one run's log deviation; the phase switches with probability SWITCH between runs."
    def __init__(self, rng, cv):
        self.rng, self.cv, self.phase = rng, cv, rng.random() < 0.5
    def step(self):
        if self.rng.random() < SWITCH: self.phase = not self.phase
    def run(self):
        g = self.rng.gauss
        t3 = g(0, 1) / math.sqrt(sum(g(0, 1) ** 2 for _ in range(3)) / 3) / math.sqrt(3)   # unit variance
        e = self.cv * t3 + (PHASE if self.phase else 0.0)
        return e + (OUTLIER[1] if self.rng.random() < OUTLIER[0] else 0.0)

def paired_ratios(rng, n, cv, truth):
    "n rounds, each running both arms back to back (same phase)."
    vm, out = VM(rng, cv), []
    for _ in range(n):
        vm.step(); out.append(truth * math.exp(vm.run() - vm.run()))
    return out

def interleaved(rng, n, cv, truth):
    "Unpaired values of two arms run alternately over the campaign (a1 b1 a2 b2 ...; the phase moves between every run)."
    vm, a, b = VM(rng, cv), [], []
    for _ in range(n):
        vm.step(); a.append(truth * math.exp(vm.run())); vm.step(); b.append(math.exp(vm.run()))
    return a, b

def blocked(rng, n, cv, truth):
    "Unpaired values of two arms, each arm's runs in a row (all of a, then all of b)."
    vm, a, b = VM(rng, cv), [], []
    for _ in range(n): vm.step(); a.append(truth * math.exp(vm.run()))
    for _ in range(n): vm.step(); b.append(math.exp(vm.run()))
    return a, b

def gaps(rng, n, cv, truth):
    "Per-repetition differences in seconds (runtimes-web's response-time gaps): additive heavy-tailed noise with phases."
    vm, out = VM(rng, cv), []
    for _ in range(n):
        vm.step(); out.append(truth + 0.5 * (math.exp(vm.run()) - math.exp(vm.run())))   # two response times of ~0.5 s, skewed
    return out

KINDS = {   # interval kind -> (draw, interval, truth)
    'paired ratio, t on logs (Ratio.of, ratio, hlf-kata, hlf-ec, knee ratios)': (paired_ratios, lambda xs: log_t_interval(xs, 0.95), 1.2),
    'unpaired ratio, Welch on logs, arms interleaved (ratio without pairs, runtimes-web cross-check)':
        (interleaved, lambda ab: welch_log_interval(*ab, 0.95), 1.2),
    'difference, t (runtimes-web gaps in seconds)': (gaps, lambda xs: t_interval(xs, 0.95), 0.3),
}
NS, CVS, TRIALS = (3, 4, 5, 6, 8, 10, 12), (0.05, 0.2, 0.5), 2000

def coverage(kind, n, cv, seed=0, trials=TRIALS):
    draw, interval, truth = KINDS[kind] if kind in KINDS else kind
    rng, hit = random.Random(f"{seed}-{n}-{cv}"), 0
    for _ in range(trials):
        _, lo, hi = interval(draw(rng, n, cv, truth))
        hit += lo <= truth <= hi
    return hit / trials

def test_t_quantiles_match_the_table():
    "The exact t quantile (A&S 26.7.3-4, inverted) against published values, two-sided 95 % and 99 %."
    for df, q in ((1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042), (120, 1.980)):
        assert t_quantile(df, 0.95) == pytest.approx(q, abs=6e-4)
    for df, q in ((2, 9.925), (5, 4.032), (10, 3.169)):
        assert t_quantile(df, 0.99) == pytest.approx(q, abs=6e-4)
    assert t_cdf(0, 7) == 0.5 and t_cdf(-2.0, 4) == pytest.approx(1 - t_cdf(2.0, 4))

@pytest.mark.parametrize('kind', list(KINDS))
def test_every_interval_kind_covers_at_least_93_percent(kind):
    "Nominal 95 %: simulated coverage >= 93 % for n = 3..12 and per-run CVs 5-50 % (2000 trials each, seeded)."
    table = {(n, cv): coverage(kind, n, cv) for n in NS for cv in CVS}
    low = {k: v for k, v in table.items() if v < 0.93}
    assert not low, f"{kind}: coverage below 93 % at (n, cv): {low}"

def test_unpaired_arms_measured_in_blocks_do_not_cover():
    "Why arms are interleaved or paired: the same Welch interval over arms run one after the other misses the truth far more than 5 % (the phase is shared within a block, so the runs are not independent)."
    cov = coverage((blocked, lambda ab: welch_log_interval(*ab, 0.95), 1.2), 8, 0.05)
    assert cov < 0.9, cov

def adaptive(rng, truth, band, cv, *, base, maxr, spend=True):
    """One claim's adaptive campaign as `Campaign.adapt` runs it: evaluate at look j (level `level_at(j)`), stop when decided,
    else add repetitions up to the verdict's `needed` (solved at the next look's level), at most `maxr`."""
    vm, xs, look = VM(rng, cv), [], 1
    def more(k):
        while len(xs) < k: vm.step(); xs.append(truth * math.exp(vm.run() - vm.run()))
    more(base)
    while True:
        lv = level_at(look) if spend else 0.95
        r = Ratio.of(xs)
        v = decide(*r.interval(lv), band, n=r.n, scale='log', sd=r.sd(), level=lv)
        if v.status != 'inconclusive' or len(xs) >= maxr: return v.status
        more(min(maxr, max(len(xs) + 1, v.needed or maxr))); look += 1

@pytest.mark.parametrize('cv', CVS)
@pytest.mark.parametrize('base, maxr', [(3, 8), (4, 6), (2, 8)])
def test_adaptive_stopping_does_not_buy_verdicts(cv, base, maxr):
    "A true ratio on the band's edge: the adaptive loop decides on the wrong side of it at most 5 % of the time (2000 campaigns each)."
    rng = random.Random(f"stop-{cv}-{base}-{maxr}")
    edge, trials = 1.03, 2000
    wrong_refuted = sum(adaptive(rng, edge, at_least(edge), cv, base=base, maxr=maxr) == 'refuted' for _ in range(trials)) / trials
    wrong_reproduced = sum(adaptive(rng, edge * 1.0001, at_most(edge), cv, base=base, maxr=maxr) == 'reproduced' for _ in range(trials)) / trials
    assert wrong_refuted <= 0.05 and wrong_reproduced <= 0.05, (wrong_refuted, wrong_reproduced)

def test_needed_is_solved_at_the_target_count():
    "At n = 3 the t quantile is 4.3; the count that would decide uses the quantile at that count (about 2.2 at 12), not at 3."
    sd, dist = 0.1, 0.06
    m = needed_n(sd, dist, 3, 0.95)
    assert t_quantile(m - 1, 0.95) * sd / math.sqrt(m) < dist <= t_quantile(m - 2, 0.95) * sd / math.sqrt(m - 1)
    assert m < math.ceil(3 * (t_quantile(2, 0.95) * sd / math.sqrt(3) / dist) ** 2)   # the old rule: n (half/dist)^2 at n's own t
