"""Emitting the event hooks (``mneme_recording_loaded`` ... ``mneme_tuning_finished``).

An event reports; it must not take down the work it reports on, so a plugin that raises in
one is logged (with the plugin's traceback under --debug) and the run goes on. Events fire
in the process where the thing happens, except that tuning worker processes leave their
experiments to the pool, which reports them in the tuning process (`mute`), next to the trials.
"""

from __future__ import annotations

import logging
from typing import Any

from mneme.core import plugins

log = logging.getLogger(__name__)

_muted: set[str] = set()


def mute(*names: str) -> None:
    """Emit none of these events in this process (a worker whose pool reports them)."""
    _muted.update(names)


def listened(name: str) -> bool:
    """Whether any plugin implements event `name` here (skip building its arguments otherwise)."""
    return name not in _muted and bool(getattr(plugins.hook(), name).get_hookimpls())


def emit(name: str, **kwargs: Any) -> None:
    """Call event hook `name` with `kwargs` on every plugin that implements it."""
    if name in _muted:
        return
    caller = getattr(plugins.hook(), name)
    if not caller.get_hookimpls():
        return  # nobody listens: nothing to build or log
    try:
        caller(**kwargs)
    except Exception as exc:  # noqa: BLE001 - an observer's failure is reported, the observed work goes on
        log.error(
            "a plugin failed in %s: %s: %s (the run goes on)",
            name,
            type(exc).__name__,
            exc,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )


#: What a tuning worker process leaves to its pool: the tuning process reports the recording once
#: and every experiment, next to its trial (variant_compiled stays where the binary is built).
POOL_REPORTED = ("mneme_recording_loaded", "mneme_experiment_started", "mneme_experiment_finished")
