"""`mneme.tuning.session` of the original Mneme API: the original's `mneme tune` as a tuning session.

`TuningSession(TuneOptions(...)).run()` measures the baseline, searches the built-in space
(`BuiltinTuneSearchSpace`) or a user's `SearchSpace` (`space_module="file.py:Class"`) with a
random, exhaustive/grid or TPE sampler on the original API's `AsyncReplayExecutor`, and writes
the original's results layout (`ResultStore`: config.json, search_space.json, baseline.json,
trials.jsonl, best.json, summary.json, and Proteus's tuned-kernel JSON). It returns the
original's exit codes. Mneme's own tuner (`mneme.core.tuning`) is separate; `mneme tune
--layout original` (or any option only the original has) runs this one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import statistics
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from mneme.compat.builtin_spaces import (
    BuiltinTuneSearchSpace,
    describe_search_space,
    iter_finite_params,
    launch_layout_key,
    load_custom_space,
    parse_key_value_args,
)
from mneme.compat.result_store import ResultStore
from mneme.compat.search_space import sample_optuna_param, sample_random_param
from mneme.compat.tune_options import RESUME_DEFAULTS, RESUME_FIXED, TuneOptions
from mneme.compat.types import ExperimentConfiguration, ExperimentResult, dim3

log = logging.getLogger(__name__)

EXIT_BASELINE_FAILED = 1
EXIT_INVALID_CONFIGURATION = 3
EXIT_RECORD_LOAD_FAILED = 4
EXIT_INTERNAL_ERROR = 5


class BaselineVerificationError(RuntimeError):
    """The recorded configuration did not replay verified."""


@dataclasses.dataclass
class Candidate:
    trial: int
    params: dict[str, Any]
    config: ExperimentConfiguration
    optuna_trial: Any = None
    optuna_study: Any = None
    error: str | None = None  # the space could not derive a configuration from `params`


@dataclasses.dataclass
class CompletedCandidate:
    trial: int
    params: dict[str, Any]
    config: ExperimentConfiguration
    result: ExperimentResult
    status: str
    metric: float | None
    speedup: float | None


def metric_value(result: ExperimentResult, metric: str, iterations: int) -> float | None:
    """The statistic `metric` of the timed runs (the last `iterations` entries of `exec_time`; warm-ups first)."""
    values = list(result.exec_time or [])
    if not values:
        return None
    if 0 < iterations <= len(values):
        values = values[-iterations:]
    funcs = {"mean": statistics.mean, "median": statistics.median, "min": min, "max": max}
    if metric not in funcs:
        raise ValueError(f"Unknown metric {metric!r}")
    return float(funcs[metric](values))


def stored_result_and_metric(data: Mapping[str, Any]) -> tuple[ExperimentResult, float | None]:
    """A stored trial's or baseline's `result` entry: the `ExperimentResult` and the tuning metric kept beside it."""
    return ExperimentResult.from_dict({k: v for k, v in data.items() if k != "metric"}), data.get("metric")


def classify_result(result: ExperimentResult) -> str:
    """verified, invalid_launch, invalid_config, compile_error, runtime_error or failed_verification."""
    error = (result.error or "").lower()
    if result.verified:
        return "verified"
    if "invalid" in error and "launch" in error:
        return "invalid_launch"
    if "invalid configuration" in error:
        return "invalid_config"
    if result.failed:
        compile_words = ("compile", "codegen", "llvm", "jit", "link", "pipeline", "pass")
        return "compile_error" if any(w in error for w in compile_words) else "runtime_error"
    if result.executed or not result.error:
        return "failed_verification"
    return "runtime_error"


def _speedup(baseline_metric: float | None, metric: float | None) -> float | None:
    return baseline_metric / metric if baseline_metric is not None and metric and metric > 0 else None


def _objective_value(status: str, metric: float | None, speedup: float | None, objective: str) -> float:
    if status != "verified" or metric is None:
        return math.inf if objective == "time" else 0.0
    return float(speedup or 0.0) if objective == "speedup" else float(metric)


def _constraints_ok(space: Any, params: dict[str, Any], config: ExperimentConfiguration) -> bool:
    try:
        ok = bool(space.constraints(params))
    except Exception:  # noqa: BLE001 - spaces written for the sample_* helpers check the configuration instead
        ok = bool(space.constraints(config))
    return ok and bool(config.is_valid())


class TuningSession:
    """One run of the original's tuner (see the module docstring)."""

    def __init__(self, options: TuneOptions, *, executor: Any = None, ir: str | os.PathLike | None = None):
        """Tune as `options` say; with `ir`, the IR to compile instead of the recording's (a path to a
        ``.ll``/``.bc`` file or IR text), its SHA-256 kept as `ir_hash` in ``config.json``; with `executor`,
        a caller's `AsyncReplayExecutor` for the same record, instance, workers, iterations and warmup
        (the caller shuts it down; its IR is set to `ir` when given)."""
        self.options = options
        self._borrowed_executor = executor
        self._ir = ir
        options.results_dir = options.resolved_results_dir()
        if options.proteus_enabled and options.proteus_output is None:
            options.proteus_output = str(Path(options.results_dir) / "proteus_tuned_kernels.json")
        self.store = ResultStore(options.results_dir)
        self.rng = random.Random(options.seed)
        self._completed_hashes: set[str] = set()
        self._banned_block_shapes: set[str] = set()

    def _print(self, message: str) -> None:
        if not self.options.quiet:
            print(message)  # noqa: T201 - the original's command prints its progress

    def _load_record(self):
        from mneme.compat.recorded_execution import RecordedExecution
        from mneme.compat.replay_executor import infer_record_id

        recorded = RecordedExecution.from_json(self.options.record_database)
        self.options.record_id = infer_record_id(recorded, self.options.record_database, self.options.record_id)
        return recorded, recorded[self.options.record_id]

    def _build_space(self, kernel) -> tuple[Any, dict[str, Any]]:
        o = self.options
        if o.space_module:
            space = load_custom_space(o.space_module, kernel, parse_key_value_args(o.space_arg))
            return space, describe_search_space(space, custom=True)
        space = BuiltinTuneSearchSpace(
            kernel,
            preset=o.space_preset,
            launch_dim=o.launch_dim,
            launch_safety=o.launch_safety,
            passes=o.passes,
            fixed_passes=o.fixed_passes,
            pipeline_file=o.pipeline_file,
            codegen_opt_range=o.codegen_opt_range,
            fixed_codegen_opt=o.fixed_codegen_opt,
            codegen_method=o.codegen_method,
            specialize_space=o.specialize_space,
            specialize_dims_space=o.specialize_dims_space,
            launch_bounds_space=o.launch_bounds_space,
            min_blocks_per_sm_range=o.min_blocks_per_sm_range,
            fixed_min_blocks_per_sm=o.fixed_min_blocks_per_sm,
            max_threads_range=o.max_threads_range,
            max_threads_policy=o.max_threads_policy,
            launch_candidates=o.launch_candidates,
        )
        return space, describe_search_space(space, preset=o.space_preset)

    @staticmethod
    def _baseline_config(space: Any, kernel) -> ExperimentConfiguration:
        if hasattr(space, "baseline"):
            return space.baseline()
        return ExperimentConfiguration(
            grid=kernel.grid_dim,
            block=kernel.block_dim,
            shared_mem=kernel.shared_mem,
            passes="default<O3>",
            max_threads=0,
            min_blocks_per_sm=0,
        )

    def _check_borrowed_executor(self) -> None:
        """A caller's executor must replay what the options name, as they say (the original assumes it)."""
        executor, o = self._borrowed_executor, self.options
        if executor is None:
            return
        theirs = {
            "record_database": Path(executor.record_db).resolve(),
            "record_id": executor.record_id,
            "workers": executor.num_workers,
            "iterations": executor.iterations,
            "warmup": executor.warmup,
        }
        ours = dict(theirs, record_database=Path(o.record_database).resolve(), record_id=o.record_id)
        ours.update(workers=o.workers, iterations=o.iterations, warmup=o.warmup)
        changed = [f"{key} {theirs[key]} (options: {ours[key]})" for key in theirs if theirs[key] != ours[key]]
        if changed:
            raise ValueError(f"the executor given does not match the options: {', '.join(changed)}")

    def _validate_resume(self, resolved: dict[str, Any]) -> None:
        if not self.options.resume:
            return
        existing = self.store.load_config()
        if existing is None:
            raise ValueError("--resume requires an existing results directory with config.json")
        changed = [k for k in RESUME_FIXED if existing.get(k, RESUME_DEFAULTS.get(k)) != resolved.get(k)]
        if changed:
            raise ValueError(f"--resume option mismatch for: {', '.join(changed)}")
        self._completed_hashes = self.store.completed_hashes()

    # -- candidates -----------------------------------------------------------------------
    def _iter_random(self, space: Any) -> Iterator[Candidate]:
        dims, produced, attempts = space.dimensions(), 0, 0
        while produced < self.options.trials:
            attempts += 1
            if attempts > max(1000, self.options.trials * 100):
                raise RuntimeError("Could not sample enough valid random candidates")
            params = {name: sample_random_param(p, self.rng) for name, p in dims.items()}
            if params.get("block_shape") in self._banned_block_shapes:
                continue
            candidate = self._resolve(space, produced, params)
            if candidate is not None:
                yield candidate
                produced += 1

    def _iter_grid(self, space: Any) -> Iterator[Candidate]:
        produced = 0
        for params in iter_finite_params(space):
            if params.get("block_shape") in self._banned_block_shapes:
                continue
            candidate = self._resolve(space, produced, params)
            if candidate is not None:
                yield candidate
                produced += 1

    def _resolve(self, space: Any, trial: int, params: dict[str, Any]) -> Candidate | None:
        """The candidate of `params`; None when the constraints refuse it; one carrying the error when the
        space cannot derive it (recorded as an invalid configuration, the search goes on, as the current
        release does)."""
        try:
            config = space.derived(params)
            return Candidate(trial, params, config) if _constraints_ok(space, params, config) else None
        except Exception as exc:  # a user's space may raise anything: its trial says what
            if self.options.fail_fast:
                raise
            return Candidate(trial, params, ExperimentConfiguration(), error=str(exc))

    def _make_study(self):
        import optuna

        o = self.options
        sampler = (
            optuna.samplers.TPESampler(seed=o.seed)
            if o.sampler == "tpe"
            else optuna.samplers.RandomSampler(seed=o.seed)
        )
        pruner = optuna.pruners.MedianPruner() if o.pruner == "median" else optuna.pruners.NopPruner()
        return optuna.create_study(
            direction="maximize" if o.objective == "speedup" else "minimize",
            sampler=sampler,
            pruner=pruner,
            study_name=o.study_name,
            storage=o.optuna_storage,
            load_if_exists=bool(o.resume or o.optuna_storage),
        )

    def _iter_optuna(self, space: Any) -> Iterator[Candidate]:
        study, dims, produced = self._make_study(), space.dimensions(), 0
        while produced < self.options.trials:
            trial = study.ask()
            params = {name: sample_optuna_param(trial, p) for name, p in dims.items()}
            if params.get("block_shape") in self._banned_block_shapes:
                study.tell(trial, _objective_value("invalid_launch", None, None, self.options.objective))
                continue
            candidate = self._resolve(space, produced, params)
            if candidate is None:
                study.tell(trial, _objective_value("invalid_config", None, None, self.options.objective))
                continue
            candidate.optuna_trial, candidate.optuna_study = trial, study
            yield candidate
            produced += 1

    @staticmethod
    def _initial_candidates(space: Any, baseline: ExperimentConfiguration) -> Iterator[Candidate]:
        """The supplied launch layouts on the baseline's other settings, before any sampled trial."""
        for trial, layout in enumerate(getattr(space, "launch_candidates", [])):
            config = dataclasses.replace(baseline, block=dim3(*layout["block"]), grid=dim3(*layout["grid"]))
            params = {k: v for k, v in config.to_dict().items() if k not in ("block", "grid")}
            params["launch_layout"] = launch_layout_key(layout["block"], layout["grid"])
            yield Candidate(trial, params, config)

    def _candidates(self, space: Any) -> Iterator[Candidate]:
        if self.options.sampler == "random":
            return self._iter_random(space)
        if self.options.sampler in ("grid", "exhaustive"):
            return self._iter_grid(space)
        return self._iter_optuna(space)

    # -- records --------------------------------------------------------------------------
    def _tell(self, candidate: Candidate, status: str, metric: float | None, speedup: float | None) -> None:
        if candidate.optuna_trial is not None:
            candidate.optuna_study.tell(
                candidate.optuna_trial, _objective_value(status, metric, speedup, self.options.objective)
            )

    @staticmethod
    def _trial_record(
        candidate: Candidate, result: ExperimentResult, status: str, metric: float | None, baseline_metric: float | None
    ) -> dict[str, Any]:
        return {
            "trial": candidate.trial,
            "status": status,
            "config_hash": candidate.config.hash(),
            "params": candidate.params,
            "config": candidate.config.to_dict(),
            "result": dict(result.to_dict(), metric=metric),
            "baseline_metric": baseline_metric,
            "speedup": _speedup(baseline_metric, metric),
        }

    def _complete(
        self, candidate: Candidate, result: ExperimentResult, baseline_metric: float | None
    ) -> CompletedCandidate:
        status = classify_result(result)
        if self.options.adaptive_invalid_ban and status == "invalid_launch" and "block_shape" in candidate.params:
            self._banned_block_shapes.add(candidate.params["block_shape"])
        metric = metric_value(result, self.options.metric, self.options.iterations) if status == "verified" else None
        speedup = _speedup(baseline_metric, metric)
        self.store.append_trial(self._trial_record(candidate, result, status, metric, baseline_metric))
        self._tell(candidate, status, metric, speedup)
        return CompletedCandidate(candidate.trial, candidate.params, candidate.config, result, status, metric, speedup)

    def _record_invalid(self, candidate: Candidate, baseline_metric: float | None, error: str) -> CompletedCandidate:
        """A candidate that cannot run: an `invalid_config` trial, never submitted (the current release's)."""
        result = ExperimentResult(error=error, failed=True, executed=False)
        self.store.append_trial(self._trial_record(candidate, result, "invalid_config", None, baseline_metric))
        self._tell(candidate, "invalid_config", None, None)
        return CompletedCandidate(
            candidate.trial, candidate.params, candidate.config, result, "invalid_config", None, None
        )

    def _resumed_best(self, config, result, metric) -> tuple[CompletedCandidate | None, dict[str, int], int]:
        verified = result.verified and metric is not None
        best = CompletedCandidate(-1, {"baseline": True}, config, result, "verified", metric, 1.0) if verified else None
        counts: dict[str, int] = {}
        done = 0
        for trial in self.store.load_trials():
            done += 1
            status = trial.get("status", "internal_error")
            counts[status] = counts.get(status, 0) + 1
            value = trial.get("result", {}).get("metric")
            if status == "verified" and value is not None and (best is None or value < best.metric):
                stored, _ = stored_result_and_metric(trial["result"])
                best = CompletedCandidate(
                    int(trial["trial"]),
                    dict(trial.get("params", {})),
                    ExperimentConfiguration.from_dict(trial["config"]),
                    stored,
                    status,
                    value,
                    trial.get("speedup"),
                )
        return best, counts, done

    def _write_final(
        self,
        recorded,
        kernel,
        baseline_metric: float | None,
        best: CompletedCandidate | None,
        counts: dict[str, int],
        completed: int,
    ) -> dict[str, Any]:
        o = self.options
        statuses = (
            "verified",
            "failed_verification",
            "invalid_launch",
            "compile_error",
            "runtime_error",
            "invalid_config",
            "internal_error",
        )
        if best is None:
            summary = {
                "status": "failed",
                "num_trials_requested": o.trials,
                "num_trials_completed": completed,
                "baseline_metric": baseline_metric,
                "best_metric": None,
                "best_speedup": None,
                "best_trial": None,
                "error": "No configuration verified",
                **{f"num_{s}": counts.get(s, 0) for s in statuses},
            }
            self.store.write_summary(summary)
            return summary
        speedup = None
        if baseline_metric is not None:
            speedup = baseline_metric / best.metric if best.metric and best.metric > 0 else 1.0
        self.store.write_best(
            {
                "status": "success",
                "trial": best.trial,
                "speedup": speedup,
                "baseline_metric": baseline_metric,
                "best_metric": best.metric,
                "metric": o.metric,
                "params": best.params,
                "config": best.config.to_dict(),
                "result": best.result.to_dict(),
                "record": {
                    "record_database": o.record_database,
                    "record_id": o.record_id,
                    "kernel_name": kernel.kernel_name,
                },
            }
        )
        summary = {
            "status": "success",
            "num_trials_requested": o.trials,
            "num_trials_completed": completed,
            **{f"num_{s}": counts.get(s, 0) for s in statuses},
            "baseline_metric": baseline_metric,
            "best_metric": best.metric,
            "best_speedup": speedup,
            "best_trial": best.trial,
        }
        self.store.write_summary(summary)
        if o.proteus_enabled and o.proteus_output:
            from mneme.compat.convert import export_proteus_tuned_kernel

            Path(o.proteus_output).parent.mkdir(parents=True, exist_ok=True)
            export_proteus_tuned_kernel(
                o.proteus_output,
                recorded,
                kernel,
                best.config,
                usage_filename=str(self.store.path("proteus_usage.txt")),
            )
        return summary

    def _evaluate_baseline(self, executor, config: ExperimentConfiguration) -> tuple[ExperimentResult, float | None]:
        o = self.options
        if o.resume and not o.rerun_baseline:
            loaded = self.store.load_baseline()
            if loaded is not None:
                result, metric = stored_result_and_metric(loaded["result"])
                metric = metric if metric is not None else metric_value(result, o.metric, o.iterations)
                return self._checked_baseline(result, metric)
        result = executor.evaluate(config)
        metric = metric_value(result, o.metric, o.iterations)
        self.store.write_baseline({"config": config.to_dict(), "result": dict(result.to_dict(), metric=metric)})
        return self._checked_baseline(result, metric)

    def _checked_baseline(
        self, result: ExperimentResult, metric: float | None
    ) -> tuple[ExperimentResult, float | None]:
        if result.verified and metric is not None:
            return result, float(metric)
        if self.options.require_verified_baseline:
            raise BaselineVerificationError(
                f"Baseline replay did not verify{': ' + result.error if result.error else ''}"
            )
        return result, None

    # -- the run --------------------------------------------------------------------------
    def run(self) -> int:
        """Tune; returns 0, or the original's exit code (1 baseline, 3 configuration, 4 recording, 5 internal)."""
        from mneme.compat.async_executor import AsyncReplayExecutor, ir_override

        o = self.options
        try:
            recorded, kernel = self._load_record()
        except Exception as exc:  # noqa: BLE001 - the original reports any loading failure as exit 4
            print(f"Failed to load record database: {exc}")  # noqa: T201
            return EXIT_RECORD_LOAD_FAILED
        try:
            resolved = o.to_config_dict()
            if self._ir is not None:  # a file that cannot be read is an invalid configuration (exit 3)
                resolved["ir_hash"] = ir_override(self._ir).sha256
            self._check_borrowed_executor()
            self._validate_resume(resolved)
            self.store.write_config(resolved)
            space, description = self._build_space(kernel)
        except Exception as exc:  # noqa: BLE001
            print(f"Invalid tuning configuration: {exc}")  # noqa: T201
            return EXIT_INVALID_CONFIGURATION
        self.store.write_search_space(description)
        if o.print_space:
            print(json.dumps(description, indent=2))  # noqa: T201
            return 0
        baseline_config = self._baseline_config(space, kernel)
        if o.dry_run:
            print(json.dumps({"baseline": baseline_config.to_dict(), "search_space": description}, indent=2))  # noqa: T201
            return 0
        source = recorded.kernel_source()
        where = f"\n  source:          {source.location}" if source is not None else ""
        self._print(
            f"Mneme tune\n  record database: {o.record_database}\n  record id:       {o.record_id}\n"
            f"  kernel:          {kernel.kernel_name}{where}\n  space preset:    "
            f"{'custom' if o.space_module else o.space_preset}\n  sampler:         {o.sampler}\n"
            f"  trials:          {o.trials}\n  workers:         {o.workers}"
        )
        owns_executor = self._borrowed_executor is None  # a caller's executor may serve several sessions
        executor = self._borrowed_executor or AsyncReplayExecutor(
            record_db=o.record_database,
            record_id=o.record_id,
            iterations=o.iterations,
            results_db_dir=str(self.store.logs_dir),
            num_workers=o.workers,
            warmup=o.warmup,
        )
        try:
            if self._ir is not None:
                executor.set_ir(self._ir)
            try:
                baseline_result, baseline_metric = self._evaluate_baseline(executor, baseline_config)
            except BaselineVerificationError as exc:
                print(str(exc))  # noqa: T201
                return EXIT_BASELINE_FAILED
            if baseline_metric is not None:
                self._print(f"\nBaseline verified:\n  {o.metric} time: {baseline_metric:.6g}")
            else:
                self._print("\nBaseline did not verify; continuing search.")
            best, counts, completed = self._resumed_best(baseline_config, baseline_result, baseline_metric)
            if not o.baseline_only:
                best, completed = self._search(
                    executor, space, baseline_config, baseline_metric, best, counts, completed
                )
            summary = self._write_final(recorded, kernel, baseline_metric, best, counts, completed)
        except Exception as exc:
            if o.fail_fast:
                raise
            log.debug("tuning failed", exc_info=True)
            print(f"Internal tuner error: {type(exc).__name__}: {exc}")  # noqa: T201
            return EXIT_INTERNAL_ERROR
        finally:
            if owns_executor:
                executor.shutdown()
        if best is None:
            self._print("\nNo configuration verified")
            return EXIT_BASELINE_FAILED
        against = (
            f"\n  baseline:     {baseline_metric:.6g}\n  speedup:      {summary['best_speedup']:.3f}x"
            if baseline_metric is not None
            else ""
        )
        self._print(
            f"\nBest verified configuration:\n  trial:        {best.trial}\n  {o.metric} time: "
            f"{best.metric:.6g}{against}\n\nWrote:\n  results:       {o.results_dir}"
        )
        return 0

    def _search(self, executor, space, baseline_config, baseline_metric, best, counts, completed):
        """Keep `workers` experiments in flight until the candidates (or the time) run out."""
        o = self.options
        initial = bool(o.launch_candidates)
        candidates = self._initial_candidates(space, baseline_config) if initial else self._candidates(space)
        in_flight: list[tuple[Candidate, Any]] = []
        start, submitted, exhausted = time.monotonic(), 0, False
        while in_flight or not exhausted:
            timed_out = o.timeout is not None and time.monotonic() - start >= o.timeout
            while not exhausted and not timed_out and len(in_flight) < o.workers:
                try:
                    candidate = next(candidates)
                except StopIteration:
                    if initial and in_flight:
                        break  # the supplied layouts finish before the sampler's trials start
                    if initial:
                        initial, candidates = False, self._candidates(space)
                        continue
                    exhausted = True
                    break
                except Exception as exc:  # a space that fails to sample: one invalid trial, then go on
                    if o.fail_fast:
                        raise
                    done = self._record_invalid(Candidate(submitted, {}, baseline_config), baseline_metric, str(exc))
                    counts[done.status] = counts.get(done.status, 0) + 1
                    completed, submitted = completed + 1, submitted + 1
                    continue
                candidate.trial = submitted
                if o.resume and candidate.config.hash() in self._completed_hashes:
                    continue
                if candidate.error is not None or not candidate.config.is_valid():
                    done = self._record_invalid(
                        candidate,
                        baseline_metric,
                        candidate.error or "ExperimentConfiguration.is_valid() returned false",
                    )
                    counts[done.status] = counts.get(done.status, 0) + 1
                    completed, submitted = completed + 1, submitted + 1
                    continue
                in_flight.append((candidate, executor.submit(candidate.config)))
                submitted += 1
            if timed_out and not in_flight:
                break
            still, progressed = [], False
            for candidate, future in in_flight:
                if not future.done():
                    still.append((candidate, future))
                    continue
                progressed = True
                try:
                    result = future.result() or ExperimentResult(error="Future completed without result", failed=True)
                except Exception as exc:  # noqa: BLE001
                    if o.fail_fast:
                        raise
                    result = ExperimentResult(error=str(exc), failed=True, executed=False)
                done = self._complete(candidate, result, baseline_metric)
                counts[done.status] = counts.get(done.status, 0) + 1
                completed += 1
                if done.status == "verified" and done.metric is not None:
                    relative = f", speedup {done.speedup:.3f}x" if done.speedup is not None else ""
                    self._print(f"Trial {candidate.trial} verified: {done.metric:.6g}{relative}")
                    if best is None or done.metric < best.metric:
                        best = done
                else:
                    self._print(f"Trial {candidate.trial} {done.status}")
            in_flight = still
            if in_flight and not progressed:
                time.sleep(0.05)
        return best, completed
