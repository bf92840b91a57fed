"""Python environments for the EXECUTION_ENV_PATH tests, built offline: a venv of a given
interpreter with a tiny package of our own (``envonly_pkg``) that exists nowhere else, packed
conda-pack style into a ``.tar.gz`` with relative paths."""

from __future__ import annotations

import glob
import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

PACKAGE = "envonly_pkg"
VALUE = "imported from the execution env"


def build_env(root: Path, python: str = sys.executable) -> Path:
    """A venv at ``root`` whose site-packages hold ``envonly_pkg``; it sees the interpreter's
    own packages too (numpy, which the Python backend needs in the environment)."""
    subprocess.run(
        [python, "-m", "venv", "--without-pip", "--system-site-packages", str(root)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (site,) = glob.glob(str(root / "lib" / "python3.*" / "site-packages"))
    package = Path(site) / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text(f"VALUE = {VALUE!r}\n")
    return root


def pack(env: Path, archive: Path) -> Path:
    """``env``'s content as a gzipped tar with relative member names (symlinks kept)."""
    with tarfile.open(archive, "w:gz") as tar:
        for entry in sorted(env.iterdir()):
            tar.add(entry, arcname=entry.name)
    return archive


def malicious(archive: Path, entry: str) -> Path:
    """A tarball with an entry named ``entry`` (e.g. ``../../x`` or ``/tmp/x``) and a stand-in
    ``bin/activate``, as Triton's zip-slip test builds it."""
    with tarfile.open(archive, "w:gz") as tar:
        for name, body in ((entry, b"traversal-test\n"), ("bin/activate", b"#!/bin/sh\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(body), 0o755, int(time.time())
            tar.addfile(info, io.BytesIO(body))
    return archive


def other_python() -> str | None:
    """A working CPython 3 with another minor version than this one, or None."""
    mine = sys.version_info[1]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for minor in (10, 11, 12, 13, 14, 9):
        if minor == mine:
            continue
        candidates = sorted(glob.glob(str(pyenv / f"3.{minor}.*" / "bin" / f"python3.{minor}")))
        candidates += [
            str(p)
            for p in (
                Path(d) / f"python3.{minor}" for d in os.environ.get("PATH", "").split(os.pathsep)
            )
            if p.is_file()
        ]
        for candidate in candidates:
            try:
                run = subprocess.run(
                    [candidate, "-c", "import venv"], capture_output=True, timeout=30
                )
            except OSError:
                continue
            if run.returncode == 0:
                return candidate
    return None
