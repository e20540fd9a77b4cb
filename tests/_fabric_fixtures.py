"""What the tests of a real Fabric network share: whether this machine has the Fabric tools (a skip reason naming what is
missing when not), and what a run of the ledger layer can leave behind (containers, cgroups, pod namespaces, scratch and
network directories, monitor and rk-load files) — for the leak checks after success, failure and Ctrl-C."""
from __future__ import annotations
import glob, json, subprocess
import pytest
from researchkit.core import NotMeasurable
from researchkit.ledger.spec import FABRIC_ROOT
from researchkit.ledger.network import fabric_tools, fabric_config_dir
from researchkit.runtimes.adapters import get_runtime
from researchkit.runtimes.container import SCRATCH_ROOT, CGROUP_PARENT

FABRIC_TOOLS = ['peer', 'orderer', 'osnadmin', 'configtxgen', 'discover', 'fabric-ca-server', 'fabric-ca-client', 'rk-kv', 'rk-load', 'rk-ec']

def fabric_missing() -> str|None:
    "Why a Fabric network cannot come up here (a tool or the sampleconfig not in the tool cache), or None."
    try: fabric_tools(FABRIC_TOOLS)
    except NotMeasurable as e: return e.reason
    return None if fabric_config_dir() else "Fabric's sampleconfig is not in the tool cache: run tools/install-go-tools"

MISSING = fabric_missing()
fabric = pytest.mark.skipif(MISSING is not None, reason=f"Fabric not built: {MISSING}")

def netns_names() -> set[str]:
    out = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    return {l.split()[0] for l in out.splitlines() if l.strip()}

def run_leftovers(rid:str, runtimes=('runc', 'runsc')) -> dict:
    "Containers, cgroups, namespaces, scratch and network directories, monitor and rk-load files of run `rid` still there."
    listed = []
    for rt in runtimes:
        try: line = get_runtime(rt)._cli('list', '--format', 'json')
        except NotMeasurable: continue
        r = subprocess.run(['sh', '-c', line], capture_output=True, text=True)
        try: listed += [c['id'] for c in json.loads(r.stdout or '[]') or [] if c['id'].startswith(f'{rid}-')]
        except json.JSONDecodeError: pass
    left = {'containers': listed, 'cgroups': glob.glob(f'/sys/fs/cgroup/*{CGROUP_PARENT}/{rid}-*'),
            'netns': [n for n in netns_names() if n.startswith(rid)], 'scratch': glob.glob(f'{SCRATCH_ROOT}/{rid}-*'),
            'dirs': glob.glob(f'{FABRIC_ROOT}/{rid}-*'), 'monitor': glob.glob(f'/tmp/{rid}-monitor-*'), 'rows': glob.glob(f'/tmp/{rid}-rkload-*')}
    return {k: v for k, v in left.items() if v}
