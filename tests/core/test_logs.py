"""A library a module drives is quieted unless -v, once that module names it (mneme.core.logs.third_party)."""

from __future__ import annotations

import logging
import os
import warnings

from mneme.core import logs


def _warned(module: str) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn_explicit("a 400-character line", UserWarning, "lib.py", 1, module=module)
    return bool(caught)


def test_a_named_library_is_quiet_by_default_and_heard_with_v():
    try:
        logs.configure(0)
        assert _warned("acme_sampler_lib.core")  # not named yet
        logs.third_party("acme_sampler_lib", warns=True)
        assert not _warned("acme_sampler_lib.core") and _warned("acme_sampler_library")
        assert logging.getLogger("acme_sampler_lib").level == logging.ERROR
        logs.configure(1)
        assert _warned("acme_sampler_lib.core")
        assert logging.getLogger("acme_sampler_lib").level == logging.INFO
    finally:
        logs.configure(0)
        logs.THIRD_PARTY.remove("acme_sampler_lib")
        logs._WARNERS.remove("acme_sampler_lib")
        logs.configure(0)


def test_the_store_and_the_sampler_plugins_name_their_libraries():
    import mneme.plugins.samplers.optuna_family  # noqa: F401
    import mneme.plugins.samplers.optuna_store  # noqa: F401

    assert {"optuna", "cmaes"} <= set(logs.THIRD_PARTY)


def test_log_lines_through_a_pipe_are_not_padded_to_the_console_width():
    import subprocess
    import sys

    # what `mneme` does at start-up (its stderr console, logging configured), then one warning
    script = (
        "import logging\nfrom mneme.core import console, logs\nlogs.configure(0, console.make(stderr=True))\n"
        "logging.getLogger('mneme.test').warning('a short warning')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == ["WARNING  a short warning"]


def test_logging_configured_without_a_console_writes_plain_lines_to_a_pipe_without_importing_rich():
    import subprocess
    import sys

    script = (
        "import logging, sys\nfrom mneme.core import logs\nlogs.configure(0)\n"
        "logging.getLogger('mneme.test').warning('a short warning')\n"
        "print('rich' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == ["WARNING  a short warning"]
    assert proc.stdout.strip() == "False"
