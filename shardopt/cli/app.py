"""The ``shardopt`` group and its one exit path: every error is one line and a documented code.

Every way out is one of the exit codes of :mod:`shardopt.core.errors`, with at most one line on
stderr: a ShardoptError, a click usage error, an interrupt (SIGINT, SIGTERM) and, should one slip
through, an internal error (exit 70, with the traceback only under SHARDOPT_DEBUG=1).

Warnings (a model from another machine, a plan predicted with other comm) speak of a result, so
they are held and printed once the command has one (exit 0 or 1); a command that fails prints its
one error line and nothing else, whatever the machine it runs on.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager

import click

from shardopt import __version__
from shardopt.core.errors import (
    EXIT_INPUT, EXIT_INTERRUPTED, ShardoptError, install_interrupt_handlers, route_interrupts,
)

EXIT_INTERNAL = 70  # a bug: please report it (BSD's EX_SOFTWARE)

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 invalid plan (validate) or regression (bench --check); 2 bad input or"
    " usage; 3 no plan fits; 130 interrupted."
)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


class Interrupted(Exception):
    """A command stopped by SIGINT or SIGTERM; the message says what was kept."""


_PENDING: list[str] = []  # this command's warnings, printed only if it ends with a result


def warn(text: str) -> None:
    """A warning about the result being made: printed when the command ends with one."""
    line = f"warning: {one_line(text)}"
    if line not in _PENDING:
        _PENDING.append(line)


def _flush_warnings() -> None:
    for line in _PENDING:
        click.echo(line, err=True)
    _PENDING.clear()


@contextmanager
def stage_status(stream=None, every_s: float = 1.0):
    """While a plan is made, one line on a terminal's stderr: the search's stage (its INFO
    messages) and the seconds so far, redrawn each ``every_s`` and wiped at the end. Piped or
    captured, nothing: a log keeps no redrawn lines, and a failing command keeps its one line."""
    stream = stream if stream is not None else sys.stderr
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield
        return
    from shardopt.contracts import STAGE_LOGGER

    log, started, stage = logging.getLogger(STAGE_LOGGER), time.monotonic(), ["planning"]
    done, lock = threading.Event(), threading.Lock()

    def draw() -> None:
        width = shutil.get_terminal_size().columns - 1  # a wrapped line would not be wiped
        with lock:
            stream.write(f"\r\x1b[K{time.monotonic() - started:4.0f} s  {stage[0]}"[:width + 4])
            stream.flush()

    class Stage(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            stage[0] = record.getMessage()
            draw()

    def tick() -> None:
        while not done.wait(every_s):
            draw()

    handler, level = Stage(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    ticker = threading.Thread(target=tick, name="stage-status", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        log.removeHandler(handler)
        log.setLevel(level)
        with lock:
            stream.write("\r\x1b[K")
            stream.flush()


# click >= 8.2 raises this for a group called with no command (older clicks print help themselves).
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _exit_interrupted(kept: str) -> None:
    """Exit 130 with one line. A further interrupt while exiting is ignored (it raised a traceback
    from this handler). ``python -m`` marks an interrupt that passed through code run from a
    string (``exec``: every dataclass made at import) as unhandled, however it was handled, and
    ends the process by SIGINT once the interpreter is down (exit -2, seen under CI); code run
    from a string clears the mark."""
    route_interrupts(signal.SIG_IGN)  # main() restores the handlers it found
    click.echo(f"interrupted: {kept}", err=True)
    exec("")  # noqa: S102 - an empty string: only CPython's mark is reset
    sys.exit(EXIT_INTERRUPTED)


class ShardoptGroup(click.Group):
    """click.Group whose every exit is one documented code and one line (click's own print four)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        # SIGTERM as Ctrl-C, so that every ``finally`` (temp files, workers) runs; both noted.
        previous = install_interrupt_handlers()
        _PENDING.clear()
        try:
            code = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=False, **extra)
        except SystemExit as exc:  # a command's own exit 1 (validate, check-moves, gate): a result
            if exc.code in (0, 1, None):
                _flush_warnings()
            raise
        except Interrupted as exc:
            _exit_interrupted(str(exc))
        except _NO_ARGS_IS_HELP as exc:  # a bare `shardopt`: the help, as click shows it
            click.echo(exc.format_message(), err=True)
            sys.exit(EXIT_INPUT)
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "shardopt"
            click.echo(f"error: {command}: {one_line(exc.format_message())}"
                       f" (see {command} --help)", err=True)
            sys.exit(EXIT_INPUT)
        except ShardoptError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (KeyboardInterrupt, click.exceptions.Abort):
            _exit_interrupted("nothing was written")
        except BrokenPipeError:
            sys.stderr.close()  # the reader went away (| head): not an error of ours
            sys.exit(0)
        except click.ClickException as exc:
            click.echo(f"error: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for users
            if os.environ.get("SHARDOPT_DEBUG"):
                raise
            click.echo(f"error: internal error, please report it: {type(exc).__name__}:"
                       f" {one_line(exc)[:300]} (SHARDOPT_DEBUG=1 shows the traceback)", err=True)
            sys.exit(EXIT_INTERNAL)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        code = code if isinstance(code, int) else 0
        if code in (0, 1):
            _flush_warnings()
        _PENDING.clear()
        sys.exit(code)

    def invoke(self, ctx):
        # click turns KeyboardInterrupt into Abort after printing a blank line; keep it one line.
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted("nothing was written") from None


def command_line() -> str:
    """The command as typed, for headers of generated files."""
    return " ".join(["shardopt"] + sys.argv[1:])



@click.group(name="shardopt", cls=ShardoptGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="shardopt")
def main() -> None:
    """Shard embedding tables of DLRM models over GPUs or CPU ranks, and check the plans."""
