"""Whether LLVM knows a processor name: `--arch sm_999` is refused by name, not built with warnings.

LLVM accepts any `cpu` when creating a target machine and only prints "'X' is not a recognized
processor for this target (ignoring processor)" to the C stderr, then builds for a default
processor; llvmlite exposes no list of processors. So we ask once per (triple, cpu), reading
what LLVM wrote to file descriptor 2 while it made the machine.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import threading

_lock = threading.Lock()


@functools.lru_cache(maxsize=64)
def recognized(triple: str, cpu: str) -> bool:
    """True when LLVM's target for `triple` knows the processor `cpu`."""
    import llvmlite.binding as llvm

    from mneme.core import ir

    ir.initialize()
    with _lock:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with tempfile.TemporaryFile() as capture:
                os.dup2(capture.fileno(), 2)
                try:
                    llvm.Target.from_triple(triple).create_target_machine(cpu=cpu)
                finally:
                    os.dup2(saved, 2)
                capture.seek(0)
                said = capture.read().decode("utf-8", "replace")
        finally:
            os.close(saved)
    if "not a recognized processor" in said:
        return False
    if said:
        sys.stderr.write(said)  # anything else LLVM said is the user's to see
    return True
