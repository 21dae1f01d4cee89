"""The engine runs without the GIL, and Ctrl-C cancels the query a thread waits for."""

import _thread
import signal
import threading
import time

import pytest

import mindlite

# None of these may hang the suite if an interrupt goes astray.
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def sigint_raises_keyboard_interrupt():
    """Python's own SIGINT handler, which `_thread.interrupt_main` needs: a process started in
    the background by a non-interactive shell inherits SIGINT ignored, and Python then installs
    no handler, so the simulated Ctrl-C would do nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)

# A trillion rows: runs far longer than the tests wait for it.
ENDLESS = "SELECT sum(value) FROM generate_series(1, 1000000000000)"


def test_keyboard_interrupt_cancels_a_long_query(con):
    timer = threading.Timer(0.5, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        con.sql(ENDLESS).fetchall()
    assert time.monotonic() - started < 5
    # The query was cancelled, not left running: the engine answers at once.
    assert con.sql("SELECT 1").fetchall() == [(1,)]
    assert time.monotonic() - started < 5


def test_other_threads_run_while_the_engine_works(con):
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    thread = threading.Thread(target=ticker)
    thread.start()
    try:
        started = time.monotonic()
        con.sql("SELECT count(*) FROM generate_series(1, 30000000) WHERE value % 7 = 0").fetchall()
        elapsed = time.monotonic() - started
    finally:
        done.set()
        thread.join()
    # With the GIL held for the whole query the ticker would stall; it kept ticking.
    during = [t for t in ticks if started <= t <= started + elapsed]
    assert elapsed < 0.2 or len(during) >= elapsed / 0.01 / 4, (elapsed, len(during))


def test_interrupted_fetch_leaves_a_result_that_says_so(con):
    result = con.sql("SELECT value FROM generate_series(1, 1000000000000) WHERE value % 100000000000 = 0")
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        result.fetchone()
    import mindlite

    with pytest.raises(mindlite.OperationalError, match="cancelled"):
        result.fetchall()


def test_keyboard_interrupt_cancels_arrow_hand_off(con):
    pytest.importorskip("pyarrow")
    timer = threading.Timer(0.5, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        con.sql(ENDLESS).arrow()
    assert time.monotonic() - started < 5
    pl = pytest.importorskip("polars")
    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(KeyboardInterrupt):
        con.sql(ENDLESS).pl()
    # Read directly by pyarrow, the stream ends with an error that says why.
    import pyarrow

    threading.Timer(0.5, _thread.interrupt_main).start()
    with pytest.raises(pyarrow.ArrowException, match="cancelled"):
        pyarrow.table(con.sql(ENDLESS))


def test_keyboard_interrupt_rolls_a_write_back(con):
    con.execute("CREATE TABLE t (a BIGINT)")
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        con.execute("INSERT INTO t SELECT value FROM generate_series(1, 1000000000000)")
    time.sleep(1)
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_interrupt_from_another_thread_stops_the_statement(con):
    timer = threading.Timer(0.5, con.interrupt)
    started = time.monotonic()
    timer.start()
    with pytest.raises(mindlite.OperationalError, match="interrupted"):
        con.sql(ENDLESS).fetchall()
    assert time.monotonic() - started < 5
    # Only what ran was stopped: the next statement runs.
    assert con.sql("SELECT 1").fetchall() == [(1,)]


def test_a_statement_stops_at_its_timeout(con):
    started = time.monotonic()
    with pytest.raises(mindlite.OperationalError, match="time limit"):
        con.sql(ENDLESS, timeout=0.5).fetchall()
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match="positive"):
        con.sql("SELECT 1", timeout=0)
