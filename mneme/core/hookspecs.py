"""Every extension point of Mneme, as pluggy hook specifications.

A plugin is a module or object registered under the entry-point group ``mneme`` that
implements some of these hooks with ``@mneme.core.hookspecs.hookimpl``; the core calls them
through ``pm.hook`` (`mneme.core.plugins.hook`), so pluggy's ordering (``tryfirst``,
``trylast``), wrappers and tracing (``mneme --trace-plugins``) apply. Three shapes:

- *registration* hooks (``mneme_backends`` ... ``mneme_cli_commands``) return lists of named
  things; the plugin manager indexes them by ``name`` (a registry is the right shape for what
  users pick by name). A class may be returned as a `mneme.core.plugins.Described`
  ("module:Class"), imported on first use, so that listing plugins imports nothing heavy;
- *decision and pipeline* hooks receive what they decide or extend: the backend for an
  architecture, the recorder for a program and the result store for a storage URL
  (``firstresult``), the module being transformed, the plots of a study;
- *event* hooks report what happened, with the objects concerned; they return nothing.

Built-in plugins use the very same hooks. A plugin may set ``mneme_replaces = ("NAME", ...)`` to
take the place of other plugins (by entry-point name); docs/design/interfaces.md (the plugin
author's guide) says when each hook is called.
"""

from __future__ import annotations

import pluggy

PROJECT = "mneme"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- registration --------------------------------------------------------------------------------


@hookspec
def mneme_backends():
    """Return backend classes (subclasses of `mneme.core.backend.Backend`)."""


@hookspec
def mneme_transforms():
    """Return named IR transform classes (`mneme.core.pipeline.Transform`), enabled by the configuration."""


@hookspec
def mneme_samplers():
    """Return sampler classes (`mneme.core.tuning.samplers.Sampler`: ask/tell search strategies, each with a `name`)."""


@hookspec
def mneme_spaces():
    """Return search-space classes (each with a `name`)."""


@hookspec
def mneme_ir_sources():
    """Return IR-source classes that find a kernel's LLVM IR (each with a `name`)."""


@hookspec
def mneme_recording_formats():
    """Return readers of other tools' recording databases (each with a `name`, `claims(data)` and `convert(path)`)."""


@hookspec
def mneme_recorders():
    """Return recorder classes (`mneme.core.recorder.recorders.Recorder`: a backend's native recorder, named as the backend)."""


@hookspec
def mneme_parameters():
    """Return `mneme.core.params.Knob` declarations of the configuration parameters the plugin adds."""


@hookspec
def mneme_cli_commands(cli, registry):
    """Add click commands to the group `cli` (or return them); `registry` is `mneme.core.plugins.registry_view()`."""


# -- decisions and pipelines ------------------------------------------------------------------------


@hookspec(firstresult=True)
def mneme_backend_for_arch(arch, backends):
    """Return the `Backend` instance that generates code for `arch`, or None to leave it to others.

    `backends` is name -> backend class of the installed backends (a `mneme.core.plugins.LazyRegistry`:
    a class is imported when looked up). The core's own implementation (``trylast``) picks the
    highest-priority backend whose `claims(arch)` is true, importing no backend of lower priority.
    """


@hookspec(firstresult=True)
def mneme_recorder_for_program(program, recorders):
    """Return the `Recorder` instance that records `program` (`mneme record` without ``--backend``), or None.

    `program` is the `mneme.core.recorder.program.Program` of the command (its ELF files, the
    libraries they link, their sections); `recorders` is name -> recorder class. The core's own
    implementation (``trylast``) picks the highest-priority recorder that claims the program, else
    the highest-priority one.
    """


@hookspec(firstresult=True)
def mneme_store_for_url(url, study_name, create, heartbeat):
    """Return the `mneme.core.tuning.storage.Store` of study `study_name` at storage `url`, or None to leave
    it to others.

    `create`: create the study when absent (else it must exist; `study_name` None names the
    storage's only study); `heartbeat`: seconds between lease refreshes, or None. The built-in
    store answers database URLs and ``journal:PATH`` (``trylast``: other plugins decide first).
    """


@hookspec
def mneme_study_plots(records, out_dir, kinds, kernel, marks, script):
    """Draw plots of a study's verified trials in `out_dir`; return the files written.

    `records`: `mneme.core.tuning.store.TrialRecord`s (ok or cached, each with params);
    `kinds`: formats ("png", "html"); `kernel`: its name for titles; `marks`: label -> seconds
    of lines to draw on a history (the recorded configuration, the report's best); `script`:
    the relative path of the shared ``plotly.min.js`` for HTML files.
    """


@hookspec
def mneme_transform_module(build):
    """Transform `build.module` (a `mneme.core.pipeline.ModuleBuild`) in place or through `build.replace`.

    Every implementation runs, in pluggy's order; the core's own (the named transforms the
    configuration enables) sits in the middle: ``tryfirst`` runs before it, ``trylast`` after,
    a ``wrapper`` around all of them.
    """


# -- events -------------------------------------------------------------------------------------------


@hookspec
def mneme_recording_loaded(recording):
    """A recording database was loaded (`recording` is the `RecordedExecution`)."""


@hookspec
def mneme_variant_compiled(kernel_name, config, binary, cached):
    """A variant of `kernel_name` was built for `config` (`binary`: the `DeviceBinary`; `cached`: from the build cache)."""


@hookspec
def mneme_experiment_started(recording, instance, config):
    """An experiment of `config` on the recorded launch `instance` of `recording` starts."""


@hookspec
def mneme_experiment_finished(recording, instance, config, result):
    """An experiment ended with `result` (an `ExperimentResult`: verified, failed or skipped)."""


@hookspec
def mneme_trial_told(run, trial):
    """A tuning trial was stored with its outcome (`run`: the run's `mneme.core.tuning.context.RunInfo`;
    `trial`: a `mneme.core.tuning.context.ToldTrial`)."""


@hookspec
def mneme_tuning_finished(run, summary, stop):
    """A tuning run ended: `summary` as written to summary.json, `stop` (a `Stop`) why the search stopped."""
