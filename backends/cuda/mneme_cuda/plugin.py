"""Registers the CUDA backend with Mneme (entry point `cuda` in group `mneme`), with its code generator's knobs."""

from __future__ import annotations

from mneme.core.hookspecs import hookimpl
from mneme.core.knob import Knob
from mneme.core.plugins import Described

# ptxas / nvJitLink / driver-JIT options; tuned by the built-in spaces' `ptxas` feature, on by default on CUDA.
KNOBS = [
    Knob(
        "ptxas_opt",
        "int",
        3,
        "assemble",
        "ptxas optimization level.",
        low=0,
        high=3,
        search="range",
        feature="ptxas",
        backends=("cuda",),
        schema1=True,
    ),
    Knob(
        "max_registers",
        "int",
        0,
        "assemble",
        "Register cap for ptxas (0: none).",
        low=0,
        high=255,
        search=(0, 32, 64, 128, 255),
        feature="ptxas",
        backends=("cuda",),
        schema1=True,
    ),
    Knob(
        "cache_mode",
        "str",
        "",
        "assemble",
        "ptxas default load cache ('' leaves ptxas's).",
        choices=("", "ca", "cg", "cs", "lu", "cv"),
        search=("", "ca", "cg"),
        feature="ptxas",
        backends=("cuda",),
        schema1=True,
    ),
    # Whole-program machine code, as nvcc makes an application's without -rdc (its default). nvJitLink compiles
    # PTX only as relocatable code, where warp shuffles and barriers get a divergence check and a slow path
    # (BRA.DIV, WARPSYNC) and registers may grow (mneme_cuda.codegen.assemble_ptx). On by default since the
    # application corpus measured it with nvptx_sched4reg (H100, `7e71ca7`: IR within 5% of the application's
    # binary for 30/32 instances, 28/32 without; docs/design/investigations/ir-vs-nvcc-2026-12-06.md); where
    # the ptxas executable is missing, nvJitLink's relocatable code, said once. Off: nvJitLink where it loads.
    Knob(
        "ptxas_whole_program",
        "bool",
        True,
        "assemble",
        "Assemble as a whole program with the ptxas executable (as nvcc without -rdc), not nvJitLink's "
        "relocatable code.",
        search="bool",
        feature="ptxas",
        backends=("cuda",),
    ),
    # NVPTX's scheduling of the PTX it writes, which ptxas largely keeps (mneme_cuda.target.target_machine):
    # on by default (as nvcc issues a dequantizing kernel's loads before their first use; with
    # ptxas_whole_program, above), off: LLVM's source order. Parallel code generation's partitions stay in
    # source order (and link relocatable code): neither knob reaches them.
    Knob(
        "nvptx_sched4reg",
        "bool",
        True,
        "codegen",
        "NVPTX schedules for register pressure (-nvptx-sched4reg), not in source order.",
        search="bool",
        feature="knobs",
        backends=("cuda",),
    ),
]


@hookimpl
def mneme_backends():
    # Described: `mneme plugins` asks the driver through ctypes, importing neither the backend nor cuda-bindings.
    return [
        Described(
            "cuda", "mneme_cuda.backend:CudaBackend", availability="mneme_cuda.driver:listing_availability", priority=30
        )
    ]


@hookimpl
def mneme_recorders():
    return [
        Described(
            "cuda",
            "mneme_cuda.commands:CudaRecorder",
            description="records launches of programs that use the CUDA runtime or driver API",
        )
    ]


@hookimpl
def mneme_parameters():
    return KNOBS


@hookimpl
def mneme_cli_commands(cli, registry):
    from mneme_cuda.commands import COMMANDS

    return COMMANDS
