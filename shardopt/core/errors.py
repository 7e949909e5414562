"""One error type for everything a user can get wrong, and the exit code each kind maps to.

Exit codes of the ``shardopt`` command (README, "Errors and exit codes"):

    0    success
    1    the answer is "no": an invalid plan (``validate``), a regression (``bench --check``)
    2    bad input or usage: a file, field or option that cannot be used as given
    3    no plan fits: the workload is well-formed but infeasible
    130  interrupted (SIGINT or SIGTERM); finished work is kept
"""

from __future__ import annotations

import enum
import signal
import sys


class ErrorKind(enum.Enum):
    INPUT = "input"  # the file or flag cannot be used as given
    INFEASIBLE = "infeasible"  # the workload is well-formed but no plan fits it


EXIT_OK = 0
EXIT_NO = 1
EXIT_INPUT = 2
EXIT_INFEASIBLE = 3
EXIT_INTERRUPTED = 130

EXIT_CODES = {ErrorKind.INPUT: EXIT_INPUT, ErrorKind.INFEASIBLE: EXIT_INFEASIBLE}


class ShardoptError(ValueError):
    """A failure the user can fix; its message is one line that names the file and field.

    A ValueError, so Python callers (the TorchRec plugin's users) can catch it as the bad-argument
    error it is.
    """

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.INPUT, details: tuple[str, ...] = ()) -> None:
        super().__init__(" ".join(str(message).split()))  # one line, always
        self.kind = kind
        self.details = details  # more lines, printed only when asked (plan --explain)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


class FieldError(ShardoptError):
    """A bad field of a structured input; ``path`` is ``tables[3].embedding_dim`` style.

    Callers that know where the data came from (a CLI option, a TorchRec table) re-word it with
    :meth:`from_source` instead of naming a file the user never wrote.
    """

    def __init__(self, source: str, path: str, reason: str, kind: ErrorKind = ErrorKind.INPUT) -> None:
        super().__init__(f"{source}: {path}: {reason}", kind)
        self.source, self.path, self.reason = source, path, reason

    @property
    def field(self) -> str:
        """The field's own name: ``tables[3].embedding_dim`` -> ``embedding_dim``, ``tables[3]`` -> ``tables``."""
        return self.path.split(".")[-1].split("[")[0]

    def reworded(self, where: str) -> ShardoptError:
        return ShardoptError(f"{where}: {self.reason}", self.kind)


# Python swallows a KeyboardInterrupt raised inside a finalizer or a weakref callback ("Exception
# ignored in ..."): a Ctrl-C that landed there was lost and a profile ran on to exit 0. The CLI's
# handler notes every interrupt; long loops call ``check_interrupted`` between units of work.
_interrupted = False


def raise_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    """Signal handler for SIGINT and SIGTERM: note the interrupt, then raise it as Ctrl-C does."""
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt()


def install_interrupt_handlers() -> dict:
    """Route SIGINT and SIGTERM to ``raise_interrupt``; returns the handlers to restore."""
    global _interrupted
    _interrupted = False
    if sys.unraisablehook is not _quiet_swallowed_interrupt:
        _quiet_swallowed_interrupt.default = sys.unraisablehook
        sys.unraisablehook = _quiet_swallowed_interrupt
    return route_interrupts(raise_interrupt)


def route_interrupts(handler) -> dict:
    """Route SIGINT and SIGTERM to ``handler`` (a function, or ``signal.SIG_IGN``) from the main
    thread (elsewhere signals are left alone); returns the handlers they had."""
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread: leave signals alone
            break
    return previous


def _quiet_swallowed_interrupt(unraisable) -> None:
    """No "Exception ignored" traceback for a noted interrupt: the next check raises it."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _interrupted:
        return
    _quiet_swallowed_interrupt.default(unraisable)


_quiet_swallowed_interrupt.default = sys.__unraisablehook__


def check_interrupted() -> None:
    """Raise KeyboardInterrupt if an interrupt arrived but was swallowed where it landed."""
    if _interrupted:
        raise KeyboardInterrupt()
