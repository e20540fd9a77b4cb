"""A small pod network for workload tests: N pod namespaces, each with `eth0` (198.18.0.(10+i)/24) on a veth
whose other end sits on a bridge `br0` in a separate bridge namespace. Independent of researchkit.networks."""
from __future__ import annotations
import contextlib, secrets, subprocess
from researchkit.core import current_run_id
from researchkit.teardown import Teardown
from researchkit.testbed.nodes import LocalNode, NetnsNode

def build_pods(n:int, td:Teardown, *, subnet:str='198.18.0') -> tuple[list[NetnsNode], list[str]]:
    "Create `n` pods joined by one bridge; every namespace is registered in `td` before it is created."
    host, tag = LocalNode(), f"{current_run_id()}-{secrets.token_hex(2)}"
    br = f"{tag}-br"
    def netns(name):
        td.add(f"netns {name}", lambda: host.run(f"ip netns del {name} 2>/dev/null || true"),
               undo=f"ip netns del {name} 2>/dev/null || true")
        host.run(f"ip netns add {name}")
    netns(br)
    host.run(f"ip -n {br} link add br0 type bridge && ip -n {br} link set br0 up && ip -n {br} link set lo up")
    pods, ips = [], []
    for i in range(n):
        ns, ip = f"{tag}-p{i}", f"{subnet}.{10+i}"
        netns(ns)  # deleting either namespace deletes the veth pair
        host.run(f"ip -n {br} link add v{i} type veth peer name eth0 netns {ns} && "
                 f"ip -n {br} link set v{i} master br0 up && "
                 f"ip -n {ns} addr add {ip}/24 dev eth0 && ip -n {ns} link set eth0 up && ip -n {ns} link set lo up")
        pods.append(NetnsNode(ns)); ips.append(ip)
    return pods, ips

@contextlib.contextmanager
def pods(n:int=2):
    "`with pods(4) as (pods, ips, td):` a fresh pod network, torn down on exit."
    td = Teardown()
    try: yield (*build_pods(n, td), td)
    finally: td.close()

def leftovers(tag:str) -> list[str]:
    "Namespaces and processes whose name or command line mentions `tag` (for leak checks)."
    ns = [l.split()[0] for l in subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout.splitlines()
          if tag in l]
    ps = [l for l in subprocess.run(['ps', '-eo', 'pid,args'], capture_output=True, text=True).stdout.splitlines()
          if tag in l and 'ps -eo' not in l]
    return ns + ps
