"""`mneme tune` and `mneme results` as a user runs them: real processes, real recordings, exit codes,
a tuner killed and resumed, tuners sharing one study through a journal file and through PostgreSQL."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tuning_sessions import capture_saxpy

from mneme.core.tuning.report import open_results
from mneme.core.tuning.store import COUNTED, EVALUATED, ResultStore

CLI = [sys.executable, "-m", "mneme"]
SPACE = ["--space", "quick", "-o", "axes=x", "--retime-top", "1", "--retime-repeats", "1"]


def mneme(*args, timeout=240, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *map(str, args)], check=False, capture_output=True, text=True, timeout=timeout, **kwargs
    )


@pytest.fixture(scope="module")
def saxpy_db(tmp_path_factory):
    return capture_saxpy(tmp_path_factory.mktemp("saxpy"))


def invoke(*args) -> tuple[int, str]:
    """The CLI in this process (click's runner): exit code and everything it printed."""
    from click.testing import CliRunner

    from mneme.core.cli import cli

    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, " ".join((result.output + getattr(result, "stderr", "")).split())


def test_print_space_shows_the_dimensions_without_running_anything(saxpy_db, tmp_path):
    code, out = invoke("tune", "-rdb", saxpy_db, "--space", "standard", "--print-space", "--results", tmp_path / "r")
    assert code == 0, out
    for word in (
        "block_x",
        "specialize",
        "passes",
        "codegen_opt",
        "feasible distinct configurations",
        "recorded launch: grid (16, 1, 1), block (256, 1, 1)",
    ):
        assert word in out
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trials", "0"], "--trials must be >= 1"),
        (["--sampler", "annealing"], "unknown sampler 'annealing'"),
        (["--sampler", "nevergrad:ngopt"], "did you mean NGOpt"),
        (["--space", "nowhere"], "unknown space 'nowhere'"),
        (["-o", "axes=w"], "axes='w'"),
        (["--storage", "redis-ish"], "journal:PATH"),
        (["--devices", "0,0"], "distinct"),
        (["--max-pairs", "2"], "--max-pairs must be >= 3"),
    ],
)
def test_invalid_options_exit_with_code_2_and_say_what_is_wrong(saxpy_db, tmp_path, args, message):
    code, out = invoke("tune", "-rdb", saxpy_db, "--results", tmp_path / "r", *args)
    assert code == 2, out
    assert message in out


