"""`lease.Tuners`: which tuners of an SQLite study are alive, told by the locks the kernel holds for them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from mneme.core.tuning.lease import Tuners, tuners_folder

HOLDER = """
import sys, time
from mneme.core.tuning.lease import Tuners
Tuners(sys.argv[1], "other").register({"pid": 1, "study": "s"})
print("registered", flush=True)
time.sleep(600)
"""


def test_a_sqlite_study_has_its_tuners_registered_beside_its_file_and_other_storages_none(tmp_path):
    assert tuners_folder(f"sqlite:///{tmp_path}/run/study.db") == tmp_path / "run" / ".study.db.tuners"
    assert tuners_folder("sqlite:///rel/x.db?timeout=5") == Path("rel/.x.db.tuners")
    for url in ("sqlite://", "sqlite:///:memory:", "journal:/shared/study.log", "postgresql://u@h/db"):
        assert tuners_folder(url) is None, url


def test_a_tuner_is_alive_while_its_process_lives_and_its_entry_goes_when_it_is_killed(tmp_path):
    folder = tmp_path / ".study.db.tuners"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    me = Tuners(folder, "me")
    try:
        assert holder.stdout.readline() == "registered\n"
        me.register({"pid": 2, "study": "s"})
        assert me.others() == {"other": {"pid": 1, "study": "s", "session": "other"}}
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert me.others() == {}
        assert sorted(p.name for p in folder.iterdir()) == ["lock", "me.tuner"]
    finally:
        holder.kill()
        me.close()
    assert sorted(p.name for p in folder.iterdir()) == ["lock"]


def test_the_lock_is_one_process_at_a_time_and_reentrant_within_one(tmp_path):
    folder = tmp_path / "t"
    first, second = Tuners(folder, "a"), Tuners(folder, "b")
    code = (
        "import sys, time\nfrom mneme.core.tuning.lease import Tuners\nwith Tuners(sys.argv[1], 'c').lock():\n"
        "    print(time.monotonic(), flush=True)"
    )
    waiter = None
    try:
        with first.lock(), first.lock():  # re-entrant
            waiter = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
            time.sleep(1.5)
            released = time.monotonic()
        assert float(waiter.stdout.readline()) >= released  # the other process waited for its turn
        with second.lock():  # another Tuners of this process is another holder: free now
            pass
    finally:
        if waiter is not None:
            waiter.kill()
        first.close()
        second.close()
