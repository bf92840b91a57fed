"""The import direction of every module under src/, by the layer table in ARCHITECTURE.md.

Every import counts: module level, inside functions, and under ``if TYPE_CHECKING:``. A
module may import from its own layer or a lower one; the parts of ``backends/python`` have
their own rules (the part table). The imports that run (module level and inside functions)
must not form a circle; ``TYPE_CHECKING`` imports (annotations only) may point back.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
SRC_PACKAGES = ("modelyard/", "triton_python_backend_utils/", "c_python_backend_utils/")


# -- the rules, as ARCHITECTURE.md states them --------------------------------------------------


@dataclass
class Part:
    """A part of a package with its own list of what it may import."""

    package: str
    layers: int | None = None  # may import modules of layers up to this one
    allowed: list[str] = field(default_factory=list)  # and these packages
    forbidden: list[str] = field(default_factory=list)  # but never these


@dataclass
class Rules:
    layers: dict[str, int]  # package or module -> layer
    parts: list[Part]

    def layer_of(self, module: str) -> int | None:
        best = _longest_prefix(module, self.layers)
        return None if best is None else self.layers[best]

    def part_of(self, module: str) -> Part | None:
        by_name = {p.package: p for p in self.parts}
        best = _longest_prefix(module, by_name)
        return None if best is None else by_name[best]


def _longest_prefix(module: str, names: Iterable[str]) -> str | None:
    found = [n for n in names if module == n or module.startswith(n + ".")]
    return max(found, key=len) if found else None


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows (cells) of the first table after the line ``heading``."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if set("".join(cells)) <= set("-: "):
            continue  # the separator row
        rows.append(cells)
    return rows[1:]  # without the header row


def _names(cell: str) -> list[str]:
    return re.findall(r"`([\w.]+)`", cell)


LAYER_HEADING = "<!-- layer table: read by tests/test_layers.py -->"
PART_HEADING = "<!-- part table: read by tests/test_layers.py -->"


def parse_rules(text: str) -> Rules:
    layers: dict[str, int] = {}
    for cells in _table(text, LAYER_HEADING):
        for name in _names(cells[2]):
            layers[name] = int(cells[0])
    parts: list[Part] = []
    for cells in _table(text, PART_HEADING):
        package = _names(cells[0])[0]
        rule = cells[2]
        allowed_text, _, forbidden_text = rule.partition("never")
        layer = re.search(r"layers? (?:\d+\s*\W\s*)?(\d+)", allowed_text)
        parts.append(
            Part(
                package,
                int(layer.group(1)) if layer else None,
                _names(allowed_text),
                _names(forbidden_text),
            )
        )
    return Rules(layers, parts)


# -- the imports of a source tree --------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (or package, or attribute of one)
    line: int
    type_checking: bool  # under ``if TYPE_CHECKING:`` (never runs)


def modules(src: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def imports(src: Path) -> Iterator[Import]:
    known = modules(src)
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        yield from _walk(tree, module, is_package, known, type_checking=False)


def _walk(
    node: ast.AST, module: str, is_package: bool, known: dict[str, Path], type_checking: bool
) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield Import(module, alias.name, child.lineno, type_checking)
        elif isinstance(child, ast.ImportFrom):
            base = _absolute(module, is_package, child)
            for alias in child.names:
                candidate = f"{base}.{alias.name}"
                target = candidate if candidate in known else base
                yield Import(module, target, child.lineno, type_checking)
        else:
            inside = type_checking or (isinstance(child, ast.If) and _is_type_checking(child.test))
            yield from _walk(child, module, is_package, known, inside)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


# -- the checks ---------------------------------------------------------------------------------


def violations(src: Path, rules: Rules) -> list[str]:
    """Every import that points up a layer or breaks its part's rule, as readable lines."""
    found: list[str] = []
    internal = {m.split(".")[0] for m in modules(src)}
    for imp in imports(src):
        if imp.target.split(".")[0] not in internal:
            continue  # the standard library and third-party packages
        where = f"{imp.module} (line {imp.line}) imports {imp.target}"
        own = rules.layer_of(imp.module)
        if own is None:
            found.append(f"{imp.module}: not in the layer table of ARCHITECTURE.md")
            continue
        target = rules.layer_of(imp.target)
        if target is None:
            found.append(f"{where}: {imp.target} is not in the layer table")
            continue
        part = rules.part_of(imp.module)
        if part is not None and not _same_part(imp.target, part):
            if any(_within(imp.target, f) for f in part.forbidden):
                found.append(f"{where}: the {part.package} part never imports that")
                continue
            by_layer = part.layers is not None and target <= part.layers
            if not by_layer and not any(_within(imp.target, a) for a in part.allowed):
                found.append(f"{where}: the {part.package} part may not import it")
                continue
        if target > own:
            found.append(f"{where}: layer {own} imports layer {target} (upward)")
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _same_part(module: str, part: Part) -> bool:
    return _within(module, part.package)


