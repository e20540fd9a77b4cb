"""Running the `researchkit` CLI from a test, as a user would: the command, a run in the background that is always stopped,
and the check every study's bad-input tests share (exit 2, the field named on stderr, nothing started: no namespace,
no results directory, no Fabric directory).

Another pytest-xdist worker runs its own tests at the same time, so a check of what a command left looks only at the names of
the command's own runs (`run_ids`): everything researchkit creates is named with a run id (`rkXXXX-...`)."""
import re, sys, glob, signal, pathlib, subprocess
from researchkit.core import current_run_id

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLI = [str(pathlib.Path(sys.executable).parent/'researchkit')]

def cli(*args, **kw) -> subprocess.CompletedProcess:
    "`researchkit ARGS` from the project root, output captured (the command inherits this process's run id: see `run_ids`)."
    current_run_id()
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, **kw)

def start(*args) -> subprocess.Popen:
    "`researchkit ARGS` in the background from the project root, output captured (tests take it through the `background` fixture, which stops it; the command inherits this process's run id: see `run_ids`)."
    current_run_id()
    return subprocess.Popen([*CLI, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

def stop(p:subprocess.Popen, timeout:float=180):
    "If `p` still runs (its test failed mid-way): the user's Ctrl-C and its teardown time, then SIGKILL; a failed test must not leave a study running into the next one."
    if p.poll() is not None: return
    p.send_signal(signal.SIGINT)
    try: p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired: p.kill(); p.communicate()

def netns_names() -> set[str]:
    out = subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout
    return {l.split()[0] for l in out.splitlines() if l.strip()}

RUN_LINE = re.compile(r'^run (rk[0-9a-f]{4})\b', re.M)

def run_ids(*stderrs:str, records=()) -> set[str]:
    """The run ids of what the CLI commands of this test started: this process's own (`cli` and `start` make sure the command
    inherits it: whatever the command itself starts carries it), each run's as `researchkit run` printed it on stderr
    (`run rkXXXX: ...`; its notebook's kernel names everything with it), and those of `records` (the `run_id` column)."""
    return {current_run_id(), *(i for e in stderrs for i in RUN_LINE.findall(e or '')), *records}

def new_netns(before:set, ids) -> set[str]:
    "Namespaces not in `before` whose names carry one of the run ids `ids` (another worker's come and go meanwhile)."
    ids = tuple(ids)
    return {n for n in netns_names() - before if n.startswith(ids)}

def assert_rejected(args, field:str, tmp_path, *, leftovers_glob:str|None=None, leftovers=None):
    """`researchkit ARGS --results <tmp>` fails with exit 2 naming `field`, and starts nothing: no results directory, and no new
    namespace, path matching `leftovers_glob` (a glob with `{rid}`) or item of `leftovers(rid)` for any run id of the command."""
    def left(rid) -> set:
        return {*(glob.glob(leftovers_glob.format(rid=rid)) if leftovers_glob else ()), *(leftovers(rid) if leftovers else ())}
    before, had = netns_names(), left(current_run_id())
    r = cli(*args, '--results', str(tmp_path/'r'))
    assert r.returncode == 2, r.stderr
    assert field in r.stderr, r.stderr
    ids = run_ids(r.stderr)
    assert not new_netns(before, ids) and not (tmp_path/'r').exists(), new_netns(before, ids)
    new = {rid: left(rid) - had for rid in ids}   # (any printed run id is new: only this process's own can have had something)
    assert not any(new.values()), new
    return r

def assert_rejected_before_start(study:str, param:str, field:str, tmp_path, *, profile:str='smoke', leftovers_glob:str|None=None):
    "`researchkit run STUDY --param PARAM` fails with exit 2 naming `field`, and starts nothing (see `assert_rejected`)."
    assert_rejected(['run', study, '--profile', profile, '--param', param], field, tmp_path, leftovers_glob=leftovers_glob)
