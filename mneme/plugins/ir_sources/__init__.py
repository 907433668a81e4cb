"""Built-in IR sources: IR embedded in ELF files by `mneme-cc`, and Triton's compile cache."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.plugins import Described


@hookimpl
def mneme_ir_sources():
    return [
        Described("embedded", "mneme.plugins.ir_sources.embedded:EmbeddedIRSource"),
        Described("triton", "mneme.plugins.ir_sources.triton:TritonCacheIRSource"),
    ]
