"""A third-party Mneme plugin that follows the events: one CSV row per event (the plugin author's guide's example).

Set ``MNEME_EVENTS_CSV=PATH`` and every recording loaded, variant compiled, experiment started
and finished, trial told and tuning run finished is appended to PATH as it happens, from every
process of the run (the tuning process and its workers: the `pid` column tells them apart).
Each row is one ``write`` to a file opened for appending, so rows of several processes never
interleave. Without the variable the plugin writes nothing.
"""

from __future__ import annotations

import csv
import io
import os
import time

from mneme.core.hookspecs import hookimpl

VARIABLE = "MNEME_EVENTS_CSV"
COLUMNS = ("time", "pid", "event", "kernel", "instance", "config", "trial", "status", "value", "detail")


def _append(event: str, **fields) -> None:
    path = os.environ.get(VARIABLE)
    if not path:
        return
    row = {"time": f"{time.time():.6f}", "pid": os.getpid(), "event": event, **fields}
    text = io.StringIO()
    writer = csv.DictWriter(text, COLUMNS, lineterminator="\n")
    try:  # the process that creates the file writes the header
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        writer.writeheader()
    except FileExistsError:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    writer.writerow(row)
    try:
        os.write(fd, text.getvalue().encode())
    finally:
        os.close(fd)


@hookimpl
def mneme_recording_loaded(recording):
    _append("recording_loaded", kernel=recording.kernel_name, detail=recording.static_hash)


@hookimpl
def mneme_variant_compiled(kernel_name, config, binary, cached):
    _append(
        "variant_compiled",
        kernel=kernel_name,
        config=config.hash(),
        status="cached" if cached else "built",
        detail=binary.variant_hash,
    )


@hookimpl
def mneme_experiment_started(recording, instance, config):
    _append("experiment_started", kernel=recording.kernel_name, instance=instance.dynamic_hash, config=config.hash())


@hookimpl
def mneme_experiment_finished(recording, instance, config, result):
    status = "verified" if result.verified and not result.failed else (result.error_kind or "failed")
    if result.skipped:
        status = f"skipped:{result.skipped}"
    value = sorted(result.exec_time)[len(result.exec_time) // 2] if result.exec_time else ""
    _append(
        "experiment_finished",
        kernel=recording.kernel_name,
        instance=instance.dynamic_hash,
        config=config.hash(),
        status=status,
        value=value,
    )


@hookimpl
def mneme_trial_told(run, trial):
    _append(
        "trial_told",
        kernel=run.kernel_name,
        instance=run.dynamic_hash,
        config=trial.config.hash() if trial.config is not None else "",
        trial=trial.number,
        status=trial.status,
        value=trial.value,
        detail="" if trial.cached_from is None else f"cached_from={trial.cached_from}",
    )


@hookimpl
def mneme_tuning_finished(run, summary, stop):
    best = (summary.get("best") or {}).get("time", "")
    _append(
        "tuning_finished",
        kernel=run.kernel_name,
        instance=run.dynamic_hash,
        status=stop.reason,
        value=best,
        detail=str(run.results_dir),
    )
