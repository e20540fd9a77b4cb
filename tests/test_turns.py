"""The suite's turns (tests/conftest.py): an `alone` block holds the host while it runs, and only then."""
import fcntl, os, pathlib, pytest

def _others_can_start() -> bool:
    "Whether another worker could take its shared turn now (a second open file of the lock: flock counts it as another holder)."
    with open(pathlib.Path(os.environ['RK_TEST_LOCK'])/'turn', 'a') as f:
        try: fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB); return True
        except BlockingIOError: return False

@pytest.mark.skipif(not os.environ.get('PYTEST_XDIST_WORKER'), reason="the turns exist only on `make test`'s workers")
def test_an_alone_block_holds_the_host_for_the_block_only(alone):
    assert _others_can_start()                 # a plain test's turn is shared
    with alone():
        assert not _others_can_start()         # no other test starts while the block runs
    assert _others_can_start()                 # and after it, the turn is shared again
