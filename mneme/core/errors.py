"""The exceptions Mneme raises. Every message names the file, field or kernel and says what to do."""

from __future__ import annotations

import os


# The CLI's exit codes, one meaning each (docs/cli.md lists them per command).
EXIT_OK = 0
EXIT_INTERNAL = 1  # an unexpected error, or one Mneme could not attribute to the input
EXIT_INVALID_INPUT = 2  # options, arguments or an input file (malformed, unknown keys, limits)
EXIT_NOT_VERIFIED = 3  # the variant or the recorded baseline did not run correctly or did not verify
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT); SIGTERM gives 143

#: The epilog of a command's --help that returns only the common codes.
EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 internal error; 2 invalid input (options, arguments, a malformed or "
    "unknown file); 130 interrupted. See docs/cli.md."
)


class MnemeError(Exception):
    """Base of every error Mneme raises on purpose; the CLI prints its message, not a traceback."""

    exit_code = EXIT_INTERNAL


class UsageError(MnemeError):
    """Invalid options or arguments given by the user."""

    exit_code = EXIT_INVALID_INPUT


class FormatError(MnemeError):
    """A file (recording database, snapshot, configuration) is malformed.

    The message names the file and, when known, the field or block at fault. A malformed input
    is invalid input: the CLI exits 2.
    """

    exit_code = EXIT_INVALID_INPUT

    def __init__(self, path: str | os.PathLike | None, message: str, *, field: str | None = None):
        self.path = None if path is None else os.fspath(path)
        self.field = field
        where = self.path or "<input>"
        if field:
            where = f"{where}: field {field!r}"
        super().__init__(f"{where}: {message}")


class SchemaVersionError(FormatError):
    """A file was written by a newer version of the format than this reader understands."""


class CorruptFileError(FormatError):
    """A file's checksum or structure is wrong: truncated, bit-flipped or not a Mneme file."""


class NotVerifiedError(MnemeError):
    """A result did not verify: a snapshot's checksums, two snapshots that differ, a variant's output."""

    exit_code = EXIT_NOT_VERIFIED


class PluginError(MnemeError):
    """A plugin is missing, duplicated or broken."""


class BackendUnavailable(MnemeError):
    """A backend cannot be used on this machine; the message says why."""


class IRError(MnemeError):
    """LLVM IR could not be read, linked, transformed or compiled."""


class MalformedIRError(IRError):
    """An IR file given as input is not IR (not text, not bitcode, malformed): invalid input."""

    exit_code = EXIT_INVALID_INPUT


class MissingGlobalError(MnemeError):
    """A device global the recording holds is not defined by the loaded module (pruned, or never emitted)."""


class UnsupportedError(MnemeError):
    """A construct is not supported by the chosen backend or target; the message names it."""


class ExperimentError(MnemeError):
    """One experiment failed (compile, load, launch, fault, timeout)."""

    def __init__(self, message: str, *, kind: str = "error"):
        self.kind = kind
        super().__init__(message)


class LimitError(MnemeError):
    """An input asks for more than a configured limit allows (memory, count, size); the message names the limit."""

    exit_code = EXIT_INVALID_INPUT


# The distribution's name as pip installs it, for "pip install 'mneme-gpu[extra]'" messages.
DISTRIBUTION = "mneme-gpu"


class MissingExtraError(UsageError):
    """A feature needs an optional dependency group (an extra) that is not installed."""

    def __init__(self, what: str, extra: str, *, plural: bool = False):
        self.extra = extra
        super().__init__(
            f"{what} {'need' if plural else 'needs'} the {extra} extra: pip install '{DISTRIBUTION}[{extra}]'"
        )


def require(module: str, extra: str, what: str):
    """Import `module`, or raise MissingExtraError naming the extra that provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name != module and not module.startswith(exc.name + "."):
            raise  # the package is there but broken: not a missing extra
        raise MissingExtraError(what, extra) from None
