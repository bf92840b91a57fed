"""``file:`` overrides of a load request, materialised in a private temporary folder.

A load request may carry model files (``file:<version>/<name>`` -> bytes) with a config
override. As in Triton, the model is then loaded from a fresh temporary folder holding only
those files (never the repository), so a client can create a model that has no folder in
the repository. Paths come from clients, so each one is checked before anything is written:
relative to the folder (a leading ``/`` names its root, as in Triton), no ``..`` component,
no empty name, no backslash or NUL, and the file must land
inside the private folder (``O_NOFOLLOW``, ``O_EXCL`` and a resolved-path check guard against
symlinks). Anything else fails the load with Triton's status for a model whose files cannot
be read (INTERNAL, ``failed to load '<m>', failed to poll from model repository``), followed
by the reason naming the path; nothing is written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from modelyard.errors import InternalError

CONFIG_REQUIRED = "Load parameter 'config' must be specified for model file override"
_PREFIX = "file:"


class OverrideError(ValueError):
    """A ``file:`` override that cannot be written; the text names the path and why."""


def load_failed(name: str, reason: str) -> InternalError:
    """Triton's error for a load whose files cannot be had (status INTERNAL, its prefix),
    with modelyard's reason after it."""
    return InternalError(f"failed to load '{name}', failed to poll from model repository: {reason}")


def check_path(key: str) -> PurePosixPath:
    """The relative path a ``file:`` key names (the prefix is optional); raise OverrideError
    when it could leave the override folder or is not a plain relative file path."""
    raw = key[len(_PREFIX) :] if key.startswith(_PREFIX) else key
    why = ""
    if not raw:
        why = "the path is empty"
    elif "\0" in raw or "\\" in raw:
        why = "the path contains a NUL or backslash character"
    elif raw.endswith("/"):
        why = "the path names a folder, not a file"
    else:
        # A leading "/" names the override folder's root, as in Triton ("file:/1/model.py").
        parts = [p for p in raw.split("/") if p not in ("", ".")]
        if ".." in parts:
            why = "'..' is not allowed in the path"
        elif not parts:
            why = "the path is empty"
    if why:
        raise OverrideError(
            f"invalid file override path '{raw}' in load parameter '{_PREFIX}{raw}': {why}"
        )
    return PurePosixPath(*parts)


def check_files(files: dict[str, bytes]) -> dict[PurePosixPath, bytes]:
    """Every path checked; two keys naming the same file are refused."""
    out: dict[PurePosixPath, bytes] = {}
    for key, content in files.items():
        path = check_path(key)
        if path in out:
            raise OverrideError(f"file override path '{path}' is given more than once")
        if not isinstance(content, bytes | bytearray | memoryview):
            raise OverrideError(f"file override '{path}' must be bytes")
        out[path] = bytes(content)
    return out


def materialise(name: str, files: dict[str, bytes]) -> Path:
    """Write ``files`` into a new private folder; return the model folder inside it.

    The caller owns the folder and removes it with :func:`remove` (on failure here it is
    removed before the error, :func:`load_failed`'s, propagates).
    """
    try:
        checked = check_files(files)
    except OverrideError as e:
        raise load_failed(name, str(e)) from None
    root = Path(tempfile.mkdtemp(prefix="modelyard-override-"))  # mode 0700
    model_dir = root / name
    try:
        model_dir.mkdir()
        base = os.path.realpath(model_dir)
        for rel, content in checked.items():
            _write(base, rel, content)
    except OverrideError as e:
        remove(model_dir)
        raise load_failed(name, str(e)) from None
    except BaseException:
        remove(model_dir)
        raise
    return model_dir


def _write(base: str, rel: PurePosixPath, content: bytes) -> None:
    target = os.path.join(base, *rel.parts)
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
        # Resolve what exists now: a folder we made is never a symlink, but be strict anyway.
        if os.path.commonpath([os.path.realpath(parent), base]) != base:
            raise OverrideError(f"file override path '{rel}' leaves the model folder")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(target, flags, 0o600)
    except OSError as e:
        raise OverrideError(f"failed to write file override '{rel}': {e.strerror or e}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(content)


def remove(model_dir: Path | None) -> None:
    """Delete an override folder made by :func:`materialise` (its private parent too)."""
    if model_dir is None:
        return
    root = model_dir.parent
    if root.name.startswith("modelyard-override-"):
        shutil.rmtree(root, ignore_errors=True)
