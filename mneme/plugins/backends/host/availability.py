"""Whether the host backend can run here, answered without loading LLVM (for `mneme plugins`)."""

from __future__ import annotations

import platform

from mneme.core.availability import Availability


def availability() -> Availability:
    if platform.system() != "Linux":
        return Availability(False, "the host backend needs Linux (fixed-address mmap); use a Linux machine")
    from mneme.core.native import c_compiler

    if c_compiler() is None:
        from mneme.plugins.backends.host import runtime  # a runtime built earlier still serves

        if not runtime.built():
            return Availability(False, "no C compiler to build the host runtime; install gcc or set CC")
    return Availability(True)
