"""Private module namespaces for in-process models.

Each model's ``model.py`` is imported under a private package name, and the sibling modules it
imports (its own ``helper.py``) are resolved from its folder first and taken out of
``sys.modules`` afterwards, so two models that each ship a ``helper.py`` keep their own.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any

import triton_python_backend_utils as pb
from modelyard.backends.python.protocol.error_text import format_exception, format_import_error
from modelyard.backends.python.protocol.model_calls import Failure, auto_complete
from modelyard.errors import InternalError, ModelyardError

_import_lock = threading.Lock()


class _ExistingModule(importlib.abc.Loader):
    def __init__(self, module: Any):
        self.module = module

    def create_module(self, spec: Any) -> Any:
        return self.module

    def exec_module(self, module: Any) -> None:
        pass


class _SiblingFinder(importlib.abc.MetaPathFinder):
    """Last resort for `import helper` run later by an in-process model (inside execute):
    the model's own folders are searched and the module gets the model's private name, so
    another model's `helper` is never confused with it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if path is not None:
            return None  # only top-level names
        rt = pb.get_runtime()
        package = getattr(rt, "package", "")
        if not package:
            return None
        private = f"{package}.{fullname}"
        existing = sys.modules.get(private)
        if existing is not None:
            return importlib.util.spec_from_loader(private, _ExistingModule(existing))
        found = importlib.machinery.PathFinder.find_spec(fullname, rt.search_path)  # type: ignore[union-attr]
        if found is None or found.origin is None:
            return None
        return importlib.util.spec_from_file_location(
            private, found.origin, submodule_search_locations=found.submodule_search_locations
        )


# While a model imports, its folders lead sys.path (for its own imports) and this thread
# holds the import lock; another model's code importing at that moment must not find them.
_loading: tuple[int, tuple[str, ...]] | None = None  # (the importing thread, its folders)


class _OwnView(importlib.abc.MetaPathFinder):
    """First on the path while a model imports: a top-level import by another model's code
    (``unittest.main("model")`` in its initialize) searches sys.path without the importing
    model's folders, then its own folders, as if that model were alone."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        loading = _loading
        if path is not None or loading is None or loading[0] == threading.get_ident():
            return None
        if not getattr(pb.get_runtime(), "package", ""):
            return None  # the server's own code
        view = [p for p in list(sys.path) if p not in loading[1]]
        found = importlib.machinery.PathFinder.find_spec(fullname, view)
        return found or _SIBLINGS.find_spec(fullname, None)


_SIBLINGS = _SiblingFinder()
sys.meta_path.insert(0, _OwnView())
sys.meta_path.append(_SIBLINGS)


def import_isolated(model_file: str, package: str, files: list[str] | None = None) -> Any:
    """Import ``model_file`` as ``<package>.<stem>`` with its folder as the package, keeping
    the sibling modules it imports private to it. A reload imports the files afresh (the
    instances of the previous load keep their module objects). A failed import raises
    InternalError with the file, line and source line of the mistake. ``files`` collects the
    source files of the modules the import loaded from the model's repository."""
    version_dir = os.path.dirname(model_file)
    model_dir = os.path.dirname(version_dir)
    stem = os.path.splitext(os.path.basename(model_file))[0]
    global _loading
    with _import_lock:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]  # a previous load's modules under the same private name
        importlib.invalidate_caches()  # files written since the last import are found
        before = set(sys.modules)
        saved_path = list(sys.path)
        _loading = (threading.get_ident(), (version_dir, model_dir))
        sys.path[:0] = [version_dir, model_dir]
        try:
            spec = importlib.util.spec_from_file_location(
                package,
                os.path.join(version_dir, "__init__.py"),
                submodule_search_locations=[version_dir],
            )
            assert spec is not None
            pkg = importlib.util.module_from_spec(spec)
            _parents(package)
            sys.modules[package] = pkg
            try:
                module = importlib.import_module(f"{package}.{stem}")
            except BaseException as e:  # a syntax error, a missing module, a module-level raise
                raise InternalError(format_import_error(e)) from None
        finally:
            sys.path[:] = saved_path
            _loading = None
            # Sibling modules imported by absolute name (`import helper`) leave sys.modules so
            # the next model's `import helper` finds its own; the model keeps its references.
            root = os.path.realpath(model_dir) + os.sep
            repository = os.path.dirname(root.rstrip(os.sep)) + os.sep
            for name in set(sys.modules) - before:
                path = getattr(sys.modules[name], "__file__", None) or ""
                real = os.path.realpath(path)
                if files is not None and real.startswith(repository) and os.path.isfile(path):
                    files.append(path)
                if not name.startswith(package) and real.startswith(root):
                    del sys.modules[name]
    return module