def circles(src: Path) -> list[list[str]]:
    """Circles of imports that run (strongly connected components of the import graph
    without its ``TYPE_CHECKING`` edges)."""
    known = modules(src)
    graph: dict[str, set[str]] = {m: set() for m in known}
    for imp in imports(src):
        target = imp.target
        while target not in known and "." in target:
            target = target.rsplit(".", 1)[0]
        if not imp.type_checking and target in known and target != imp.module:
            graph[imp.module].add(target)
    return [c for c in _components(graph) if len(c) > 1]


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm (the graph is small: recursion is fine)
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# -- the tests ----------------------------------------------------------------------------------


def test_every_import_points_down_the_layers() -> None:
    rules = parse_rules(ARCHITECTURE.read_text())
    assert rules.layers and rules.parts, "the layer and part tables are missing"
    assert violations(SRC, rules) == []


def test_every_module_is_in_a_layer() -> None:
    rules = parse_rules(ARCHITECTURE.read_text())
    assert [m for m in modules(SRC) if rules.layer_of(m) is None] == []


def test_no_circle_of_imports() -> None:
    assert circles(SRC) == []


def test_the_module_map_lists_every_module() -> None:
    """ARCHITECTURE.md's module map has a line for every module (empty ``__init__.py`` files
    aside) and none for a module that is gone."""
    text = ARCHITECTURE.read_text()
    listed = set()
    for path in re.findall(r"^\| `([\w/]+\.py)` \|", text.split("## Module map")[1], re.M):
        listed.add(path if path.startswith(SRC_PACKAGES) else f"modelyard/{path}")
    present = {
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if p.name != "__init__.py" or p.read_text().strip()
    }
    assert sorted(present - listed) == [], "modules missing from the map"
    assert sorted(listed - present) == [], "modules in the map that do not exist"


def test_only_the_ray_package_imports_ray() -> None:
    """Ray is an optional extra: nothing outside ``modelyard.ray`` imports it."""
    outside = [
        f"{imp.module} (line {imp.line})"
        for imp in imports(SRC)
        if imp.target.split(".")[0] == "ray" and not _within(imp.module, "modelyard.ray")
    ]
    assert outside == []