def test_tune_then_results_reprints_exports_and_plots(saxpy_db, tmp_path):
    results = tmp_path / "run"
    code, out = invoke(
        "tune", "-rdb", saxpy_db, "--sampler", "optuna:tpe", "--trials", 6, "--seed", 1, "--results", results, *SPACE
    )
    assert code == 0, out
    assert "best configurations" in out and "speedup" in out and "interval" in out
    summary = json.loads((results / "summary.json").read_text())
    compared = [c for c in summary["ranking"] if c["retimed"] and not c["baseline"]]
    assert compared and all(c["speedup_ci"][0] <= c["speedup"] <= c["speedup_ci"][1] for c in compared)
    assert compared[0]["method"].startswith("interleaved")
    # the cap of the comparison's pairs, and what went past the first look, are shown and kept
    measurement = summary["measurement"]
    assert measurement["max_pairs"] == 960 and measurement["looks"] == [60, 120, 240, 480, 960]
    assert "comparison: at most 960 pairs per candidate" in out
    assert measurement["extra_pairs"] == sum(c["extra_pairs"] for c in compared)
    assert all(c["pairs"] >= 3 for c in compared)
    if not any(c["significant"] and c["speedup"] > 1 for c in summary["ranking"]):
        assert summary["best"]["baseline"] and "no significant difference" in summary["decision"]
    for name in ("best.json", "tuned-kernels.json", "summary.json", "session.json", "study.db"):
        assert (results / name).is_file(), name
    code, out = invoke(
        "results", results, "--csv", tmp_path / "t.csv", "--jsonl", tmp_path / "t.jsonl", "--plots", tmp_path / "plots"
    )
    assert code == 0, out
    assert "best configurations" in out
    with open(tmp_path / "t.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len([r for r in rows if r["status"] in EVALUATED]) == 6  # --trials counts distinct measured ones
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert {line["number"] for line in lines} == {int(r["number"]) for r in rows}
    for name in ("speedups", "history", "importances", "parallel-coordinates"):
        assert (tmp_path / "plots" / f"{name}.html").is_file(), name
        png = (tmp_path / "plots" / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n"), name  # a real PNG, drawn by matplotlib
        assert len(png) > 10_000, (name, len(png))  # axes, marks and labels: more than an empty canvas
    # `mneme replay --config best.json` reproduces the best configuration, and it verifies.
    code, out = invoke("replay", "-rdb", saxpy_db, "--config", results / "best.json", "--json")
    assert code == 0, out
    assert '"verified": true' in out


def test_plots_a_study_cannot_make_are_skipped_with_a_warning_not_an_error(tmp_path, caplog):
    import optuna

    from mneme.core.tuning.report import write_plots
    from mneme.plugins.samplers.optuna_store import OptunaStore

    study = optuna.create_study(direction="minimize")
    study.add_trial(
        optuna.trial.create_trial(
            params={"block_x": 4},
            value=2e-5,
            user_attrs={"status": "ok"},
            distributions={"block_x": optuna.distributions.IntDistribution(1, 9)},
        )
    )
    store = ResultStore(OptunaStore(study, "memory"))
    with caplog.at_level("WARNING", logger="mneme.plugins.samplers.optuna_plots"):
        written = write_plots(store, tmp_path / "one")
    names = {p.name for p in written}
    assert {"history.png", "history.html", "parallel-coordinates.png"} <= names
    assert not any(n.startswith("importances") for n in names)
    assert [r.getMessage() for r in caplog.records] == [
        "skipped the importances plot: parameter importances need at least 2 verified trials, the study has 1"
    ]
    assert write_plots(store, tmp_path / "png", "png") == [
        tmp_path / "png" / f"{n}.png" for n in ("history", "parallel-coordinates", "slice")
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="mneme.core.tuning.report"):
        assert write_plots(ResultStore(OptunaStore(optuna.create_study(), "memory")), tmp_path / "none") == []
    assert "no verified trial" in caplog.text


def test_an_unknown_timer_is_refused_before_any_worker_starts(saxpy_db, tmp_path):
    results = tmp_path / "run"
    code, out = invoke("tune", "-rdb", saxpy_db, "--trials", 3, "--results", results, "--timer", "cuptii", *SPACE)
    assert code == 2, out
    assert "the host backend has no timer 'cuptii'; use one of auto, host-clock" in out
    assert not results.exists()  # refused before the results folder, the storage or a worker was made


def test_a_results_folder_is_continued_only_with_resume_and_only_for_the_same_space(saxpy_db, tmp_path):
    results = tmp_path / "run"
    assert invoke("tune", "-rdb", saxpy_db, "--trials", 3, "--results", results, *SPACE)[0] == 0
    code, out = invoke("tune", "-rdb", saxpy_db, "--trials", 6, "--results", results, *SPACE)
    assert code == 2 and "--resume" in out
    code, out = invoke(
        "tune", "-rdb", saxpy_db, "--trials", 6, "--results", results, "--resume", "--space", "launch", "-o", "axes=x"
    )
    assert code == 2 and "search space" in out and "--force" in out
    code, out = invoke(
        "tune", "-rdb", saxpy_db, "--trials", 6, "--results", results, "--resume", "--cache", "primed", *SPACE
    )
    assert code == 2 and "cache state of timed runs" in out and "'flushed'" in out and "'primed'" in out
    code, out = invoke(
        "tune", "-rdb", saxpy_db, "--trials", 6, "--results", results, "--resume", "--timer", "host-clock", *SPACE
    )
    assert code == 2 and "timer of timed runs" in out and "'auto'" in out and "'host-clock'" in out
    code, out = invoke("tune", "-rdb", saxpy_db, "--trials", 5, "--results", results, "--resume", *SPACE)
    assert code == 0, out
    store, _ = open_results(results)
    # --trials counts distinct measured configurations; a proposal that compiled to code already
    # measured is answered from the store (status cached) and spends none of it
    assert store.budget_used() == 5


def test_a_baseline_that_does_not_verify_exits_with_code_3(tmp_path):
    # The recording's IR is replaced by a kernel of the same signature that computes something else.
    db = capture_saxpy(tmp_path / "rec")
    module = next((tmp_path / "rec").glob("*.ll"))
    text = module.read_text()
    module.write_text(text.replace("fadd", "fsub") if "fadd" in text else text.replace("fmul", "fdiv"))
    out = mneme("tune", "-rdb", db, "--trials", 3, "--results", tmp_path / "r")
    assert out.returncode == 3, out.stdout + out.stderr
    assert "does not replay correctly" in " ".join(out.stderr.split())


def _finished(results: Path) -> dict[int, tuple[str, float]]:
    if not (results / "session.json").exists():  # written once the tuner has created its store
        return {}
    try:
        store = ResultStore.load(f"sqlite:///{results / 'study.db'}")
    except Exception:  # not created yet
        return {}
    return {r.number: (r.hash, r.value) for r in store.records() if r.status in COUNTED}


def test_a_killed_tuner_resumes_without_losing_or_repeating_experiments(saxpy_db, tmp_path):
    results = tmp_path / "run"
    args = ["tune", "-rdb", saxpy_db, "--sampler", "exhaustive", "--trials", 24, "--results", results, *SPACE]
    proc = subprocess.Popen(
        [*CLI, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while len(_finished(results)) < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert proc.poll() is None, "the tuner finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its worker processes
        except ProcessLookupError:
            pass
    before = _finished(results)
    assert 6 <= len(before) < 24
    out = mneme(*args, "--resume")
    assert out.returncode == 0, out.stderr
    store, _ = open_results(results)
    records = store.records()
    after = {r.number: (r.hash, r.value) for r in records if r.status in COUNTED}
    assert all(after[n] == before[n] for n in before)  # nothing finished was lost or changed
    assert len(after) == 24
    ran = [r.hash for r in records if r.status in EVALUATED]
    assert len(ran) == len(set(ran))  # nothing ran twice
    for r in records:
        if r.status == "interrupted" and r.config:
            assert r.hash in ran  # an interrupted experiment ran again


def _run_two(db, tmp_path, storage, study):
    # 40 of the space's 44 points: long enough that the second process joins before the first is done.
    args = [
        "tune",
        "-rdb",
        db,
        "--sampler",
        "exhaustive",
        "--trials",
        40,
        "--storage",
        storage,
        "--study",
        study,
        *SPACE,
    ]
    procs = [
        subprocess.Popen(
            [*CLI, *map(str, args), "--results", tmp_path / f"r{i}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
    store = ResultStore.load(storage, study)
    records = store.records()
    ran = [r.hash for r in records if r.status in EVALUATED]
    # The budget counts experiments run. Both processes check it before each ask, so each may take
    # one more while the other takes the last; a point the other process measured meanwhile is
    # answered from the store (`cached`) and spends nothing.
    assert 40 <= len(ran) <= 42
    by_number = {r.number: r for r in records}
    for r in records:
        if r.status == "cached":
            assert by_number[r.cached_from].status in EVALUATED  # answered by an experiment that ran
    pids = {r.owner["pid"] for r in records if r.status in COUNTED}
    assert pids == {p.pid for p in procs}  # both processes worked on the one study
    # Exhaustive splits the points between them: the earlier trial of a configuration wins.
    assert len(ran) == len(set(ran))


def test_two_tuners_share_one_study_through_a_journal_file(saxpy_db, tmp_path):
    _run_two(saxpy_db, tmp_path, f"journal:{tmp_path / 'shared' / 'study.log'}", "shared")


def _postgres_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for path in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(path)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def postgres_url():
    """A PostgreSQL server of our own in a temporary folder, on a free localhost port."""
    initdb, pg_ctl = _postgres_bin("initdb"), _postgres_bin("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("needs postgresql-15: the server's initdb and pg_ctl (apt-get install postgresql-15)")
    pytest.importorskip("psycopg", reason="needs psycopg: pip install 'psycopg[binary]'")
    folder = Path(tempfile.mkdtemp(prefix="mneme-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: run it as an unprivileged user
        import pwd

        user = "postgres" if any(p.pw_name == "postgres" for p in pwd.getpwall()) else "nobody"
        shutil.chown(folder, user)
        folder.chmod(0o755)
        prefix = ["runuser", "-u", user, "--"]
    data, port = folder / "data", _free_port()
    subprocess.run(
        [*prefix, initdb, "-D", data, "-U", "mneme", "--auth=trust", "-E", "UTF8"], check=True, capture_output=True
    )
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [*prefix, pg_ctl, "-D", data, "-o", options, "-l", folder / "log", "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://mneme@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", data, "-m", "immediate", "stop"], check=False, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_two_tuners_share_one_study_through_postgresql(saxpy_db, tmp_path, postgres_url):
    _run_two(saxpy_db, tmp_path, postgres_url, "shared-pg")


def _victim_running(storage: str, study: str, pid: int) -> list:
    try:
        store = ResultStore.load(storage, study)
    except Exception:  # not created yet
        return []
    return [
        t for t in store.trials() if t.state.name == "RUNNING" and (t.user_attrs.get("owner") or {}).get("pid") == pid
    ]


def _on_another_host() -> list[str]:
    """A command prefix that runs a process under another host name (a UTS namespace), as if on another node.

    Then the survivor cannot see that the process is gone; only the lapsed lease tells it.
    """
    for prefix in (["unshare", "--uts"], ["unshare", "--map-root-user", "--uts"]):
        command = [*prefix, "sh", "-c", 'hostname mneme-other-node && exec "$@"', "sh"]
        try:
            probe = subprocess.run([*command, "hostname"], capture_output=True, text=True, timeout=30)
        except OSError:
            break
        if probe.returncode == 0 and probe.stdout.strip() == "mneme-other-node":
            return command
    pytest.skip("cannot start a process under another host name (unshare --uts needs root or user namespaces)")


def _one_tuner_dies_holding_running_trials(db, tmp_path, storage, study):
    trials = 30
    elsewhere = _on_another_host()
    args = [
        "tune",
        "-rdb",
        db,
        "--sampler",
        "exhaustive",
        "--trials",
        trials,
        "--storage",
        storage,
        "--study",
        study,
        "--heartbeat",
        1,
        *SPACE,
    ]
    survivor = subprocess.Popen(
        [*CLI, *map(str, args), "--results", tmp_path / "survivor"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # The victim times each experiment long (1500 runs, about 0.3 s on the host backend), so it spends most of its
    # time inside a running trial that has its configuration: stopped at any moment, it holds one.
    victim = subprocess.Popen(
        [*elsewhere, *CLI, *map(str, args), "--iterations", "1500", "--results", tmp_path / "victim"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        held: dict = {}
        found_duplicate: set = set()
        while time.monotonic() < deadline and victim.poll() is None:
            if sum(r.owner.get("pid") == victim.pid for r in _finished_in(storage, study)) >= 2:
                os.killpg(victim.pid, signal.SIGSTOP)  # frozen, its trials stay as they are while we look
                running = _victim_running(storage, study, victim.pid)
                held = {t.number: t.user_attrs.get("hash") for t in running}
                # A trial stopped between being found a duplicate of another's running one and being told so
                # stays a duplicate: its configuration is that other trial's to run.
                found_duplicate = {t.number for t in running if t.user_attrs.get("status") == "duplicate"}
                if any(held.values()):
                    break
                os.killpg(victim.pid, signal.SIGCONT)
            time.sleep(0.05)
        assert any(held.values()), "the victim never held a running trial with a configuration"
        os.killpg(victim.pid, signal.SIGKILL)  # the tuner and its workers, as when a node is lost
        victim.wait()
        stdout, stderr = survivor.communicate(timeout=240)
    finally:
        for proc in (survivor, victim):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert survivor.returncode == 0, stderr
    records = ResultStore.load(storage, study).records()
    by_number = {r.number: r for r in records}
    complete = [r for r in records if r.status in EVALUATED]
    ran = [r.hash for r in complete]
    assert len(ran) == len(set(ran))  # no configuration counted twice as complete
    assert not [r.number for r in records if r.state == "RUNNING"]
    counted = [r for r in records if r.status in COUNTED]
    for number, digest in held.items():
        expected = "duplicate" if number in found_duplicate else "interrupted"
        assert (by_number[number].state, by_number[number].status) == ("FAIL", expected)
        same = [(r.number, r.state, r.status, r.owner.get("pid")) for r in records if r.hash == digest]
        if digest and number not in found_duplicate:  # the survivor asked the configuration again, and ran it
            assert any(r.hash == digest and r.owner["pid"] == survivor.pid for r in counted), (
                number,
                same,
                stderr[-4000:],
            )
        if digest:  # evaluated: by the survivor, or by the trial a duplicate left it to
            assert digest in ran, (number, same)
    # Both check the shared budget before each ask (at most 2 over), and the survivor runs what the victim held again.
    assert trials <= len(counted) <= trials + 2 + len(held)
    assert {r.owner["pid"] for r in counted} == {survivor.pid, victim.pid}
    assert {r.owner["host"] for r in counted} == {socket.gethostname(), "mneme-other-node"}


def _finished_in(storage: str, study: str) -> list:
    try:
        return [r for r in ResultStore.load(storage, study).records() if r.status in COUNTED]
    except Exception:
        return []


def test_a_tuner_killed_while_sharing_a_journal_study_has_its_trials_failed_and_rerun_by_the_other(saxpy_db, tmp_path):
    _one_tuner_dies_holding_running_trials(saxpy_db, tmp_path, f"journal:{tmp_path / 'shared' / 'study.log'}", "lease")


def test_a_tuner_killed_while_sharing_a_postgresql_study_has_its_trials_failed_and_rerun_by_the_other(
    saxpy_db, tmp_path, postgres_url
):
    _one_tuner_dies_holding_running_trials(saxpy_db, tmp_path, postgres_url, "lease-pg")


def test_tuning_on_two_devices_runs_experiments_on_both(saxpy_db, tmp_path):
    results = tmp_path / "run"
    out = mneme(
        "tune",
        "-rdb",
        saxpy_db,
        "--sampler",
        "exhaustive",
        "--trials",
        16,
        "--devices",
        "0,1",
        "--results",
        results,
        *SPACE,
        env={**os.environ, "MNEME_HOST_DEVICES": "2"},
    )
    assert out.returncode == 0, out.stderr
    store, _ = open_results(results)
    ran = [r for r in store.records() if r.status in EVALUATED]
    assert len(ran) == 16
    assert {r.result["gpu_id"] for r in ran} == {0, 1}
    assert {r.result["device"].split()[0] for r in ran} == {"host:0", "host:1"}


def test_a_device_that_does_not_exist_exits_with_code_2_and_names_it(saxpy_db, tmp_path):
    out = mneme(
        "tune",
        "-rdb",
        saxpy_db,
        "--trials",
        2,
        "--devices",
        "0,3",
        "--results",
        tmp_path / "r",
        *SPACE,
        env={k: v for k, v in os.environ.items() if k != "MNEME_HOST_DEVICES"},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "device 3 of --devices 0,3" in " ".join(out.stderr.split())
