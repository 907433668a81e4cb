"""Fixtures of the tuning tests: a saxpy recording and a warm pool over it, one of each per test module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def saxpy_db(tmp_path_factory):
    from tuning_sessions import capture_saxpy

    return capture_saxpy(tmp_path_factory.mktemp("saxpy"))


@pytest.fixture(scope="module")
def saxpy_pool(saxpy_db, tmp_path_factory, request):
    """A pool of the module's POOL_WORKERS workers (default 3) that every session of the module shares."""
    from tuning_sessions import SharedPool

    from mneme.core.workers import AsyncReplayExecutor

    pool = AsyncReplayExecutor(
        saxpy_db, None, getattr(request.module, "POOL_WORKERS", 3), tmp_path_factory.mktemp("pool"), 1
    )
    yield SharedPool(pool)
    pool.shutdown()
