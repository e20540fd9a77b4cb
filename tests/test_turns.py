"""The suite's turns (tests/conftest.py): an `alone` block holds the host while it runs, and only then.

The turns are checked on a lock directory of this test's own, where another worker is this test's child process: on the
suite's lock the block would wait for the other workers' current tests (a Kubernetes smoke of several minutes), holding
the gate so that no worker starts a test meanwhile. The machinery is the same: `_Turns` reads the lock directory from
RK_TEST_LOCK at each turn, and the `alone` fixture is the suite's own."""
import fcntl, os, pathlib, subprocess, sys, time, pytest
import conftest

# a second worker: waits for the gate and a shared turn, as `_Turns.take(LOCK_SH)` does, says when it has it, then lets it go
WORKER = """import fcntl, pathlib, sys, time
d = pathlib.Path(sys.argv[1])
with open(d/'gate', 'a') as gate:
    fcntl.flock(gate, fcntl.LOCK_EX)
    turn = open(d/'turn', 'a'); fcntl.flock(turn, fcntl.LOCK_SH)
print(time.time(), flush=True)
"""

def _others_can_start() -> bool:
    "Whether another worker could take its shared turn now (a second open file of the lock: flock counts it as another holder)."
    with open(pathlib.Path(os.environ['RK_TEST_LOCK'])/'turn', 'a') as f:
        try: fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB); return True
        except BlockingIOError: return False

@pytest.mark.skipif(not os.environ.get('PYTEST_XDIST_WORKER'), reason="the turns exist only on `make test`'s workers")
def test_an_alone_block_holds_the_host_for_the_block_only(alone, tmp_path, monkeypatch):
    # the suite's shared turn stays held meanwhile (a second open file of its lock), so no `exclusive` test starts beside this one
    with open(pathlib.Path(os.environ['RK_TEST_LOCK'])/'turn', 'a') as suite:
        fcntl.flock(suite, fcntl.LOCK_SH)
        monkeypatch.setenv('RK_TEST_LOCK', str(tmp_path))
        conftest._turns.give(); conftest._turns.take(fcntl.LOCK_SH)   # this test's plain turn, on its own lock
        assert _others_can_start()                 # a plain test's turn is shared
        with alone():
            assert not _others_can_start()         # no other test starts while the block runs
            other = subprocess.Popen([sys.executable, '-c', WORKER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
            time.sleep(1.0)
            assert other.poll() is None            # ... a worker asking for its turn waits at the gate
            left = time.time()
        out, _ = other.communicate(timeout=30)
        assert other.returncode == 0 and float(out) >= left   # and gets its turn once the block is over
        assert _others_can_start()                 # and after it, the turn is shared again