def test_modelyard_works_without_ray() -> None:
    """The server and its command line import without Ray (``--ray`` asks for the extra)."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["ray"] = None  # as if it were not installed
        import modelyard, modelyard.server, modelyard.cli.main
        from modelyard.cli.main import build_parser
        build_parser().parse_args(["serve", "--model-repository", "x", "--ray", "auto"])
        print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SRC
    )
    assert run.stdout.split() == ["['ray']"]  # only the stand-in


def test_a_worker_process_loads_no_server_module() -> None:
    """What a worker process imports: the entry the server starts, and nothing of the
    server's side (core, scheduling, serving, frontends, the server part)."""
    code = textwrap.dedent(
        """
        import sys
        import modelyard.backends.python.worker.__main__
        print("\\n".join(sorted(sys.modules)))
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SRC
    )
    loaded = run.stdout.split()
    assert "modelyard.backends.python.worker.stub" in loaded
    server_side = (
        "modelyard.core",
        "modelyard.scheduling",
        "modelyard.serving",
        "modelyard.frontends",
        "modelyard.backends.python.server",
    )
    assert [m for m in loaded if m.startswith(server_side)] == []


def test_the_server_starts_that_entry() -> None:
    from modelyard.backends.python.server import exec_env, process_instance

    assert process_instance.WORKER_MODULE == "modelyard.backends.python.worker"
    assert (SRC / "modelyard/backends/python/worker/__main__.py").is_file()
    assert "modelyard.backends.python.worker.__main__ import main" in exec_env.BOOTSTRAP


# -- the checker itself, on a synthetic tree ----------------------------------------------------

SYNTHETIC_TABLE = f"""
{LAYER_HEADING}

| layer | what | packages |
|---|---|---|
| 0 | leaves | `pkg.leaf` |
| 1 | low | `pkg.low` |
| 2 | high | `pkg.high` |

{PART_HEADING}

| part | what | may import (besides itself) |
|---|---|---|
| `pkg.high.inner` | a part | `pkg.leaf` only; never `pkg.high.other` |
"""


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


BASE = {
    "pkg/__init__.py": "",
    "pkg/leaf.py": "import os\n",
    "pkg/low/__init__.py": "",
    "pkg/low/a.py": "from pkg.leaf import x\n",
    "pkg/high/__init__.py": "",
    "pkg/high/b.py": "from pkg.low import a\nfrom . import other\n",
    "pkg/high/other.py": "",
    "pkg/high/inner/__init__.py": "",
    "pkg/high/inner/c.py": "from pkg import leaf\n",
}


@pytest.fixture
def synthetic_rules() -> Rules:
    rules = parse_rules(SYNTHETIC_TABLE)
    rules.layers["pkg"] = 0  # the package root itself
    return rules


def test_checker_accepts_downward_and_sideways_imports(
    tmp_path: Path, synthetic_rules: Rules
) -> None:
    assert violations(_tree(tmp_path, BASE), synthetic_rules) == []


@pytest.mark.parametrize(
    "where",
    [
        "import pkg.high.b\n",  # module level
        "def f():\n    from pkg.high import b\n",  # inside a function
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high import b\n",
    ],
)
def test_checker_refuses_an_upward_import(
    tmp_path: Path, synthetic_rules: Rules, where: str
) -> None:
    src = _tree(tmp_path, {**BASE, "pkg/low/up.py": where})
    found = violations(src, synthetic_rules)
    assert len(found) == 1
    assert found[0].startswith("pkg.low.up (line ")
    assert "layer 1 imports layer 2 (upward)" in found[0]


def test_checker_applies_the_part_rules(tmp_path: Path, synthetic_rules: Rules) -> None:
    src = _tree(
        tmp_path,
        {
            **BASE,
            "pkg/high/inner/d.py": "from pkg.low import a\n",
            "pkg/high/inner/e.py": "from pkg.high import other\n",
        },
    )
    found = violations(src, synthetic_rules)
    assert [f.split(" (")[0] for f in found] == ["pkg.high.inner.d", "pkg.high.inner.e"]
    assert "may not import it" in found[0]
    assert "never imports that" in found[1]


def test_checker_finds_circles_of_imports(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "import pkg.c\n",
            "pkg/c.py": "def f():\n    from pkg.a import x\n",  # runs later: still a circle
            # A back-edge for annotations only does not close one.
            "pkg/d.py": "from pkg import e\n",
            "pkg/e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n",
        },
    )
    assert circles(src) == [["pkg.a", "pkg.b", "pkg.c"]]


MODULE_LINES = 500
# Private names other packages may call: pb_utils' documented server-side hooks (see the
# module's docstring) and the standard library's.
PRIVATE_HOOKS = {"_from_server", "_host_array", "_update_state", "_get_running_loop", "_getframe",
                 "_exit", "_from_device", "_to_device", "_on_host"}  # fmt: skip


def private_calls(src: Path) -> list[str]:
    """Calls ``x._name(...)`` (x not self, cls or super()) of a private method that the calling
    module does not define itself: one module reaching into another's internals."""
    found = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text())
        own = {  # the private methods and attributes this module defines
            n.name if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else n.attr
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            or (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store))
        }
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name, owner = node.func.attr, node.func.value
            if not name.startswith("_") or name.startswith("__") or name in own:
                continue
            if name in PRIVATE_HOOKS:
                continue
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", "") == "super":
                continue
            found.append(f"{path.relative_to(src)}:{node.lineno} calls {ast.unparse(node.func)}")
    return found


