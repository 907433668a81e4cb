"""`mneme nondeterminism`: which outputs of a recorded kernel depend on the threads' order, why, and the
float policy with a bound that verifies them (stored with --apply, overridable with `mneme annotate`)."""

from __future__ import annotations

import click
from rich.table import Table

from mneme.core import limits
from mneme.core.console import current as _console
from mneme.core.errors import EXIT_CODES_HELP


@click.command("nondeterminism", epilog=EXIT_CODES_HELP)
@click.option("-rdb", "--record-db", "record_db", required=True, type=click.Path(exists=True),
              help="Recording database (or its folder).")
@click.option("-rid", "--record-id", "record_id", default=None, help="Instance (dynamic hash); default: the first.")
@click.option("--runs", type=click.IntRange(min=2), default=3, show_default=True,
              help="Replays of the recorded configuration to compare.")
@click.option("--margin", type=click.FloatRange(min=1.0), default=4.0, show_default=True,
              help="The bound is the largest observed error times this.")
@click.option("--mode", type=click.Choice(["ir", "ptx", "cubin"]), default=None,
              help="What to replay: the application's own binary (the default where the recording has it: the "
                   "recorded numerics) or the IR.")
@click.option("--backend", default=None, help="Backend (default: the recorded one; host when that is not usable).")
@click.option("--apply", "apply_", is_flag=True, help="Store the derived policies in the recording's epilogue.")
@limits.timeout_option
def nondeterminism_command(record_db, record_id, runs, margin, mode, backend, apply_) -> None:
    """Find the order-dependent outputs of a recorded launch and derive the policy that verifies them.

    Reads the kernel's IR for float atomics, exchanges and atomically handed-out indexes, and replays
    the recorded configuration RUNS times: a region whose bytes differ between replays or from the
    recording is order-dependent. Its policy accepts MARGIN times the largest error seen.
    """
    from mneme.core.executor import BaseExecutor, load_recording
    from mneme.core.nondeterminism import analyze
    from mneme.plugins.replay_commands import annotate

    if mode is None:
        kinds = {image.kind for image in load_recording(record_db).binary_blobs}
        mode = "cubin" if "cubin" in kinds else ("ptx" if "ptx" in kinds else "ir")
    with BaseExecutor(record_db, record_id, iterations=1, backend=backend, mode=mode, cache="warm") as ex:
        findings = analyze(ex, runs=runs, margin=margin)
        database, instance = ex.rec.path, ex.instance.dynamic_hash
    table = Table(title=f"{database.name} [{instance}]: regions the kernel writes")
    for column in ("region", "order-dependent because", "between replays", "vs the recording", "policy"):
        table.add_column(column, overflow="fold")
    for f in findings:
        where = f"arg {f.arg}" if f.arg is not None else f"0x{f.addr:x}"
        why = "; ".join(f.reasons) or ("replays differ" if f.runs_differ else "-")
        between = f.between_runs.describe() if f.between_runs else ("differ (not floats)" if f.runs_differ else "same")
        recorded = "same" if f.matches_recording else (f.vs_recording.describe() if f.vs_recording else "differs")
        policy = str(f.policy) if f.policy else (f.note or "-")
        table.add_row(where, why, between, recorded, policy)
    _console().print(table)
    chosen = [f for f in findings if f.policy is not None]
    for f in chosen:
        if apply_:
            annotate(database, f.policy, record_id=instance, address=f.addr)
    if chosen:
        verb = "stored in" if apply_ else "to store in (--apply)"
        _console().print(f"{len(chosen)} policy(ies) {verb} the recording; override one with mneme annotate "
                         f"{database} -rid {instance} --region 0x{chosen[0].addr:x} ...")  # fmt: skip
