"""The ask -> run -> tell loop of a tuning session over its worker pool.

Every trial goes to the result store before and after it runs. What ``--trials`` buys is
distinct measured configurations (grounded hashes): a proposal whose configuration was
measured already (this run, an earlier one, another process) is answered from the store
as a ``cached`` trial and spends no budget, and the sampler is asked again; so is one that
compiled to code already measured with the same launch (`outcome.equivalence_key`). A proposal of
a configuration in flight waits for that experiment's result. A sampler that proposes only
known configurations for `MAX_DUPLICATES` asks in a row has exhausted the space.

A first SIGINT/SIGTERM (`mneme.core.interrupt`) stops the asking; the experiments in flight
are cancelled and their trials marked ``interrupted``, to be run first on ``--resume``.

The study is shared (`TrialLoop.shared`) when ``--storage`` says it may be, or, checked at every
ask, while another live tuner is registered on its SQLite file (`lease.Tuners`); then the budget
is the study's count and each ask first learns what the others took. Where the tuners are
registered, each ask (budget check, the study's ask, the trial's claim) is taken under their lock,
so together they measure exactly ``--trials``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from mneme.core import events, interrupt
from mneme.core.errors import UsageError
from mneme.core.tuning.context import ToldTrial
from mneme.core.tuning.lease import TrialFinished, describe_owner, grace_for
from mneme.core.tuning.outcome import equivalence_key, failure_kind, judged, objective, result_of, status_of
from mneme.core.tuning.samplers import Ask
from mneme.core.tuning.space import MAX_SAMPLE_RETRIES
from mneme.core.tuning.store import EVALUATED
from mneme.core.types import ExperimentConfiguration, ExperimentResult

if TYPE_CHECKING:
    from mneme.core.tuning.context import LoopContext

log = logging.getLogger(__name__)

RIVAL_WAIT = 2.0  # seconds to wait for another process's just-asked trial to name its configuration
MAX_DUPLICATES = 100  # proposals in a row of measured configurations that mean the space is exhausted


@attrs.define
class Pending:
    trial: Any  # the store's running trial
    ask: Ask | None
    encoded: dict[str, Any]
    config: ExperimentConfiguration
    digest: str
    submitted: float = 0.0


@attrs.frozen
class Next:
    """What `TrialLoop.next` came to: `RUN` its `pending` experiment; the point was `ANSWERED` without
    running (from the store, or by an experiment in flight); the sampler is `EXHAUSTED`."""

    RUN: ClassVar[str] = "run"
    ANSWERED: ClassVar[str] = "answered"
    EXHAUSTED: ClassVar[str] = "exhausted"

    kind: str
    pending: Pending | None = None


#: Why the search stopped (`TrialLoop.run`'s answer): the budget spent, --timeout, the sampler out of
#: new points, or a signal.
STOP_REASONS = ("budget", "timeout", "exhausted", "interrupted")


class TrialLoop:
    """The ask/tell state of one session: what is queued again, seen, measured, in flight."""

    def __init__(self, ctx: LoopContext):
        self.ctx = ctx
        self.requeue: list[dict[str, Any]] = []
        self._carried: Ask | None = None  # our sampler's point, when the study handed out a requeued one
        self._awaited: dict[int, float] = {}  # other processes' running trials we wait on: since when
        self.seen: set[int] = set()
        self.evaluated: dict[str, tuple[int, float]] = {}
        self.in_flight: dict[concurrent.futures.Future, Pending] = {}
        self.duplicates: dict[str, list[Pending]] = {}
        self.equivalents: dict[str, tuple[int, float]] = {}  # equivalence key -> (trial, value) measured first
        self.used = 0
        self._shared = ctx.shared  # see `shared`
        self._streak = 0  # proposals in a row answered from the store
        self._equivalent_streak = 0  # experiments in a row that compiled to code measured already

    @property
    def store(self):
        return self.ctx.store

    @property
    def shared(self) -> bool:
        """Whether other processes may use the study: ``--storage``, or another live tuner of its file at the last
        `_turn`."""
        return self._shared

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """One ask's turn: under the tuners' lock where they are registered, knowing whether others are alive."""
        tuners = self.ctx.tuners
        if tuners is None:
            yield
            return
        with tuners.lock():
            was = self._shared
            self._shared = self.ctx.shared or bool(tuners.others())
            if was and not self._shared:  # alone again: go on from the study's count, the departed's trials failed
                self.recover()
                self.used = self.store.budget_used()
            yield

    # -- start --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Learn the study: what was measured, what earlier runs left interrupted (run those first)."""
        self.evaluated = {digest: (r.number, r.value) for digest, r in self.store.evaluated().items()}
        queued: set[str] = set()
        for trial in self.store.trials(states=("FAIL",)):
            digest = trial.user_attrs.get("hash")
            if (
                trial.user_attrs.get("status") == "interrupted"
                and digest
                and trial.params
                and digest not in self.evaluated
                and digest not in queued
            ):
                queued.add(digest)
                self.requeue.append(dict(trial.params))
                self.ctx.sampler.observe(trial.params, None)  # exhaustive must not propose it again
        if queued:
            log.info("running %d configuration(s) an earlier run left interrupted first", len(queued))
        self.sync()

    def known_code(self, config: ExperimentConfiguration, code_hash: str) -> ExperimentResult | None:
        """A skipped result when `code_hash` launched as `config` launches was measured already (called
        from the pool's threads once a binary is built ahead; `finish` answers it from that trial)."""
        key = equivalence_key({"code_hash": code_hash}, config.to_dict())
        if key and key in self.equivalents:
            return ExperimentResult(code_hash=code_hash, skipped="equivalent")
        return None

    # -- recovery and synchronisation ---------------------------------------------------------------
    def recover(self) -> None:
        """Fail the trials of dead processes (this session noticed first) and queue their points again."""
        s = self.ctx
        failed = self.store.fail_stale(s.watch, s.run.session_id) + self._fail_departed()
        if failed and not self.shared:
            self.used = self.store.budget_used()  # our count held their trials (counted when it was taken)
        for trial in failed:
            if trial.user_attrs.get("status") == "duplicate":  # the trial it deferred to runs its configuration
                log.info("trial %d of %s ended a duplicate", trial.number, describe_owner(trial))
                continue
            if not trial.user_attrs.get("config"):
                log.info(
                    "trial %d of %s was interrupted before it chose a configuration",
                    trial.number,
                    describe_owner(trial),
                )
                continue
            log.warning(
                "trial %d was interrupted (%s is gone: dead on this host, or its lease lapsed); "
                "running its configuration again",
                trial.number,
                describe_owner(trial),
            )
            self.requeue.append(dict(trial.params))
            s.sampler.observe(trial.params, None)  # exhaustive must not propose it a second time

    def _fail_departed(self) -> list[Any]:
        """Where the tuners are registered: fail the running trials of tuners no longer alive, and those that
        never named an owner (under the lock, a live tuner has named itself on every trial it asked for)."""
        tuners = self.ctx.tuners
        if tuners is None:
            return []
        ours = self.ctx.run.session_id
        with tuners.lock():
            live = {ours, *tuners.others()}
            dead = [
                t
                for t in self.store.trials(states=("RUNNING",))
                if (t.user_attrs.get("owner") or {}).get("session") not in live
            ]
            return [t for t in dead if self.store.mark_interrupted(t)]

    def sync(self) -> None:
        """Tell the sampler about trials it did not ask for (earlier runs, other processes)."""
        self.recover()
        for trial in self.store.trials():
            if trial.number in self.seen:
                continue
            status = trial.user_attrs.get("status")
            mine = (trial.user_attrs.get("owner") or {}).get("session") == self.ctx.run.session_id
            state = trial.state.name
            if mine and state == "RUNNING":
                continue
            if state == "COMPLETE":
                self.seen.add(trial.number)
                digest = trial.user_attrs.get("hash")
                if status in EVALUATED and digest and digest not in self.evaluated:
                    self.evaluated[digest] = (trial.number, trial.value)
                key = equivalence_key(trial.user_attrs.get("result"), trial.user_attrs.get("config"))
                if status == "ok" and key:
                    self.equivalents.setdefault(key, (trial.number, trial.value))
                if not mine:
                    if status == "infeasible":
                        self.ctx.sampler.infeasible(trial.params)
                    self.ctx.sampler.observe(trial.params, trial.value)
                    self.count(status, trial.value, trial.number, trial.user_attrs.get("result"))
            elif state == "RUNNING" and not mine and status != "infeasible":
                self.ctx.sampler.observe(trial.params, None)
            elif state != "RUNNING":
                self.seen.add(trial.number)

    def count(self, status: str | None, value: float | None, number: int, result: dict | None) -> None:
        progress = self.ctx.progress
        if status in EVALUATED:
            progress.trials += 1
            progress.experiments += 1
        if status == "cached":
            progress.cached += 1
        if status == "cached" and (result or {}).get("equivalent_to") is not None:
            progress.equivalent += 1
        if status == "infeasible":
            progress.infeasible += 1
        if status in ("failed", "unverified"):
            kind = "verify" if status == "unverified" else ((result or {}).get("error_kind") or "error")
            progress.failures[kind] += 1
        if status == "ok" and value is not None and (progress.best_time is None or value < progress.best_time):
            progress.best_time, progress.best_trial = value, number
            progress.best_samples = list((result or {}).get("exec_time") or [])

    # -- the loop -------------------------------------------------------------------------------------
    def run(self) -> str:
        """Search until the budget, the time or the points run out, or a signal; returns why (`STOP_REASONS`)."""
        s = self.ctx
        s.progress.phase = "tuning"
        s.on_progress(s.progress)
        started = time.monotonic()
        self.used = self.store.budget_used()
        # A pool that builds ahead skips the device runs of equivalents while searching (never while
        # comparing: a comparison times both sides, whatever their code).
        skips = hasattr(s.pool, "known_code")
        if skips:
            s.pool.known_code = self.known_code
        try:
            return self._run(started)
        finally:
            if skips:
                s.pool.known_code = None

    def _run(self, started: float) -> str:
        s = self.ctx
        limit = s.concurrency
        exhausted = False
        last_sync = time.monotonic()
        with interrupt.deferred():
            while interrupt.pending() is None:
                out_of_time = s.timeout is not None and time.monotonic() - started >= s.timeout
                while (self.requeue or not exhausted) and not out_of_time and len(self.in_flight) < limit:
                    with self._turn():
                        # A dead process's configuration runs again even past the budget: its trial spent budget,
                        # then stopped counting, and the processes may have over-spent the budget meanwhile.
                        if self.budget_used() >= s.trials and not self.requeue:
                            break
                        if interrupt.pending() is not None:
                            break
                        step = self.next()
                    if step.kind == Next.EXHAUSTED:
                        exhausted = True
                        break
                    if step.kind == Next.ANSWERED:
                        continue
                    pending = step.pending
                    future = s.pool.submit(pending.config)
                    pending.submitted = time.monotonic()
                    self.in_flight[future] = pending
                if not self.in_flight:
                    if out_of_time or not self._awaiting_others():
                        break
                    time.sleep(0.5)  # the budget is held by other processes' trials: wait to see them end
                    self.sync()
                    last_sync = time.monotonic()
                    continue
                done, _ = concurrent.futures.wait(
                    list(self.in_flight), timeout=1.0, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    pending = self.in_flight.pop(future)
                    self.finish(pending, result_of(future), self.duplicates.pop(pending.digest, []))
                if time.monotonic() - last_sync > 2.0:
                    self.sync()
                    last_sync = time.monotonic()
            if interrupt.pending() is not None:
                self.abandon()
                return "interrupted"
            if out_of_time:
                return "timeout"
            return "exhausted" if exhausted else "budget"

    def abandon(self) -> int:
        """Cancel the experiments in flight and mark their trials ``interrupted``; returns how many."""
        pendings = list(self.in_flight.values()) + [p for dups in self.duplicates.values() for p in dups]
        for future in self.in_flight:
            future.cancel()
        self.in_flight.clear()
        self.duplicates.clear()
        for pending in pendings:
            self._release(pending.trial)
            self.store.mark_interrupted(pending.trial)
        return len(pendings)

    def _awaiting_others(self) -> bool:
        """Whether running trials of other processes may yet turn out dead and need re-running here.

        A trial watched for twice the grace period without being failed belongs to a live
        process (its lease is refreshed): that process finishes it, nobody waits for it.
        """
        s = self.ctx
        if not self.shared or (s.lease is None and s.tuners is None):
            return False
        if self.requeue:
            return True
        if s.tuners is not None:  # a registered tuner that dies is seen at once, by whoever asks next
            return False
        now = time.monotonic()
        patience = 2 * grace_for(s.lease.interval) + 2.0
        running = set()
        for trial in self.store.trials(states=("RUNNING",)):
            owner = trial.user_attrs.get("owner")
            if owner is None or (owner.get("session") != s.run.session_id and owner.get("lease")):
                running.add(trial.number)
        self._awaited = {n: self._awaited.get(n, now) for n in running}
        return any(now - since < patience for since in self._awaited.values())

    def budget_used(self) -> int:
        if self.shared:
            return self.store.budget_used()  # other processes spend the budget too
        return self.used

    # -- asking ----------------------------------------------------------------------------------------
    def _ask_trial(self) -> tuple[Any, Ask | None] | None:
        s = self.ctx
        dists = s.space.distributions()
        if self.requeue:
            params = self.requeue.pop(0)
            self.store.enqueue(params)
            # should another process pop the waiting trial, this one asks the same point
            return self.store.ask(dists, params), None
        if self.shared:
            self.sync()  # a shared study: learn what the other processes took just now
        ask, self._carried = self._carried or s.sampler.ask(), None
        if ask is None:
            return None
        trial = self.store.ask(dists, ask.encoded)
        if any(ask.encoded.get(k) != v for k, v in trial.params.items()):
            # The study handed out a point another process queued again (a dead process's): run it, keep ours.
            self._carried = ask
            return trial, None
        return trial, ask

    def next(self) -> Next:
        """Ask for the next point: one to run, one answered without running, or none left."""
        s = self.ctx
        in_flight_hashes = {p.digest: p for p in self.in_flight.values()}
        for _ in range(MAX_SAMPLE_RETRIES):
            if self._streak >= MAX_DUPLICATES or self._equivalent_streak >= MAX_DUPLICATES:
                return Next(Next.EXHAUSTED)
            asked = self._ask_trial()
            if asked is None:
                return Next(Next.EXHAUSTED)
            trial, ask = asked
            encoded = dict(trial.params)
            if s.lease is not None:  # before the owner: an owned trial has a lease (watchers rely on it)
                s.lease.hold(self.store.trial_id(trial))
            self.store.annotate(trial, "owner", s.owner)
            config = s.space.feasible(s.space.decode(encoded))
            if config is None:
                s.sampler.infeasible(encoded)
                self.tell(trial, ask, encoded, s.penalty, "infeasible")
                continue
            digest = config.hash()
            self.store.annotate(trial, "config", config.to_dict())
            self.store.annotate(trial, "hash", digest)
            if self.shared:
                rival = self._rival(trial.number, digest)
                if rival is not None and rival.state.name == "RUNNING":
                    # Another process took this configuration just now: leave it to them, ask again.
                    self.store.annotate(trial, "status", "duplicate")
                    self.store.fail(trial)
                    self._release(trial)
                    self.seen.add(trial.number)
                    s.sampler.observe(encoded, None)
                    continue
                if rival is not None and digest not in self.evaluated:
                    self.evaluated[digest] = (rival.number, rival.value)
            known = self.evaluated.get(digest)
            if known is not None:  # measured already: the store answers, no budget spent
                self.store.annotate(trial, "cached_from", known[0])
                self.tell(trial, ask, encoded, known[1], "cached", config=config, cached_from=known[0])
                self._streak += 1
                return Next(Next.ANSWERED)
            pending = Pending(trial, ask, encoded, config, digest)
            if digest in in_flight_hashes:  # answered when that experiment ends; no status: spends no budget
                self.duplicates.setdefault(digest, []).append(pending)
                self._streak += 1
                return Next(Next.ANSWERED)
            self._streak = 0
            self.used += 1
            self.store.annotate(trial, "status", "running")
            return Next(Next.RUN, pending)
        raise UsageError(
            f"space {s.space.name!r}: {MAX_SAMPLE_RETRIES} points in a row violate its constraints; "
            f"the sampler {s.sampler.spec} cannot find a feasible one; loosen the constraints"
        )

    def _rival(self, number: int, digest: str) -> Any:
        """An earlier trial of another process with the same configuration, running or evaluated.

        The earlier trial wins. A trial another process has just asked may not carry its hash
        yet; wait (briefly: a dead process never writes it) until every earlier running trial
        says what it runs, so two processes never both take one configuration.
        """
        deadline = time.monotonic() + RIVAL_WAIT
        while True:
            undecided = False
            for other in self.store.trials(states=("RUNNING", "COMPLETE")):
                attrs_ = other.user_attrs
                if other.number >= number or (attrs_.get("owner") or {}).get("session") == self.ctx.run.session_id:
                    continue
                if other.state.name == "RUNNING" and "hash" not in attrs_:
                    undecided = True
                elif attrs_.get("hash") == digest and (
                    other.state.name == "RUNNING" or attrs_.get("status") in EVALUATED
                ):
                    return other
            if not undecided or time.monotonic() > deadline:
                return None
            time.sleep(0.02)

    # -- telling ------------------------------------------------------------------------------------------
    def _release(self, trial: Any) -> None:
        if self.ctx.lease is not None:
            self.ctx.lease.release(self.store.trial_id(trial))

    def tell(
        self,
        trial: Any,
        ask: Ask | None,
        encoded: dict,
        value: float,
        status: str,
        result: dict | None = None,
        *,
        config: ExperimentConfiguration | None = None,
        experiment: ExperimentResult | None = None,
        cached_from: int | None = None,
    ) -> bool:
        """Store the trial's outcome and tell the sampler; False when another process failed the trial first.

        `config`, `experiment` and `cached_from` are what the ``mneme_trial_told`` event reports.
        """
        s = self.ctx
        self._release(trial)
        try:
            if result is not None:
                self.store.annotate(trial, "result", result)
            self.store.annotate(trial, "status", status)
            self.store.tell(trial, value)
        except TrialFinished:
            # Another process failed it as stale (our lease lapsed: a stall longer than the grace
            # period) and runs its configuration again; the store keeps one result per trial.
            log.warning(
                "trial %d was failed by another process while it ran here (its lease lapsed); "
                "its result is dropped and the configuration runs again there",
                trial.number,
            )
            self.seen.add(trial.number)
            return False
        self.seen.add(trial.number)
        if ask is not None:
            s.sampler.tell(ask, value)
        else:
            s.sampler.observe(encoded, value)
        self.count(status, value, trial.number, result)
        s.on_progress(s.progress)
        if events.listened("mneme_trial_told"):
            told = ToldTrial(trial.number, status, value, dict(encoded), config, experiment, cached_from)
            events.emit("mneme_trial_told", run=s.run, trial=told)
        return True

    def finish(self, pending: Pending, result: ExperimentResult, duplicates: list[Pending]) -> None:
        s = self.ctx
        result = judged(result, s.timed_by)
        status = status_of(result)
        value = objective(result)
        score = value if value is not None else s.penalty
        trial = pending.trial
        measured_or_known = status == "ok" or result.skipped == "equivalent"
        key = equivalence_key(result.to_dict(), pending.config.to_dict()) if measured_or_known else ""
        answered_by = trial.number
        if key in self.equivalents:  # the same code launched the same way: one experiment, no budget
            first, score = self.equivalents[key]
            answered_by = first
            self._equivalent_streak += 1
            self.used -= 1
            self.store.annotate(trial, "cached_from", first)
            told = self.tell(
                trial,
                pending.ask,
                pending.encoded,
                score,
                "cached",
                {"equivalent_to": first},
                config=pending.config,
                experiment=result,
                cached_from=first,
            )
            log.info("trial %d compiled to the code of trial %d (same launch): answered from it", trial.number, first)
        else:
            self._equivalent_streak = 0
            told = self.tell(
                trial,
                pending.ask,
                pending.encoded,
                score,
                status,
                result.to_dict(),
                config=pending.config,
                experiment=result,
            )
            if told and key:
                self.equivalents.setdefault(key, (trial.number, score))
        if told:
            self.evaluated.setdefault(pending.digest, (answered_by, score))
        for dup in duplicates:
            if not told:  # nothing in the store answers them: ask their point again
                self._release(dup.trial)
                self.store.mark_interrupted(dup.trial)
                self.seen.add(dup.trial.number)
                self.requeue.append(dict(dup.encoded))
                continue
            try:
                self.store.annotate(dup.trial, "cached_from", answered_by)
            except TrialFinished:
                pass  # tell() says why
            self.tell(dup.trial, dup.ask, dup.encoded, score, "cached", config=dup.config, cached_from=answered_by)
        if status != "ok":
            log.info("trial %d %s: %s", trial.number, status, result.error or failure_kind(result))
