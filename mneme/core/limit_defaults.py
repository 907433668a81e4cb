"""The limits' names and defaults (`mneme.core.limits` checks them): apart from the checks, so that
the variable registry (`mneme.core.envvars`) lists each ``MNEME_LIMIT_<NAME>`` without importing them."""

from __future__ import annotations

#: Default limits. Names are lower case; the variable is MNEME_LIMIT_<NAME upper case>.
DEFAULTS: dict[str, int] = {
    "buffer_bytes": 4 << 30,  # one argument buffer made by a capture description
    "capture_bytes": 16 << 30,  # all the buffers of one capture together
    "param_values": 1_000_000,  # values of one enumerable search-space parameter
    "pipeline_draws": 256,  # draws of one pass-pipeline parameter
    "text_bytes": 64 << 20,  # a JSON/YAML description or recording database read into memory
    "space_bytes": 1 << 20,  # a search space file (YAML costs ~300 bytes of memory per byte read)
    "json_depth": 64,  # nesting of a JSON/YAML document
    "json_nodes": 1_000_000,  # values, lists and objects of one JSON/YAML document
    "value_chars": 1 << 16,  # a string or list a constraint computes, at every step
    "ir_bytes": 64 << 20,  # one LLVM IR module (text or bitcode), before it is parsed (~50x in memory)
    "compile_seconds": 300,  # one variant's compilation (IR to machine code), killed past it
    "timeout_seconds": 600,  # one kernel run (replay, capture, tuning); --timeout changes it
}


def variable(name: str) -> str:
    return f"MNEME_LIMIT_{name.upper()}"
