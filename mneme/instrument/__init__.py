"""Build-time instrumentation: the `mneme-cc` launcher and the `.mneme_ir` section it writes."""

from mneme.instrument.section import SECTION_NAME, EmbeddedEntry, read_entries

__all__ = ["SECTION_NAME", "EmbeddedEntry", "read_entries"]
