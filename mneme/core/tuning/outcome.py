"""How one experiment's result counts in a study: its objective, status and failure kind; what makes
timings comparable (the environment fingerprint)."""

from __future__ import annotations

import concurrent.futures
import hashlib
import platform
from pathlib import Path
from typing import Any

import attrs

from mneme.core import fsutil
from mneme.core.errors import EXIT_NOT_VERIFIED, ExperimentError, MnemeError
from mneme.core.types import ExperimentResult, canonical_json


def equivalence_key(result: dict[str, Any] | None, config: dict[str, Any] | None) -> str:
    """What makes two experiments one (issue 23): the same code (`code_hash`) launched the same way
    (grid, block, shared memory, launch-stage knobs); "" when the result has no code to compare.

    Every other field only changes the code, so its effect is in the code hash already
    (docs/design/tuning.md "Budget").
    """
    from mneme.core import params

    if not result or not result.get("code_hash") or not config:
        return ""
    launch = {name for name, knob in params.knobs().items() if knob.stage == "launch"}
    fields = {k: v for k, v in config.items() if k in ("grid", "block", "shared_mem") or k in launch}
    return hashlib.sha256(canonical_json({"code": result["code_hash"], "launch": fields}).encode()).hexdigest()


PENALTY_FACTOR = 100.0  # a failed or infeasible point scores this many baseline times


class BaselineNotVerified(MnemeError):
    """The recorded configuration does not replay correctly; tuning it would compare against garbage."""

    exit_code = EXIT_NOT_VERIFIED


def environment_fingerprint(backend: Any, arch: str) -> dict[str, Any]:
    """What makes timings comparable: backend, device architecture, toolchain versions."""
    import llvmlite
    from llvmlite import binding

    from mneme._version import __version__

    fingerprint: dict[str, Any] = {}
    try:
        fingerprint.update({k: str(v) for k, v in backend.fingerprint().items()})
    except Exception as exc:  # a backend that cannot fingerprint still tunes; say so in the store
        fingerprint["backend_error"] = repr(exc)
    fingerprint.update(
        {
            "arch": arch,
            "machine": platform.machine(),
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, binding.llvm_version_info)),
            "mneme": __version__,
        }
    )
    return fingerprint


def fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(fingerprint).encode()).hexdigest()[:16]


def objective(result: ExperimentResult) -> float | None:
    """Median seconds of a verified experiment; None when it failed or did not verify."""
    if result.ok and result.exec_time:
        return float(result.median_time)
    return None


def _unverified(result: ExperimentResult) -> bool:
    return result.error_kind == "verify" or (result.executed and not result.verified and not result.error_kind)


def status_of(result: ExperimentResult) -> str:
    if result.ok and result.exec_time:
        return "ok"
    return "unverified" if _unverified(result) else "failed"


def failure_kind(result: ExperimentResult) -> str:
    return "verify" if _unverified(result) else (result.error_kind or "error")


def judged(result: ExperimentResult, timed_by: str) -> ExperimentResult:
    """`result`, failed as invalid when another timer than the study's (`timed_by`) measured it (e.g. a run
    fell back to events): its times do not compare with the study's."""
    if result.ok and result.timer and timed_by and result.timer != timed_by:
        return attrs.evolve(
            result,
            failed=True,
            error_kind="invalid",
            error=f"timed by {result.timer}, the study by {timed_by}: the two do not compare",
        )
    return result


def default_results_dir(rec: Any, inst: Any, space: str) -> Path:
    """``mneme-results/<kernel>-<instance>-<space>``, every part sanitised (`fsutil.safe_component`):
    a kernel named ``../../x`` stays inside ``mneme-results``."""
    name = "-".join(
        [
            fsutil.safe_component(rec.kernel_name, 40, "kernel"),
            fsutil.safe_component(inst.dynamic_hash, 12, "instance"),
            fsutil.safe_component(Path(space).stem, 40, "space"),
        ]
    )
    return Path("mneme-results") / name


def result_of(future: concurrent.futures.Future) -> ExperimentResult:
    """The future's result; a failed experiment becomes a failed result, a pool that cannot go on raises."""
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        raise
    except ExperimentError as exc:
        if "shut down" in str(exc):
            raise
        return ExperimentResult(failed=True, error=str(exc), error_kind=exc.kind)
    except MnemeError:
        raise
    except Exception as exc:  # the pool raises only when it cannot go on; record it and carry on
        return ExperimentResult(failed=True, error=repr(exc), error_kind="crash")
