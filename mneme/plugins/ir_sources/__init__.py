"""Built-in IR sources: IR embedded in ELF files by `mneme-cc`, and Triton's compile cache."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl


@hookimpl
def mneme_ir_sources():
    from mneme.plugins.ir_sources.embedded import EmbeddedIRSource
    from mneme.plugins.ir_sources.triton import TritonCacheIRSource

    return [EmbeddedIRSource, TritonCacheIRSource]
