"""Triton's ``EXECUTION_ENV_PATH``: a model's workers run in their own Python environment.

The config parameter names a conda-pack style ``.tar.gz`` or an unpacked environment folder
(a conda env or a venv, with ``bin/activate`` as Triton requires); ``$$TRITON_MODEL_DIRECTORY``
in it stands for the model's folder. As Triton activates the environment and runs its stub
there, the worker runs on the environment's own interpreter, with the environment's ``bin``
on ``PATH`` and ``lib`` on ``LD_LIBRARY_PATH``: the model imports the environment's packages.
Of the server's side only the worker code (``modelyard`` and ``triton_python_backend_utils``,
and ``msgspec`` that the channel uses, from a folder that holds nothing else) is put first on
``sys.path``, so the worker always speaks this server's protocol; numpy must be in the
environment, as Triton requires.

An archive is extracted once per server process into a private folder (entries that would
land outside it are refused as Triton 26.06 refuses them: absolute paths, ``..``, writing
through a symlink, with libarchive's texts) and again when its modification time changes;
a superseded extraction stays until the server exits, for the workers of a version still
serving during a reload. The environment's Python must
have the server's major.minor version (Triton's stub has the same rule).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("modelyard")

PARAMETER = "EXECUTION_ENV_PATH"
# What a worker imports from the server's installation (msgspec: the channel's encoding; a
# compiled module, usable because the environment's Python has the server's version).
WORKER_PACKAGES = ("modelyard", "triton_python_backend_utils", "msgspec")
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
_PROBE_TIMEOUT_S = 120.0
# The worker's entry point on the environment's interpreter: this server's worker code first
# on sys.path (the folder holds only modelyard and triton_python_backend_utils).
BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from modelyard.backends.python.worker.__main__ import main; main()"
)


class EnvError(Exception):
    """The environment cannot be used; the text is the model's load error."""


@dataclass(frozen=True)
class ExecEnv:
    """A prepared environment: how to start a worker in it."""

    root: str  # the environment folder (extracted, for an archive)
    python: str  # its interpreter
    worker_path: str  # a folder holding only modelyard's worker packages
    environ: dict[str, str] = field(default_factory=dict)

    def command(self, *args: str) -> list[str]:
        return [self.python, "-c", BOOTSTRAP, self.worker_path, *args]


def configured_path(parameters: object, model_dir: str) -> str:
    """The EXECUTION_ENV_PATH of a config's ``parameters`` ("" when unset), with
    ``$$TRITON_MODEL_DIRECTORY`` replaced by ``model_dir``."""
    param = parameters.get(PARAMETER) if parameters else None  # type: ignore[attr-defined]
    value = str(param.string_value) if param is not None else ""
    return value.replace(MODEL_DIRECTORY, model_dir, 1)


