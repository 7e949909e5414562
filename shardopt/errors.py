"""One error type for everything a user can get wrong, and the exit code each kind maps to."""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    INPUT = "input"  # the file or flag cannot be used as given
    INFEASIBLE = "infeasible"  # the workload is well-formed but no plan fits it


EXIT_CODES = {ErrorKind.INPUT: 2, ErrorKind.INFEASIBLE: 2}


class ShardoptError(Exception):
    """A failure the user can fix; its message is one line that names the file and field."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.INPUT) -> None:
        super().__init__(message)
        self.kind = kind

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]
