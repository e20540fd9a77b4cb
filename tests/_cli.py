"""Running the `researchkit` CLI from a test, as a user would: the command, a run in the background that is always stopped,
and the check every study's bad-input tests share (exit 2, the field named on stderr, nothing started: no namespace,
no results directory, no Fabric directory)."""
import sys, glob, signal, pathlib, subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLI = [str(pathlib.Path(sys.executable).parent/'researchkit')]

def cli(*args, **kw) -> subprocess.CompletedProcess:
    "`researchkit ARGS` from the project root, output captured."
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, **kw)

def start(*args) -> subprocess.Popen:
    "`researchkit ARGS` in the background from the project root, output captured (tests take it through the `background` fixture, which stops it)."
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

def assert_rejected_before_start(study:str, param:str, field:str, tmp_path, *, profile:str='smoke', leftovers_glob:str|None=None):
    "`researchkit run STUDY --param PARAM` fails with exit 2 naming `field`, and starts nothing."
    before = netns_names()
    r = cli('run', study, '--profile', profile, '--param', param, '--results', str(tmp_path/'r'))
    assert r.returncode == 2, r.stderr
    assert field in r.stderr, r.stderr
    assert netns_names() == before and not (tmp_path/'r').exists()
    if leftovers_glob: assert not glob.glob(leftovers_glob), glob.glob(leftovers_glob)
