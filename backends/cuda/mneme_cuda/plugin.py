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
    # (BRA.DIV, WARPSYNC) and registers may grow (mneme_cuda.codegen.assemble_ptx). Off: nvJitLink where it loads.
    Knob(
        "ptxas_whole_program",
        "bool",
        False,
        "assemble",
        "Assemble as a whole program with the ptxas executable (as nvcc without -rdc), not nvJitLink's "
        "relocatable code.",
        search="bool",
        feature="ptxas",
        backends=("cuda",),
    ),
    # NVPTX's scheduling of the PTX it writes, which ptxas largely keeps (mneme_cuda.target.target_machine):
    # off, LLVM's source order. Parallel code generation's partitions take the default.
    Knob(
        "nvptx_sched4reg",
        "bool",
        False,
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
