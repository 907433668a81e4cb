"""Real recordings and tuning sessions for the tests of tuning (tests/core/tuning, tests/plugins/commands).

`capture_saxpy` and `capture_vector_add` record a kernel on the host backend; `run_session` runs one
tuning session on a warm pool that several sessions of a test module share (`SharedPool`, the
`saxpy_pool` fixture of tests/core/tuning/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from irbuild import build_cuda_ir

from mneme import capture
from mneme.core.tuning.session import TuneOptions, TuningSession
from mneme.core.tuning.store import EVALUATED, ResultStore
from mneme.core.workers import AsyncReplayExecutor

N = 4096


def capture_saxpy(out: Path, ir: Path | None = None) -> Path:
    """A real recording: saxpy (a grid-stride loop) on 4096 floats, 16 x 256 threads, host backend."""
    x = np.arange(N, dtype=np.float32)
    y = np.ones(N, dtype=np.float32)
    return capture.capture(
        ir=ir or build_cuda_ir("saxpy"),
        kernel="saxpy",
        grid=16,
        block=256,
        args=[np.int32(N), np.float32(2.0), x, y],
        out=out,
        backend="host",
    )


def capture_vector_add(out: Path) -> Path:
    """vector_add checks `i < n` but does not loop: fewer threads than recorded leave outputs unwritten."""
    a = np.arange(N, dtype=np.float32)
    b = np.full(N, 3.0, dtype=np.float32)
    c = np.zeros(N, dtype=np.float32)
    return capture.capture(
        ir=build_cuda_ir("vector_add"),
        kernel="vector_add",
        grid=16,
        block=256,
        args=[a, b, c, np.int32(N)],
        out=out,
        backend="host",
    )


class SharedPool:
    """One warm pool for several sessions of a test module (the session shuts its pool down at the end)."""

    def __init__(self, pool: AsyncReplayExecutor):
        self.pool = pool

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def shutdown(self, wait: bool = True) -> None:
        pass


def run_session(db, pool, results, **options):
    """A tuning session of `db` on `pool`, run to its end: (session, summary); `options`: TuneOptions'."""
    options.setdefault("retime_top", 1)
    options.setdefault("retime_repeats", 1)
    session = TuningSession(
        TuneOptions(record_db=str(db), results=str(results), **options), pool_factory=lambda **kwargs: pool
    )
    return session, session.run()


def experiment_hashes(store: ResultStore) -> list[str]:
    """The hashes of the configurations the session measured (cached answers and infeasible points left out)."""
    return [r.hash for r in store.records() if r.status in EVALUATED]
