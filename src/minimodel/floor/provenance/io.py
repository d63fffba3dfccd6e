"""Writing results safely: every output through a temporary file renamed into place.

`atomic_write` opens a temporary file next to the target and renames it over the target only
once it is complete, so an interrupted run leaves no half-written file (and a stage removes what a
killed one left: `remove_stale_temporaries`). Outputs get the mode the umask gives. `write_csv`,
`write_json`, `write_text` and `save_figure` are what the workflow's scripts write with.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **kwargs) -> Iterator:
    """Open a temporary file next to `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would survive the rename
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete what a killed `atomic_write` of `path` left behind; returns what it removed."""
    path = Path(path)
    stale = sorted(path.parent.glob(f".{path.name}.*.tmp")) if path.parent.is_dir() else []
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


def write_json(path: str | os.PathLike, obj) -> None:
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path) as fh:
        fh.write(text)


def write_csv(path: str | os.PathLike, frame) -> None:
    with atomic_write(path, newline="") as fh:
        frame.to_csv(fh, index=False)


def save_figure(path: str | os.PathLike, fig, **kwargs) -> None:
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format=Path(path).suffix.lstrip(".") or "png", **kwargs)
