"""What the installed backends declare about their targets, for the core's target-neutral code.

The IR toolkit asks which target a triple is (`target_of_triple`) and which triple a module
that names none is given (`triple_for_marks`); the IR sources ask which recorded code runs on
a device (`runs_on`). The answers are the backends' declarations (`mneme.core.backend.Backend`:
`ir_targets`, `default_triple`, `kernel_marks`, `runs_on`), so the core names no target itself
(docs/design/interfaces.md, "Backends"). This module imports only the plugin manager, so the
backend contract, the IR toolkit and the pipelines can all use it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mneme.core import plugins


def backend_classes() -> Iterator[Any]:
    """The installed backends' classes, highest `priority` first (then by name), each imported when reached:
    a question the first backend answers imports no other (compiling for one GPU loads no other backend)."""
    table = plugins.LazyRegistry("backend")
    for name in sorted(table, key=lambda n: (-table.declared(n, "priority"), n)):
        yield table[name]


def same_architecture(target: str, device_arch: str) -> bool:
    """The default loader rule: the same architecture, target features (after ":") aside."""
    return target.split(":")[0] == device_arch.split(":")[0]


def runs_on(target: str, device_arch: str) -> bool:
    """Whether code for `target` runs on a device of `device_arch`, by the rule of the backend that claims it.

    Where no installed backend claims `device_arch`, the default rule (`same_architecture`) decides.
    """
    for cls in backend_classes():
        backend = cls()
        if backend.claims(device_arch):
            return backend.runs_on(target, device_arch)
    return same_architecture(target, device_arch)


def target_of_triple(triple: str) -> str:
    """The LLVM target an installed backend declares for IR of this triple (`ir_targets`); "" when none does."""
    arch = triple.split("-", 1)[0]
    for cls in backend_classes():
        for target, prefixes in cls.ir_targets.items():
            if arch and arch.startswith(tuple(prefixes)):
                return target
    return ""


def triple_for_marks(text: str) -> str:
    """The `default_triple` of the installed backend whose `kernel_marks` appear in IR `text`; "" when none."""
    for cls in backend_classes():
        if cls.default_triple and any(mark in text for mark in cls.kernel_marks):
            return cls.default_triple
    return ""


def default_triples() -> list[str]:
    """Every installed backend's `default_triple` (the GPU triples whose IR Mneme compiles), by priority."""
    return [cls.default_triple for cls in backend_classes() if cls.default_triple]


def thread_range_attributes() -> list[str]:
    """Every installed backend's `thread_range_attributes` (function attributes bounding a block's threads)."""
    return list(dict.fromkeys(a for cls in backend_classes() for a in cls.thread_range_attributes))
