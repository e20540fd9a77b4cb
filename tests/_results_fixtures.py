"Shared fixtures of the results/claims/figures/report tests: a static provenance and records builders."
import polars as pl
from researchkit.results.records import records, not_measurable, frame

PROV = {'run_id': 'rk0000', 'profile': 'smoke', 'testbed': 'local', 'package_version': '0.1.0', 'git_commit': 'c' * 40,
        'hostname': 'h', 'kernel': '6.18', 'cores': 2, 'cpu_model': 'cpu', 'loadavg': 0.25, 'tool_versions': '{"iperf3": "3.12"}'}

def rows(study, experiment, values, *, metric='gbps', unit='Gbit/s', prov=PROV):
    "values: list of (point, repetition, value); value None -> a not-measurable row with reason 'no <path>'."
    out = []
    for point, rep, v in values:
        if v is None: out += not_measurable(study, experiment, point, f"no {point.get('path')}", prov, repetition=rep)
        else: out += records(study, experiment, point, rep, {metric: (v, unit)}, prov)
    return out

def df_of(values, **kw):
    "Records as `ResultStore.load` gives them (point columns expanded)."
    from researchkit.results.store import expand_points
    return expand_points(frame(rows('s', 'e', values, **kw)))
