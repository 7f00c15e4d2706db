"""Atomic file writes: a temporary file in the target's folder, flushed and fsynced, then renamed
over the target, so a reader (or a restart after a crash) sees the old file or the new one, never
half of one. Temporary names are ``.<target name>.<random>.tmp``.

>>> import tempfile, pathlib
>>> target = pathlib.Path(tempfile.mkdtemp()) / "state.json"
>>> _ = write_atomic(target, lambda f: f.write(b"{}"))
>>> target.read_bytes(), [p.name for p in target.parent.iterdir()]
(b'{}', ['state.json'])
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename in ``path`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(
    target: str | os.PathLike, write: Callable[[BinaryIO], object], fsync: bool = True, sync_dir: bool = True
) -> Path:
    """Write ``target`` through ``write(file)`` atomically; ``fsync`` makes the data durable and
    ``sync_dir`` the rename (leave it off to sync a folder once after several writes)."""
    target = Path(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync and sync_dir:
        fsync_dir(target.parent)
    return target