def _parents(package: str) -> None:
    """Register the private package's parents (``_modelyard_inprocess``) as namespace
    packages, so ``import`` finds a model's module by its name: pickle needs that for the
    model's own functions (a ``multiprocessing`` pool's task)."""
    parts = package.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name not in sys.modules:
            parent = types.ModuleType(name)
            parent.__path__ = []
            sys.modules[name] = parent


async def auto_complete_in_process(
    model_file: str, model_name: str, config: dict[str, Any]
) -> dict[str, Any]:
    """Run a model's ``auto_complete_config`` in this process (on a worker thread)."""

    def run() -> dict[str, Any]:
        module = import_isolated(model_file, f"_modelyard_autocomplete.{model_name}")
        # (no class: the config as it was; starting the instance says what is missing)
        cls = getattr(module, "TritonPythonModel", None)
        return auto_complete(pb, cls, model_name, config)

    try:
        return await asyncio.to_thread(run)
    except ModelyardError:
        raise
    except Failure as f:
        raise ModelyardError(f.message, f.code) from None
    except BaseException as e:
        raise InternalError(format_exception(e)) from None


# What a model calls to reach the server and wait for it: a model that names none of these
# cannot block on the server's event loop (see InProcessInstance.inline_ok).
_SERVER_CALLS = frozenset({"exec", "async_exec", "load_model", "unload_model", "is_model_ready"})


# What an `async def execute` may call that blocks its thread until the server answers: a
# blocking exec(), model control, or a decoupled call (a keyword `decoupled`), whose stream a
# plain `for` reads (see InProcessInstance: such a model's loop is not the server's).
_BLOCKING_CALLS = frozenset({"exec", "load_model", "unload_model", "is_model_ready"})
_DECOUPLED = "decoupled"


@dataclass(frozen=True)
class ServerCalls:
    """What a model's code may do to the server, read from its files once (``scan``)."""

    # names a call that waits for the server (BLS or model control): ``_SERVER_CALLS``
    waits: bool
    # names a call that blocks its thread until the server answers: ``_BLOCKING_CALLS``, or
    # the keyword or string ``decoupled``
    blocks: bool


_UNKNOWN = ServerCalls(waits=True, blocks=True)


def scan(files: list[str]) -> ServerCalls:
    """Scan the code objects of ``files`` (the model's module and its siblings) for the
    names above; a file that cannot be read and compiled, or none, is assumed to use them."""
    if not files:
        return _UNKNOWN
    waits = blocks = False
    for path in files:
        try:
            with open(path, "rb") as f:
                code = compile(f.read(), path, "exec", dont_inherit=True)
        except (OSError, SyntaxError, ValueError):
            return _UNKNOWN
        todo = [code]
        while todo and not (waits and blocks):
            c = todo.pop()
            waits = waits or not _SERVER_CALLS.isdisjoint(c.co_names)
            blocks = blocks or not _BLOCKING_CALLS.isdisjoint(c.co_names)
            for k in c.co_consts:
                if isinstance(k, type(code)):
                    todo.append(k)
                elif k == _DECOUPLED or (isinstance(k, tuple) and _DECOUPLED in k):
                    blocks = True  # (a call's keyword names are a tuple of its constants)
    return ServerCalls(waits, blocks)