class EnvironmentManager:
    """Archives extracted by this server process, by canonical path (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base: Path | None = None
        self._extracted: dict[str, tuple[Path, int]] = {}  # archive -> (folder, mtime_ns)
        self._checked: set[str] = set()  # environments whose Python passed the probe
        self._count = 0

    def prepare(self, path: str) -> ExecEnv:
        """Extract (if needed) and check the environment ``path``; raise EnvError."""
        try:
            canonical = os.path.realpath(path, strict=True)
        except OSError:
            raise EnvError(f"Failed to get the canonical path for {path}.") from None
        with self._lock:
            if os.path.isdir(canonical):
                log.debug(
                    "Returning canonical path since EXECUTION_ENV_PATH does not contain "
                    "compressed path. Path: %s",
                    canonical,
                )
                root = Path(canonical)
            else:
                root = self._extract(canonical)
            activate = root / "bin" / "activate"
            if not activate.is_file():
                raise EnvError(
                    f"Path {activate} does not exist. The Python environment should contain "
                    "an 'activate' script."
                )
            python = _interpreter(root)
            if str(root) not in self._checked:
                _probe(python, path, self._worker_path())
                self._checked.add(str(root))
            return ExecEnv(str(root), python, self._worker_path(), _environ(root))

    def _base_dir(self) -> Path:
        if self._base is None:
            self._base = Path(tempfile.mkdtemp(prefix="modelyard_python_env_"))
            atexit.register(shutil.rmtree, self._base, True)
        return self._base

    def _extract(self, archive: str) -> Path:
        mtime = os.stat(archive).st_mtime_ns
        known = self._extracted.get(archive)
        if known is not None and known[1] == mtime:
            return known[0]
        log.debug("Extracting Python execution env %s", archive)
        self._count += 1
        dest = self._base_dir() / str(self._count)
        dest.mkdir()
        try:
            extract(archive, dest)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        if known is not None:
            self._checked.discard(str(known[0]))  # (left for workers still running in it)
        self._extracted[archive] = (dest, mtime)
        return dest

    def _worker_path(self) -> str:
        """A folder with links to the packages a worker imports from the server's installation
        (modelyard's, and msgspec for the channel), so the environment sees nothing else of
        it."""
        folder = self._base_dir() / "worker-path"
        if not folder.is_dir():
            folder.mkdir()
            for package in WORKER_PACKAGES:
                module = sys.modules.get(package) or __import__(package)
                (folder / package).symlink_to(os.path.dirname(str(module.__file__)))
        return str(folder)


# Triton 26.06's Python backend (python_backend r26.06 src/pb_env.cc ExtractTarFile) extracts
# with libarchive's SECURE_NODOTDOT, SECURE_NOABSOLUTEPATHS and SECURE_SYMLINKS flags; an entry
# they refuse fails the load (INTERNAL) with libarchive's text in this frame.
_HEADER_FAILED = "archive_write_header() failed with error code = {} error message is {}"
_ARCHIVE_FAILED = -25
_ARCHIVE_WARN = -20


def extract(archive: str, dest: Path) -> None:
    """Unpack a (gzipped) tar into ``dest``, refusing what Triton's libarchive refuses: an
    absolute path, a ``..`` component, a path through a symlink, a hard link whose target is
    any of those (with libarchive's texts: "Path is absolute", "Path contains '..'",
    "Cannot extract through symlink <path>")."""
    base = os.path.realpath(dest)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                if _check_entry(member, base):
                    tar.extract(member, base, **_filter())
    except EnvError:
        raise
    except (tarfile.TarError, OSError) as e:
        raise EnvError(f"Failed to extract the Python execution env {archive}: {e}") from None


def _refused(code: int, text: str) -> EnvError:
    return EnvError(_HEADER_FAILED.format(code, text))


def _check_entry(member: tarfile.TarInfo, base: str) -> bool:
    """libarchive's checks of one entry, in its order; False when the entry is written here
    (a hard link to a symlink: linked, not followed, as libarchive's linkat does)."""
    name = _clean(member.name)
    if member.islnk() and name == member.linkname:
        raise _refused(_ARCHIVE_WARN, f"Skipping hardlink pointing to itself: {name}")
    _check_symlinks(base, name, hard_link_target=False)
    if not member.islnk():
        return True
    target = _clean(member.linkname)
    if _check_symlinks(base, target, hard_link_target=True):
        os.makedirs(os.path.dirname(os.path.join(base, name)), exist_ok=True)
        os.link(os.path.join(base, target), os.path.join(base, name), follow_symlinks=False)
        return False
    return True


def _clean(path: str) -> str:
    """libarchive's cleanup_pathname: the path without empty and '.' components."""
    if not path:
        raise _refused(_ARCHIVE_FAILED, "Invalid empty pathname")
    if path.startswith("/"):
        raise _refused(_ARCHIVE_FAILED, "Path is absolute")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refused(_ARCHIVE_FAILED, "Path contains '..'")
    return "/".join(parts) or "."


def _check_symlinks(base: str, path: str, hard_link_target: bool) -> bool:
    """libarchive's check_symlinks_fsobj: no folder on the way may be a symlink on disk. A
    symlink as the last component is removed (the entry replaces it), or for a hard link's
    target kept; True in that last case."""
    parts = path.split("/")
    current = base
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return False
        except OSError:  # e.g. a file where a folder should be
            raise _refused(_ARCHIVE_FAILED, f"Could not stat {path}") from None
        if not stat.S_ISLNK(st.st_mode):
            continue
        if i < len(parts) - 1:
            raise _refused(_ARCHIVE_FAILED, f"Cannot extract through symlink {path}")
        if hard_link_target:
            return True
        try:
            os.unlink(current)
        except OSError:
            raise _refused(_ARCHIVE_FAILED, f"Could not remove symlink {path}") from None
    return False


def _filter() -> dict[str, Any]:
    # Python's own check on top (3.10.12+, 3.11.4+): it also drops setuid bits.
    return {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}


def _interpreter(root: Path) -> str:
    for name in ("python", "python3"):
        candidate = root / "bin" / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    raise EnvError(f"the Python execution env {root} has no bin/python or bin/python3")


def _probe(python: str, path: str, worker_path: str) -> None:
    """Check the environment's Python: the server's major.minor, and numpy importable."""
    script = (
        "import sys; print('%d.%d' % sys.version_info[:2]); sys.stdout.flush(); "
        f"sys.path.insert(0, {worker_path!r}); import numpy"
    )
    env = _environ(Path(python).parent.parent)
    try:
        run = subprocess.run(
            [python, "-c", script],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvError(f"the Python of execution env {path} ({python}) does not run: {e}") from None
    lines = run.stdout.split()
    if not lines:
        detail = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "no output"
        raise EnvError(f"the Python of execution env {path} ({python}) does not run: {detail}")
    version = lines[0]
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if version != ours:
        raise EnvError(
            f"the Python execution env {path} has Python {version}, but this server runs Python "
            f"{ours}: the environment's Python must have the server's major.minor version "
            "(as Triton's stub requires)"
        )
    if run.returncode != 0:
        detail = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "no detail"
        raise EnvError(
            f"the Python execution env {path} cannot import numpy, which the Python backend "
            f"needs in the environment (as Triton's does): {detail}"
        )


def _environ(root: Path) -> dict[str, str]:
    """The worker's environment: the server's, with the env activated as Triton's stub sees it
    (its bin first on PATH, its lib first on LD_LIBRARY_PATH, VIRTUAL_ENV set)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(p for p in (str(root / "bin"), env.get("PATH")) if p)
    lib = str(root / "lib")
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    env["VIRTUAL_ENV"] = str(root)
    env.pop("PYTHONHOME", None)
    return env


MANAGER = EnvironmentManager()
