"""Ask hipcc which clang command it runs, without compiling anything.

hipcc is a script around a clang: with ``HIPCC_VERBOSE=1`` and ``-###`` it prints the
command it would run and that clang prints its device cc1 runs. `hipcc_clang_command` reads
both; `flags.plan_hipcc` replays the command with our clang.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
from pathlib import Path

import attrs

# The device library a HIP compile links names the code object version (`oclc_abi_version_500.bc`: v5).
_ABI_LIBRARY = re.compile(r"oclc_abi_version_(\d+)\.bc")
_INCLUDE_OPTIONS = ("-isystem", "-idirafter", "-I")


def without_includes_under(args: list[str], folder: Path, cwd: str) -> list[str]:
    """`args` less the include directories inside `folder` (another clang's own headers)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        opt = next((o for o in _INCLUDE_OPTIONS if a == o or a.startswith(o)), None)
        width = 2 if opt == a and i + 1 < len(args) else 1
        path = args[i + 1] if width == 2 else a[len(opt) :] if opt else ""
        if opt and path and Path(os.path.realpath(os.path.join(cwd, path))).is_relative_to(folder):
            i += width
            continue
        out.append(a)
        i += 1
    return out


@attrs.frozen
class HipccCommand:
    """What hipcc's dry run shows: its compiler command and what that clang builds."""

    argv: list[str]
    code_object: int | None  # the code object version (4, 5, ...); None when not shown
    archs: tuple[str, ...]  # the device cc1 runs' -target-cpu (clang's default when no arch is given)


def _device_runs(clang_plan: str) -> tuple[int | None, tuple[str, ...]]:
    """The code object version and GPU architectures of the AMDGPU cc1 runs `clang -###` printed."""
    code_object, archs = None, []
    for line in clang_plan.splitlines():
        if '"-cc1"' not in line:
            continue
        try:
            tokens = shlex.split(line)
        except ValueError:
            continue
        pairs = dict(itertools.pairwise(tokens))
        if not pairs.get("-triple", "").startswith("amdgcn"):
            continue
        if pairs.get("-target-cpu"):
            archs.append(pairs["-target-cpu"])
        abi = _ABI_LIBRARY.search(line)
        if abi:
            code_object = int(abi.group(1)) // 100
    return code_object, tuple(dict.fromkeys(archs))


def hipcc_clang_command(argv: list[str], cwd: str) -> HipccCommand:
    """The compiler command `hipcc ARGS` runs, without compiling anything.

    hipcc prints its command with ``HIPCC_VERBOSE=1`` (``hipcc-cmd: ...``); ``-###`` makes
    clang print what it would run instead of running it, so nothing is compiled or written.
    The environment is the real command's: ``HIP_PLATFORM`` and ``ROCM_PATH`` pick the same
    compiler. Raises RuntimeError with the reason when hipcc does not show a command.
    """
    env = {**os.environ, "HIPCC_VERBOSE": "1"}
    try:
        done = subprocess.run(
            [*argv, "-###"],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot run {argv[0]} -### ({exc})") from exc
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("hipcc-cmd:")), None)
    if line is None:
        raise RuntimeError(
            f"{os.path.basename(argv[0])} did not print its compiler command with HIPCC_VERBOSE=1 "
            f"(exit status {done.returncode})"
        )
    command = [a for a in shlex.split(line.split(":", 1)[1]) if a != "-###"]
    if not command:
        raise RuntimeError(f"{os.path.basename(argv[0])} printed an empty compiler command")
    return HipccCommand(command, *_device_runs(done.stderr))
