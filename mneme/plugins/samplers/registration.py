"""One plugin per sampler family (entry points `guided`, `exhaustive`, `random`, `optuna`, `nevergrad`).

Each can be listed, disabled (``mneme -p no:nevergrad``) or replaced by name on its own.
A family whose library is an extra says so (``mneme_requires``: module -> extra). The
``optuna`` plugin is also the default result store, Optuna studies (`sqlite_store`: SQLite files, in
Optuna's tables without importing Optuna; `optuna_store`: other databases, journal files), and draws the
study plots (`optuna_plots`); ``-p no:optuna`` leaves tuning without a store unless another plugin
provides one.
"""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.plugins import Described


class _Family:
    # Described, not imported: listing the samplers must not import Optuna or numpy.
    def __init__(self, name: str, target: str, requires: dict[str, str] | None = None):
        self._described = Described(name, target)
        self.mneme_requires = requires or {}

    @hookimpl
    def mneme_samplers(self):
        return [self._described]


class _OptunaFamily(_Family):
    """Optuna's samplers, its storage as the default result store, and its visualizations of a study."""

    @hookimpl(trylast=True)  # the default store: a plugin that claims a URL decides before it
    def mneme_store_for_url(self, url, study_name, create, heartbeat):
        from mneme.plugins.samplers import sqlite_store

        # An SQLite file opens without importing Optuna (its tables, through sqlite3: `sqlite_store`), unless it
        # holds another schema revision than the one that store writes.
        if sqlite_store.claims(url):
            store = sqlite_store.SqliteStore.open(url, study_name, create=create, heartbeat=heartbeat)
            if store is not None:
                return store
        from mneme.plugins.samplers import optuna_store

        if not optuna_store.claims(url):
            return None
        return optuna_store.OptunaStore.open(url, study_name, create=create, heartbeat=heartbeat)

    @hookimpl
    def mneme_study_plots(self, records, out_dir, kinds, kernel, marks, script):
        from mneme.plugins.samplers import optuna_plots

        return optuna_plots.write_study_plots(records, out_dir, kinds, kernel=kernel, marks=marks, script=script)


guided = _Family("guided", "mneme.plugins.samplers.guided:GuidedSampler")
exhaustive = _Family("exhaustive", "mneme.plugins.samplers.basic:ExhaustiveSampler")
random = _Family("random", "mneme.plugins.samplers.basic:RandomSampler")
optuna = _OptunaFamily("optuna", "mneme.plugins.samplers.optuna_family:OptunaSampler")
nevergrad = _Family("nevergrad", "mneme.plugins.samplers.nevergrad_family:NevergradSampler", {"nevergrad": "nevergrad"})
