"""The plugin author's guide's worked examples (docs/design/interfaces.md), installed as real entry points.

Each example under examples/plugins is installed with pip into a folder of its own and reached
through PYTHONPATH, as a user's `pip install` would make it visible: `mneme plugins` lists its
distribution, and the commands run it from entry-point discovery, in fresh processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mneme import capture
from mneme.core.records import RecordedExecution

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "plugins"

pytest.importorskip("setuptools", reason="needs setuptools: installing the examples without build isolation")


def install(example: str, target: Path) -> Path:
    """`pip install --no-deps --no-build-isolation --target TARGET examples/plugins/EXAMPLE`."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(EXAMPLES / example),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return target


def mneme(site: Path, *args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "250", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "mneme", *map(str, args)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=400,
        check=False,
    )


def listed(site: Path, kind: str, name: str) -> str:
    """The distribution `mneme plugins` names for plugin `name` of `kind`."""
    proc = mneme(site, "plugins")
    assert proc.returncode == 0, proc.stderr[-4000:]
    for line in proc.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) >= 3 and cells[0] == kind and cells[1] == name:
            return cells[3]
    raise AssertionError(f"{kind} {name!r} not listed by `mneme plugins`:\n{proc.stdout}")


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory) -> Path:
    """A capture of examples/saxpy on the host backend."""
    return capture.capture_spec(
        ROOT / "examples" / "saxpy" / "capture.yaml", tmp_path_factory.mktemp("db"), backend="host"
    )


def test_a_third_party_sampler_tunes_through_its_entry_point(tmp_path, saxpy):
    site = install("mneme-hillclimb", tmp_path / "site")
    assert listed(site, "sampler", "hillclimb") == "mneme-hillclimb"
    results = tmp_path / "results"
    tuned = mneme(
        site,
        "tune",
        "-rdb",
        saxpy,
        "--backend",
        "host",
        "--sampler",
        "hillclimb",
        "--seed",
        "5",
        "--trials",
        5,
        "--retime-top",
        1,
        "--retime-repeats",
        1,
        "--results",
        results,
        "--json",
    )
    assert tuned.returncode == 0, tuned.stdout[-2000:] + tuned.stderr[-4000:]
    summary = json.loads(tuned.stdout)
    assert summary["session"]["sampler"] == "hillclimb"
    assert summary["counts"]["trials"] == 5 and summary["counts"]["ok"] == 5 and summary["counts"]["unverified"] == 0
    assert summary["best"]["time"] > 0 and (results / "best.json").is_file()
    # hill climbing proposes distinct points: five trials, five configurations
    assert len({json.dumps(row["config"], sort_keys=True) for row in summary["ranking"]}) == len(summary["ranking"])


def test_without_the_example_installed_its_sampler_is_unknown(tmp_path, saxpy):
    tuned = mneme(
        tmp_path,
        "tune",
        "-rdb",
        saxpy,
        "--backend",
        "host",
        "--sampler",
        "hillclimb",
        "--trials",
        1,
        "--results",
        tmp_path / "results",
    )
    assert tuned.returncode == 2 and "unknown sampler 'hillclimb'" in tuned.stderr


def test_a_third_party_backend_replays_and_traces_every_launch(tmp_path, saxpy):
    site = install("mneme-traced-host", tmp_path / "site")
    assert listed(site, "backend", "traced-host") == "mneme-traced-host"
    trace = tmp_path / "trace.jsonl"
    replayed = mneme(
        site,
        "replay",
        "-rdb",
        saxpy,
        "--backend",
        "traced-host",
        "--iterations",
        3,
        "--json",
        env={"MNEME_TRACE_FILE": str(trace)},
    )
    assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-4000:]
    result = json.loads(replayed.stdout)["result"]
    assert result["verified"] is True and result["backend"] == "traced-host"
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    timed = [line["seconds"] for line in lines if line["timed"]]
    assert timed == result["warmup_time"] + result["exec_time"]  # every timed run, with the seconds it reported
    assert len(lines) > len(timed)  # and the untimed launch that produced the verified output
    instance = RecordedExecution.from_json(saxpy).select()
    grid, block = ((d.x, d.y, d.z) for d in (instance.grid_dim, instance.block_dim))
    assert {(line["kernel"], tuple(line["grid"]), tuple(line["block"])) for line in lines} == {("saxpy", grid, block)}


