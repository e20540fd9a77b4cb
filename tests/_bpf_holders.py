"""Which BPF programs and maps are a test's own. Their names carry no run id, and another pytest-xdist worker loads its own
meanwhile (test_policy, test_policy_remote, test_lsm_bpf, test_ssh_testbed, the doctor's probes), so an object is told apart by
the processes holding it. A process holds a program or map through an fd of it or of a link to it (/proc/PID/fdinfo names its
`prog_id` or `map_id`; this host's bpftool has no `pids`), and a map also through the programs using it (bpftool's `map_ids`).
researchkit pins nothing and attaches through links, so an object of ours has a holder until the kernel frees it.

An object counts as another run's only when every process holding it positively is: in another xdist worker's process tree, or
carrying run ids (RESEARCHKIT_RUN_ID in its environment, `rkXXXX-` in its command line or cgroups), none of them ours. Anything
else counts as ours: held by this process or its descendants, by a process of our runs, by a process nobody can place, or by
none (still loaded after the wait for the kernel's asynchronous frees). So a check is never weaker for what the test started."""
import os, re, json, time, pathlib, subprocess
from researchkit.cli import descendants

_ENV = re.compile(rb'(?:^|\0)RESEARCHKIT_RUN_ID=(rk[0-9a-f]{4})(?=\0|$)')
_CMD = re.compile(rb'(?<![0-9A-Za-z])(rk[0-9a-f]{4})-')
_CGROUP = re.compile(rb'/researchkit/(rk[0-9a-f]{4})-')
_ID = {'prog': re.compile(r'^prog_id:\s*(\d+)', re.M), 'map': re.compile(r'^map_id:\s*(\d+)', re.M)}

def _read(path:str) -> bytes:
    try: return pathlib.Path(path).read_bytes()
    except OSError: return b''

def _marks(pid:int) -> set[str]:
    "The run ids process `pid` carries (environment, command line, cgroups)."
    env, cmd, cg = (_read(f'/proc/{pid}/{f}') for f in ('environ', 'cmdline', 'cgroup'))
    return {m.decode() for m in (*_ENV.findall(env), *_CMD.findall(cmd), *_CGROUP.findall(cg))}

def _loaded() -> dict[tuple[str, int], dict]:
    "Every program and map loaded now: (kind, id) -> bpftool's JSON object."
    out = {}
    for kind in ('prog', 'map'):
        r = subprocess.run(['bpftool', '-j', kind, 'list'], capture_output=True, text=True, timeout=30)
        try: out |= {(kind, x['id']): x for x in json.loads(r.stdout or '[]')}
        except ValueError: pass
    return out

def _fd_holders() -> dict[tuple[str, int], set[int]]:
    "(kind, id) -> pids holding an fd of the object, or of a link to it (a link's fdinfo names its program)."
    out = {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try: fds = os.listdir(f'/proc/{p}/fd')
        except OSError: continue
        for fd in fds:
            try:
                target = os.readlink(f'/proc/{p}/fd/{fd}')
                if not (target.startswith('anon_inode:') and 'bpf' in target): continue
                info = pathlib.Path(f'/proc/{p}/fdinfo/{fd}').read_text()
            except OSError: continue
            for kind, rx in _ID.items():
                if (m := rx.search(info)): out.setdefault((kind, int(m.group(1))), set()).add(int(p))
    return out

def _ours_now(before:dict, ids:set, prefix:str) -> dict[str, list[int]]:
    objs = _loaded()
    new = [(k, i) for (k, i), x in objs.items() if x.get('name', '').startswith(prefix) and i not in before.get(k, set())]
    if not new: return {}
    held = _fd_holders()
    for (k, i), x in objs.items():   # a map is held by whoever holds a program using it
        if k == 'prog':
            for m in x.get('map_ids', []): held.setdefault(('map', m), set()).update(held.get(('prog', i), set()))
    me = os.getpid()
    mine = {me, *descendants(me)}
    # the other xdist worker and what it started: the other children of the controller that started us (none in a plain run)
    others = set(descendants(os.getppid())) - mine if os.environ.get('PYTEST_XDIST_WORKER') else set()
    marks = {}
    def foreign(pid:int) -> bool:
        if pid in mine: return False
        if pid in others: return True
        m = marks[pid] if pid in marks else marks.setdefault(pid, _marks(pid))
        return bool(m) and not (m & ids)
    left = {}
    for k, i in new:
        pids = held.get((k, i), set())
        if not (pids and all(foreign(p) for p in pids)): left.setdefault(k, []).append(i)
    return {k: sorted(v) for k, v in left.items()}

def bpf_leftovers_of(before:dict,            # `bpf_ids(prefix)` taken before
                     ids,                    # run ids of what the test started: this process's own, its CLI runs'
                     *, prefix:str='rk_',    # names starting with this ('rk_': researchkit's)
                     timeout:float=2.0,      # seconds to wait for asynchronous frees
                    ) -> dict[str, list[int]]:
    "Programs and maps named `prefix`* loaded now, not in `before` and not another run's (see above), polled up to `timeout`: {'prog': [...], 'map': [...]}, empty when nothing of ours is left."
    ids, deadline = set(ids), time.monotonic() + timeout
    while True:
        left = _ours_now(before, ids, prefix)
        if not left or time.monotonic() > deadline: return left
        time.sleep(0.1)

def held_by(pids, kind:str='prog', prefix:str='rk_') -> set[int]:
    "Ids of the `kind` objects named `prefix`* that one of `pids` holds (an fd of it, or of a link to it)."
    pids, objs = set(pids), _loaded()
    return {i for (k, i), holders in _fd_holders().items() if k == kind and holders & pids
            and objs.get((k, i), {}).get('name', '').startswith(prefix)}
