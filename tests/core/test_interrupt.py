"""mneme.core.interrupt: a signal whose exception CPython dropped still stops the command.

CPython before 3.13 can lose the exception a signal handler raises while it compiles source (an import
without a cached .pyc): `tests/core/tuning/test_tune_interrupt.py` saw `mneme tune` run to the end after
a Ctrl-C at start-up, about one run in ten under load. Here the handler is called as the signal would
call it, and its exception is dropped as CPython dropped it.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from mneme.core import interrupt
from mneme.core.interrupt import Interrupted


def _lost(signum: int = signal.SIGINT) -> None:
    try:
        interrupt._handler(signum, None)
    except Interrupted:
        pass  # what CPython's compiler did with it


def test_a_dropped_signal_becomes_the_pending_one_of_the_next_deferred_block():
    _lost()
    with pytest.raises(Interrupted) as raised:
        with interrupt.deferred():
            assert interrupt.pending() == signal.SIGINT  # the tuning loop stops at its first check
    assert raised.value.exit_code == 130
    interrupt.check()  # reported once: nothing left


def test_check_raises_a_dropped_signal_once():
    _lost(signal.SIGTERM)
    with pytest.raises(Interrupted) as raised:
        interrupt.check()
    assert raised.value.exit_code == 143
    interrupt.check()
    with interrupt.deferred():
        assert interrupt.pending() is None


def test_a_signal_recorded_by_a_deferred_block_is_not_raised_twice():
    with pytest.raises(Interrupted):
        with interrupt.deferred():
            interrupt._handler(signal.SIGINT, None)  # recorded, not raised
            assert interrupt.pending() == signal.SIGINT
    interrupt.check()  # the block raised it: nothing left to report


def test_a_command_that_ran_on_after_a_dropped_signal_exits_as_interrupted(tmp_path):
    # The whole `mneme` entry point: the handler runs (as the signal would run it) during a command whose
    # exception is then dropped; the command finishes, and the exit still says it was interrupted.
    script = tmp_path / "run.py"
    script.write_text(
        "import signal, sys\n"
        "from mneme.core import cli, interrupt\n"
        "real = cli.main\n"
        "def command_that_loses_the_signal(argv=None):\n"
        "    try:\n"
        "        interrupt._handler(signal.SIGINT, None)\n"
        "    except interrupt.Interrupted:\n"
        "        pass\n"
        "    real(['ir', 'passes'])\n"
        "cli.main = command_that_loses_the_signal\n"
        "sys.argv = ['mneme']\n"
        "interrupt.main()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 130, done.stdout + done.stderr
    assert "interrupted by SIGINT" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_signal_handled_inside_a_finalizer_is_not_reported_and_still_stops_the_command(tmp_path):
    # The case the tuner met: the handler ran inside importlib's weakref callback, Python printed
    # "Exception ignored in ... Traceback" and went on. No report, and the signal is still acted on.
    script = tmp_path / "run.py"
    script.write_text(
        "import signal, sys\n"
        "from mneme.core import interrupt\n"
        "interrupt.install()\n"
        "class Finalized:\n"
        "    def __del__(self):\n"
        "        interrupt._handler(signal.SIGINT, None)\n"
        "Finalized()\n"
        "print('went on')\n"
        "try:\n"
        "    interrupt.check()\n"
        "except interrupt.Interrupted as exc:\n"
        "    print('stopped', exc.exit_code)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.split() == ["went", "on", "stopped", "130"], done.stdout + done.stderr
    assert done.stderr == "", done.stderr  # no "Exception ignored in ... Traceback"


def test_a_signal_that_lands_inside_importlib_is_delivered_again_outside_it(tmp_path):
    # Raised between importlib's taking and releasing of the import lock, the exception leaves the lock held
    # and another thread's next import waits forever (a CI run of test_tune_interrupt hung so). The handler,
    # given a frame of importlib's own code, raises nothing there and the signal comes back a moment later.
    script = tmp_path / "run.py"
    script.write_text(
        "import signal, sys, time\n"
        "from mneme.core import interrupt\n"
        "signal.signal(signal.SIGINT, signal.SIG_DFL)  # a terminal's foreground job (CI may start us ignoring it)\n"
        "interrupt.install()\n"
        "namespace = {}\n"
        "exec(compile('import sys\\ndef here():\\n    return sys._getframe()\\n', '<frozen importlib._bootstrap>', 'exec'),"
        " namespace)\n"
        "interrupt._handler(signal.SIGINT, namespace['here']())\n"
        "print('not raised inside importlib')\n"
        "try:\n"
        "    deadline = time.monotonic() + 10\n"
        "    while time.monotonic() < deadline:\n"
        "        time.sleep(0.001)\n"
        "    print('never delivered again')\n"
        "except interrupt.Interrupted as exc:\n"
        "    print('delivered again', exc.exit_code)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert done.stdout.splitlines() == ["not raised inside importlib", "delivered again 130"], done.stdout + done.stderr