def test_no_module_calls_another_modules_private_methods() -> None:
    assert private_calls(SRC) == []


ClassKey = tuple[str, str]  # (module, class name)


def _classes(src: Path) -> dict[ClassKey, tuple[set[str], list[ClassKey]]]:
    """Every class: its private methods (``_name``, not dunders) and its bases, resolved
    through the module's own classes and its ``from ... import`` names."""
    known = modules(src)
    found: dict[ClassKey, tuple[set[str], list[ClassKey]]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        names: dict[str, ClassKey] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(module, path.name == "__init__.py", node)
                for alias in node.names:
                    names[alias.asname or alias.name] = (base, alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names.setdefault(node.name, (module, node.name))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {
                n.name
                for n in node.body
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name.startswith("_")
                and not n.name.startswith("__")
            }
            bases = [names[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in names]
            found[(module, node.name)] = (methods, bases)
    return found


def private_overrides(src: Path, core: str) -> list[str]:
    """Private methods that a class outside the package ``core`` defines again where a class
    of ``core`` it derives from defines them: extending the core by overriding its internals
    instead of handing it a part (a ``VersionPlacement``, ``ControlEvents``, a host)."""
    classes = _classes(src)

    def core_privates(key: ClassKey, seen: set[ClassKey]) -> dict[str, ClassKey]:
        out: dict[str, ClassKey] = {}
        for base in classes.get(key, (set(), []))[1]:
            if base in seen:
                continue
            seen.add(base)
            if _within(base[0], core) and base in classes:
                out.update({m: base for m in classes[base][0]})
            out.update(core_privates(base, seen))
        return out

    found = []
    for key, (methods, _) in sorted(classes.items()):
        if _within(key[0], core):
            continue
        inherited = core_privates(key, set())
        for method in sorted(methods & set(inherited)):
            owner = ".".join(inherited[method])
            found.append(f"{key[0]}.{key[1]}.{method} overrides {owner}.{method}")
    return found


def test_no_class_outside_the_core_overrides_its_private_methods() -> None:
    assert private_overrides(SRC, "modelyard.core") == []


def test_checker_finds_private_overrides_of_core_classes(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/core/__init__.py": "",
            "pkg/core/base.py": (
                "class Control:\n    def _load(self): ...\n    def load(self): ...\n"
                "class Server(Control):\n    def _ready(self): ...\n"
            ),
            "pkg/ray/__init__.py": "",
            "pkg/ray/a.py": (
                "from pkg.core.base import Server\n"
                "class Cluster(Server):\n"
                "    def _load(self): ...\n    def load(self): ...\n    def _own(self): ...\n"
                "class Deeper(Cluster):\n    def _ready(self): ...\n"
            ),
            "pkg/ray/b.py": "from .a import Cluster as C\nclass Again(C):\n    def _own(self): ...\n",
        },
    )
    assert private_overrides(src, "pkg.core") == [
        "pkg.ray.a.Cluster._load overrides pkg.core.base.Control._load",
        "pkg.ray.a.Deeper._ready overrides pkg.core.base.Server._ready",
    ]


def test_no_module_is_over_the_limit() -> None:
    long = [
        f"{p.relative_to(SRC)}: {n} lines"
        for p in sorted(SRC.rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MODULE_LINES
    ]
    assert long == []