def test_a_third_party_backend_of_lower_priority_is_never_the_default(tmp_path):
    site = install("mneme-traced-host", tmp_path / "site")
    probe = (
        "from mneme.core.backend import backend_for_arch, backends, default_backend\n"
        "import platform\n"
        "print(sorted(backends()), default_backend().name, backend_for_arch(platform.machine()).name)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    names, default, for_arch = proc.stdout.rsplit(maxsplit=2)
    assert "'traced-host'" in names and default != "traced-host" and for_arch == "host"


def test_an_event_plugin_sees_every_experiment_and_trial_of_a_tuning_run_once_in_order(tmp_path, saxpy):
    import csv

    from mneme.core.tuning.store import EVALUATED, ResultStore

    site = install("mneme-csv-events", tmp_path / "site")
    events_csv, results = tmp_path / "events.csv", tmp_path / "results"
    tuned = mneme(
        site,
        "tune",
        "-rdb",
        saxpy,
        "--backend",
        "host",
        "--sampler",
        "random",
        "--seed",
        "3",
        "--trials",
        4,
        "--retime-top",
        1,
        "--retime-repeats",
        1,
        "--measure-time",
        0.5,
        "--results",
        results,
        "--json",
        env={"MNEME_EVENTS_CSV": str(events_csv)},
    )
    assert tuned.returncode == 0, tuned.stdout[-2000:] + tuned.stderr[-4000:]
    summary = json.loads(tuned.stdout)
    rows = list(csv.DictReader(events_csv.open()))
    # The tuning process reports the recording, the experiments (its workers', through the pool) and the trials.
    (loaded,) = [row for row in rows if row["event"] == "recording_loaded"]
    assert rows[0] is loaded and loaded["kernel"] == "saxpy"
    own = [row for row in rows if row["pid"] == loaded["pid"]]
    assert own[-1]["event"] == "tuning_finished" and own[-1]["status"] == summary["stop"]["reason"] == "budget"
    assert [row["event"] for row in rows].count("tuning_finished") == 1
    # one worker: each experiment starts, then finishes, before the next starts
    experiments = [row for row in own if row["event"].startswith("experiment_")]
    assert [row["event"] for row in experiments] == ["experiment_started", "experiment_finished"] * (
        len(experiments) // 2
    )
    assert all(s["config"] == f["config"] for s, f in zip(experiments[::2], experiments[1::2]))
    # every stored trial is told once, and one that ran follows its own experiment's end
    told = [row for row in own if row["event"] == "trial_told"]
    store = ResultStore.load(f"sqlite:///{results / 'study.db'}")
    stored = {record.number: record for record in store.records() if record.state == "COMPLETE"}
    assert sorted(int(row["trial"]) for row in told) == sorted(stored)
    finished = [i for i, row in enumerate(own) if row["event"] == "experiment_finished"]
    for row in told:
        assert row["status"] == stored[int(row["trial"])].status and row["config"] == stored[int(row["trial"])].hash
        if row["status"] in EVALUATED:  # its own experiment ended before (the next may have started meanwhile)
            ends = [i for i in finished if i < own.index(row) and own[i]["config"] == row["config"]]
            assert ends, row
            finished.remove(ends[0])
    assert sum(row["status"] in EVALUATED for row in told) == summary["counts"]["trials"] == 4
    # the baseline, the trials and the comparison's runs: all experiments, each compiled where it ran
    pairs = sum(entry["pairs"] for entry in store.retime.values() if not entry["baseline"])
    assert pairs >= 3 and len(experiments) // 2 == 1 + 4 + 2 * pairs  # the baseline, the trials, the comparison
    compiled = {row["config"] for row in rows if row["event"] == "variant_compiled"}
    assert {row["config"] for row in experiments} <= compiled
    assert all(row["pid"] != loaded["pid"] for row in rows if row["event"] == "variant_compiled")
