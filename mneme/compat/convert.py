"""`mneme.convert` of the original Mneme API: hand a tuned configuration to Proteus.

Follows the current release: the `CodeGen` written is the code generator Proteus itself is
configured with (`PROTEUS_CODEGEN`, "rtc" by default), since configurations no longer carry
one; a configuration that still has `codegen_method` (the documented version) is accepted
and that field ignored. The kernel's source location is read from the IR's debug info.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

#: Proteus's code generators (its `PROTEUS_CODEGEN` values).
PROTEUS_CODEGENS = ("rtc", "serial", "parallel")


def jit_attribute(specializations: list[bool]) -> str:
    """The source annotation that makes Proteus specialize the same arguments (1-based indexes)."""
    indexes = ",".join(str(i + 1) for i, flag in enumerate(specializations) if flag)
    return f'__attribute__((annotate("jit", {indexes})))'


def proteus_codegen_method() -> str:
    """The code generator Proteus uses here: `PROTEUS_CODEGEN` when it names one, else its default "rtc"."""
    value = os.environ.get("PROTEUS_CODEGEN", "").strip().lower()
    return value if value in PROTEUS_CODEGENS else "rtc"


def kernel_location(modules: list[str], kernel_name: str) -> tuple[Path, int] | None:
    """(source file, line) where the kernel is defined, from the first module whose debug info says it."""
    from mneme.core import ir

    for module in modules:
        try:
            text = str(ir.load(module))
        except Exception as exc:  # noqa: BLE001 - a module that does not load has no location to give
            log.debug("no source location from %s: %s", module, exc)
            continue
        found = re.search(rf'^define [^\n]*@"?{re.escape(kernel_name)}"?\([^\n]*!dbg (![0-9]+)', text, re.MULTILINE)
        subprogram = found and _metadata(text, found.group(1))
        file_ref = subprogram and re.search(r"\bfile: (![0-9]+)", subprogram)
        line = subprogram and re.search(r"\bline: ([0-9]+)", subprogram)
        source = file_ref and _metadata(text, file_ref.group(1))
        name = source and re.search(r'filename: "([^"]*)"', source)
        if not (name and line):
            continue
        folder = re.search(r'directory: "([^"]*)"', source)
        return (Path(folder.group(1) if folder else "") / name.group(1)).resolve(), int(line.group(1))
    return None


def _metadata(text: str, ref: str) -> str | None:
    found = re.search(rf"^{re.escape(ref)} = (?:distinct )?(![A-Za-z]+\(.*\))$", text, re.MULTILINE)
    return found.group(1) if found else None


def export_proteus_tuned_kernel(
    filename: str, recorded_execution, kernel_descr, config, *, usage_filename: str | None = None
) -> dict:
    """Write Proteus's tuned-kernel JSON for `config` to `filename`; returns what it wrote.

    How to use it (the annotation for the kernel, where the kernel is defined when the IR carries
    debug info, and the `PROTEUS_TUNED_KERNELS` setting) goes to `usage_filename` when given (the
    current release's tuner writes `proteus_usage.txt`), else to standard output.
    """
    data = {
        kernel_descr.kernel_name: {
            "CodeGen": proteus_codegen_method(),
            "LaunchBounds": config.set_launch_bounds,
            "SpecializeDims": config.specialize_dims,
            "SpecializeDimsRange": config.specialize_dims,
            "OptLevel": 1,
            "Pipeline": config.passes,
            "CodeGenOptLevel": config.codegen_opt,
            "TunedMaxThreads": config.max_threads,
            "MinBlocksPerSM": config.min_blocks_per_sm,
        }
    }
    Path(filename).write_text(json.dumps(data, indent=2))
    location = kernel_location(list(recorded_execution.llvm_files), kernel_descr.kernel_name)
    where = f"{location[0]}:{location[1]}" if location else "unknown"
    usage = (
        f"To use the tuned variant of '{recorded_execution.demangled_name}', annotate the kernel with\n\n"
        f"{jit_attribute(kernel_descr.specializations)}\n\nKernel source location:\n{where}\n\n"
        f"Build the application with Proteus, then run it with\n\n"
        f"export PROTEUS_TUNED_KERNELS={Path(filename).resolve()}\n"
    )
    if usage_filename is not None:
        Path(usage_filename).write_text(usage)
    else:
        print(usage)  # noqa: T201 - the original prints the usage
    return data


def convert_to_json(filename: str, recorded_execution, kernel_descr, config) -> dict:
    """Write Proteus's tuned-kernel JSON for `config` and print how to use it (`export_proteus_tuned_kernel`)."""
    return export_proteus_tuned_kernel(filename, recorded_execution, kernel_descr, config)
