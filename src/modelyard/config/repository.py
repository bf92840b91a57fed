"""Model repositories on disk: which models exist, where, and which versions to serve.

Follows Triton 2.51 (``ModelRepositoryManager::Poll``, ``VersionsToLoad``):

- every sub-directory of a repository is a model, named after the directory (files are
  ignored; hidden directories count, as in Triton);
- a name found in two or more repositories is an error for that model only
  ("model appears in two or more repositories"), the others are served; with
  ``--model-namespacing`` each repository is a namespace and every copy is a model of its own
  (``ModelLocation.key``);
- version directories are the sub-directories whose names are decimal integers; names with
  leading zeros ("01") and non-numeric names are ignored (Triton logs a warning);
- ``version_policy`` picks ``latest { num_versions }`` (default 1), ``all`` or ``specific``;
  a specific version without a directory is logged and skipped, and no version at all is an
  error.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.errors import ConfigError, InvalidArgument

__all__ = [
    "DUPLICATE_REASON",
    "ModelLocation",
    "available_versions",
    "model_config_path",
    "namespaced_key",
    "scan_repositories",
    "select_versions",
    "validate_model_name",
]

log = logging.getLogger(__name__)

#: Triton's reason text for a model name present in several repositories.
DUPLICATE_REASON = "model appears in two or more repositories"

# Sub-directories of a model directory that are never versions (Triton's skip list).
_NON_VERSION_DIRS = frozenset({"warmup", "initial_state", "configs"})


@dataclass(frozen=True, slots=True)
class ModelLocation:
    """Where a model lives.

    ``path`` is the model directory in the first repository that has it. When the name is
    found in more than one repository, ``duplicates`` lists every such directory and
    ``error`` says why the model cannot be loaded. With namespacing, ``namespace`` is the
    repository as given on the command line (Triton's namespace) and duplicates are none.
    """

    name: str
    path: Path
    repository: Path
    duplicates: tuple[Path, ...] = field(default=())
    namespace: str = ""
    # With namespacing, a name held by several repositories is keyed per repository.
    qualified: bool = False

    @property
    def error(self) -> str:
        return DUPLICATE_REASON if self.duplicates else ""

    @property
    def loadable(self) -> bool:
        return not self.duplicates

    @property
    def key(self) -> str:
        """How the server tells this model apart: its name, or with namespacing and a name
        other repositories hold too, ``<repository>::<name>`` (Triton's identifier)."""
        return namespaced_key(self.namespace, self.name) if self.qualified else self.name


def namespaced_key(namespace: str, name: str) -> str:
    """Triton's ``ModelIdentifier::str()``: ``<namespace>::<name>``, or the name alone."""
    return f"{namespace}::{name}" if namespace else name


def scan_repositories(
    paths: list[Path] | list[str],
    namespacing: bool = False,
    shared: frozenset[str] = frozenset(),
) -> dict[str, ModelLocation]:
    """Every model directory of every repository, by ``ModelLocation.key`` (sorted by name).

    Without ``namespacing`` a name in several repositories is one location with
    ``duplicates``. With it, each copy is a location of its own, keyed per repository; so are
    the names in ``shared`` (names that were held by several repositories before: their keys
    stay the same when one copy goes away).

    A repository that does not exist or is not a directory raises ConfigError naming it.
    """
    found: dict[str, list[tuple[str, Path, Path]]] = {}
    for given in paths:
        repo = Path(given)
        try:
            entries = sorted(os.scandir(repo), key=lambda e: e.name)
        except OSError as exc:
            raise ConfigError(
                f"failed to poll model repository '{repo}': {exc.strerror or exc}"
            ) from None
        for entry in entries:
            if _is_dir(entry):
                found.setdefault(entry.name, []).append((str(given), repo, Path(entry.path)))
    result: dict[str, ModelLocation] = {}
    for name in sorted(found):
        places = found[name]
        if namespacing:
            qualified = len(places) > 1 or name in shared
            for namespace, repo, path in places:
                loc = ModelLocation(name, path, repo, namespace=namespace, qualified=qualified)
                result[loc.key] = loc
            continue
        _, repo, path = places[0]
        dups = tuple(p for _, _, p in places) if len(places) > 1 else ()
        if dups:
            log.error("failed to poll model '%s': not unique across all model repositories", name)
        result[name] = ModelLocation(name=name, path=path, repository=repo, duplicates=dups)
    return result


# What ends a path component here ("\\" only where the OS takes it for a separator).
_SEPARATORS = "/\0" + ("\\" if os.sep == "\\" or os.altsep == "\\" else "")


def validate_model_name(name: str) -> None:
    """Reject names that cannot be a model directory: empty, '/', '..' (InvalidArgument).

    Triton's messages (core's ``ValidateModelName``, r26.03 on); beyond Triton, NUL and '.'
    are rejected too, so a name from a client never leaves the repository. A '\\' passes, as
    in Triton, where a Python model of that name then fails with its backend's "Invalid stub
    name" (it is one of the shell characters the Python backend refuses).
    """
    trimmed = name.strip()
    if not trimmed:
        raise InvalidArgument("Model name cannot be empty. Please enter a valid name to deploy.")
    if trimmed in (".", "..") or any(c in trimmed for c in _SEPARATORS):
        raise InvalidArgument(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )


def model_config_path(model_dir: str | os.PathLike[str], config_name: str = "") -> Path:
    """The config file Triton reads: ``configs/<config_name>.pbtxt`` when ``config_name`` is
    given (``--model-config-name``) and that file exists, else ``config.pbtxt``."""
    base = Path(model_dir)
    if config_name:
        custom = base / "configs" / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return base / "config.pbtxt"


def available_versions(model_dir: str | os.PathLike[str]) -> list[int]:
    """The version numbers present under ``model_dir``, ascending.

    Only directories whose names are decimal integers without leading zeros count.
    """
    try:
        entries = list(os.scandir(model_dir))
    except OSError:
        return []
    versions: list[int] = []
    for entry in entries:
        if not _is_dir(entry) or entry.name in _NON_VERSION_DIRS:
            continue
        name = entry.name
        if not (name.isascii() and name.isdigit()):
            log.warning(
                "ignore version directory '%s' which fails to convert to integral number", name
            )
            continue
        if len(name) > 1 and name[0] == "0":
            log.warning(
                "ignore version directory '%s' which contains leading zeros in its directory name",
                name,
            )
            continue
        versions.append(int(name))
    return sorted(versions)


def select_versions(config: ModelConfig, available: list[int]) -> list[int]:
    """The versions the config's ``version_policy`` serves out of ``available``, ascending.

    No policy means ``latest { num_versions: 1 }``. A ``specific`` version without a directory
    is logged and skipped. If nothing is selected, raises ConfigError with Triton's message
    "at least one version must be available under the version policy of model '<name>'".
    """
    policy = config.version_policy
    have = sorted(set(available))
    choice = policy.WhichOneof("policy_choice") if config.HasField("version_policy") else None
    if choice == "specific":
        selected = []
        for v in policy.specific.versions:
            if v in have:
                selected.append(int(v))
            else:
                log.error(
                    "version %d is specified for model '%s', but the version directory "
                    "is not present",
                    v,
                    config.name,
                )
    elif choice == "all":
        selected = have
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        selected = have[len(have) - count :] if count > 0 else []
    selected = sorted(set(selected))
    if not selected:
        raise ConfigError(
            "at least one version must be available under the version policy of model "
            f"'{config.name}'"
        )
    return selected


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows symlinks, as Triton's stat() does
    except OSError:
        return False
