"""Every file shardopt writes goes through here: checked before any work, never an input, atomic.

An output is checked when the command starts (:func:`check_output`), so a bad location fails in
a second rather than after minutes of planning, and it can never resolve to one of the command's
inputs or into an input folder. The bytes then go to a temporary file beside the target that is
renamed over it (:func:`write_atomic`): a reader, a crash or an interrupt never sees half a file.
A temporary file carries its writer's pid; SIGINT/SIGTERM remove it (the CLI turns both into
KeyboardInterrupt), and one left by a SIGKILLed writer is removed by the next write of the same
output.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from shardopt.core.errors import ShardoptError

# The temp file's name is ".<stem>~<hash>.<pid>.<random>.tmp"; the stem is cut so that any
# target name the file system accepts also gives a temp name it accepts.
_STEM_CHARS = 96


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _temp_prefix(path: Path) -> str:
    digest = hashlib.sha1(os.fsencode(path.name)).hexdigest()[:8]
    return f".{path.name[:_STEM_CHARS]}~{digest}."


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temps(path: Path) -> list[Path]:
    """Remove temp files of ``path`` whose writer is dead (a SIGKILL in the write window)."""
    prefix = _temp_prefix(path)
    removed = []
    folder = path.parent
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return removed
    for name in names:
        pid_text = name[len(prefix):].split(".", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not _pid_alive(int(pid_text)):
            try:
                os.unlink(folder / name)
                removed.append(folder / name)
            except OSError:
                pass
    return removed


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_output(
    path: str | Path,
    *,
    option: str = "--output",
    inputs: Iterable[str | Path | None] = (),
    suffixes: Sequence[str] = (),
    parent_may_be_created: bool = False,
    others: Mapping[str, str | Path] = {},
) -> Path:
    """Check that ``path`` can be written as an output; return it. ShardoptError otherwise.

    ``inputs`` are the command's input files and folders: the output may be none of them and may
    not lie inside an input folder. ``suffixes`` are the accepted extensions (the format is read
    from it). ``parent_may_be_created``: the folder is made at write time (``plans/``), so only
    its own parent must exist. ``others``: the command's other outputs by option; the same file
    named twice is refused as that, not as an input.
    """
    path = Path(path)
    where = f"{option} {path}"
    for other_option, other in others.items():
        if _resolved(Path(other)) == _resolved(path):
            raise ShardoptError(f"{where}: is also the {other_option} output; give each output its own file")
    if not path.name or path.name in (".", ".."):
        raise ShardoptError(f"{where}: names a folder, not a file")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ShardoptError(f"{where}: must end in {' or '.join(suffixes)} (the format is read from it)")
    # Before anything stats the path: a name past the limit makes stat itself fail.
    if len(os.fsencode(path.name)) > _name_max(path.parent):
        raise ShardoptError(f"{where}: the file name is longer than this file system allows")
    _refuse_inputs(path, inputs, where, folder_output=False)
    if path.is_dir():
        raise ShardoptError(f"{where}: is a folder; name a file")
    parent = folder = path.parent
    if parent_may_be_created and not parent.exists():
        folder = parent.parent
    if not folder.exists():
        raise ShardoptError(f"{where}: the folder {folder} does not exist")
    if not folder.is_dir():
        raise ShardoptError(f"{where}: {folder} is a file, not a folder")
    if folder == parent:
        _probe(folder, path, where)
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise ShardoptError(f"{where}: cannot create the folder {parent}: permission denied")
    return path


def check_output_folder(
    path: str | Path, *, option: str = "--output", inputs: Iterable[str | Path | None] = ()
) -> Path:
    """A folder an output is written into (a profile dataset, a report): may exist, or its parent must."""
    path = Path(path)
    where = f"{option} {path}"
    _refuse_inputs(path, inputs, where, folder_output=True)
    if path.exists() and not path.is_dir():
        raise ShardoptError(f"{where}: is a file, not a folder")
    parent = path if path.exists() else path.parent
    if not parent.is_dir():
        raise ShardoptError(f"{where}: the folder {parent} does not exist")
    _probe(parent, path / "probe" if path.exists() else path, where)
    return path


def _refuse_inputs(path: Path, inputs: Iterable[str | Path | None], where: str, folder_output: bool) -> None:
    """An output is none of the inputs and lies in no input folder; a folder output holds no input."""
    real = _resolved(path)
    for item in inputs:
        if item is None:
            continue
        source = _resolved(Path(item))
        if not folder_output and real == source:
            raise ShardoptError(f"{where}: is this command's input {item}; write the output elsewhere")
        if folder_output and not source.is_dir() and _inside(source, real):
            raise ShardoptError(f"{where}: holds this command's input {item}; write the output elsewhere")
        if source.is_dir() and _inside(real, source):
            raise ShardoptError(f"{where}: lies inside the input folder {item}; write the output elsewhere")


def _probe(folder: Path, target: Path, where: str) -> None:
    """Create and remove a temp file where the output's will go: permission, read-only file system."""
    probe = folder / f"{_temp_prefix(target)}{os.getpid()}.probe.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise ShardoptError(f"{where}: cannot write in {folder}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    The file gets the mode a new file gets under the umask (mkstemp's 0600 is not what users
    expect of a plan or a PNG). Temp files of dead writers of the same output are removed first.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    folder = path.parent
    clean_stale_temps(path)
    umask = os.umask(0)
    os.umask(umask)
    tmp = folder / f"{_temp_prefix(path)}{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~umask)
    except OSError as exc:
        raise ShardoptError(f"{path}: cannot write: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES,
                                                      errno.EISDIR, errno.ENOTDIR, errno.ENAMETOOLONG):
            raise ShardoptError(f"{path}: cannot write: {exc.strerror}") from None
        raise


FIGURE_FORMATS = (".png", ".svg", ".pdf")
# A per-rank figure is no wider than this (inches), and labels each rank up to RANK_TICKS ranks:
# 4096 ranks drew a 270556-pixel-wide PNG in 28 s.
FIGURE_MAX_IN, RANK_TICKS = 16.0, 32


def write_figure(fig, path: str | Path, dpi: int = 110) -> None:
    """Save a matplotlib figure atomically, in the format its extension names."""
    import io

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if f".{fmt}" not in FIGURE_FORMATS:
        raise ShardoptError(f"{path}: a figure must end in {', '.join(FIGURE_FORMATS)}")
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi)
    write_atomic(path, buffer.getvalue())
