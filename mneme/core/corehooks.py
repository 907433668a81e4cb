"""The core's own implementations of the decision and pipeline hooks, registered as plugin ``core-hooks``.

They sit where pytest's built-in plugins sit: a plugin decides before them (a plain or
``tryfirst`` implementation of a ``firstresult`` hook answers first) or runs around them
(``tryfirst``/``trylast``/``wrapper`` implementations of a pipeline hook).
"""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl(trylast=True)
def mneme_backend_for_arch(arch, backends):
    """The highest-priority installed backend (then by name) that claims `arch`.

    Backends are imported in that order and the search stops at the first that claims `arch`
    (with a `LazyRegistry`, whose `Described` entries declare their priority).
    """

    def priority(name: str) -> int:
        declared = getattr(backends, "declared", None)
        return declared(name, "priority") if declared else backends[name].priority

    for name in sorted(backends, key=lambda n: (-priority(n), n)):
        backend = backends[name]()
        if backend.claims(arch):
            return backend
    return None


@hookimpl(trylast=True)
def mneme_recorder_for_program(program, recorders):
    """The highest-priority recorder that claims `program`, else the highest-priority one installed."""
    from mneme.core.recorder.recorders import choose

    return choose(program, recorders)


@hookimpl
def mneme_transform_module(build):
    """The named transforms the configuration enables, in their `order`."""
    build.run_named()
