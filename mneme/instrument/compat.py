"""What mneme-cc does when clang rejects CUDA that nvcc compiled: a device-only retry with workarounds.

Each `Workaround` names a known difference between nvcc and clang, the clang error that shows it
and what to add to clang's command line. After the real compile succeeded, a failed IR job is run
again with the workarounds its errors call for (and again if the next errors call for more), and
the launcher says which ones gave the IR (docs/instrumentation.md, "Compatibility retry").
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import attrs

PRELUDE = Path(__file__).with_name("nvcc_compat.h")


@attrs.frozen
class Workaround:
    name: str
    symptom: re.Pattern[str]  # searched in clang's error output
    args: tuple[str, ...]
    languages: tuple[str, ...] = ("cuda",)


WORKAROUNDS = (
    # nvcc declares host+device min/max for mixed integer and floating operands; clang only device ones
    Workaround(
        "compatibility prelude (nvcc's host min/max overloads)",
        re.compile(r"no matching function for call to '(?:min|max)'|use of undeclared identifier '(?:min|max)'"),
        ("-include", str(PRELUDE)),
    ),
    # clang makes a constexpr function that can never be constant an error by default; nvcc accepts it
    Workaround(
        "-Wno-invalid-constexpr", re.compile(r"\[-Winvalid-constexpr\]"), ("-Wno-invalid-constexpr",), ("cuda", "hip")
    ),
    # narrowing inside braces: an error in clang, a warning in nvcc's front end
    Workaround(
        "-Wno-c++11-narrowing",
        re.compile(r"\[-Wc\+\+11-narrowing\]|cannot be narrowed"),
        ("-Wno-c++11-narrowing",),
        ("cuda", "hip"),
    ),
    # `register` in C++17: an error in clang, accepted by nvcc
    Workaround("-Wno-register", re.compile(r"\[-Wregister\]"), ("-Wno-register",), ("cuda", "hip")),
    # variadic __device__ functions that are never called with variadic arguments
    Workaround(
        "-fcuda-allow-variadic-functions",
        re.compile(r"does not support variadic functions"),
        ("-Xclang", "-fcuda-allow-variadic-functions"),
    ),
)


def needed(message: str, language: str, applied: tuple[Workaround, ...] = ()) -> tuple[Workaround, ...]:
    """The workarounds not yet applied whose symptom appears in clang's `message`."""
    return tuple(w for w in WORKAROUNDS if w not in applied and language in w.languages and w.symptom.search(message))


def with_workarounds(argv: tuple[str, ...], applied: tuple[Workaround, ...]) -> list[str]:
    """The clang command line with the workarounds' arguments before the source (the last argument)."""
    extra = [a for w in applied for a in w.args]
    return [*argv[:-1], *extra, argv[-1]]


def retry(argv: tuple[str, ...], out: str, language: str, message: str) -> tuple[bool, tuple[Workaround, ...], str]:
    """Run the clang job again with the workarounds its errors call for, until it builds or none is left.

    Returns (built, workarounds applied, clang's last output).
    """
    applied: tuple[Workaround, ...] = ()
    while more := needed(message, language, applied):
        applied += more
        done = subprocess.run(
            [*with_workarounds(argv, applied), "-o", out], capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        message = done.stdout + done.stderr
        if done.returncode == 0 and Path(out).exists():
            return True, applied, message
    return False, applied, message
