"""Where a load error points: the file and line of a model's mistake, found in the error's
text, for the people reading it (``modelyard check``, ``modelyard dev``).

The server's load errors carry the place in Triton's shapes: a model's Python error lists its
frames under ``At:`` (``  /repo/m/1/model.py(4): execute``, innermost first, the source line
indented below when the server added it), a config error names ``/repo/m/config.pbtxt:4:1``.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass

_FRAME = re.compile(r"^  (?P<path>[^<\s].*?)\((?P<line>\d+)\)(?::.*)?$")
# Absolute, or relative to where the server was started (a relative repository argument).
_CONFIG_AT = re.compile(r"(?P<path>[^\s:'\"]+\.pbtxt):(?P<line>\d+)(?::(?P<col>\d+))?")
_CONFIG = re.compile(r"(?P<path>[^\s:'\"]+\.pbtxt)")


@dataclass
class Location:
    path: str
    line: int | None = None
    source: list[str] | None = None  # the source line (and a caret line), as shown


def locate(message: str) -> Location | None:
    """The innermost place ``message`` names (a model frame, else a config file), or None."""
    lines = message.splitlines()
    if "At:" in lines:
        after = lines[lines.index("At:") + 1 :]
        for i, text in enumerate(after):
            m = _FRAME.match(text)
            if m is None:
                continue
            path, line = m.group("path"), int(m.group("line"))
            shown = []
            for extra in after[i + 1 : i + 3]:
                if not extra.startswith("    "):
                    break
                shown.append(extra[4:])
            if not shown:
                code = linecache.getline(path, line).strip()
                shown = [code] if code else []
            return Location(path, line, shown or None)
    m = _CONFIG_AT.search(message)
    if m is not None:
        line = int(m.group("line"))
        code = linecache.getline(m.group("path"), line).strip()
        return Location(m.group("path"), line, [code] if code else None)
    m = _CONFIG.search(message)
    return Location(m.group("path")) if m is not None else None


def describe(message: str, indent: str = "  ") -> list[str]:
    """Lines for a person: ``path:line: <first line of the message>``, then the source line
    (indented) when there is one; just the message's first line when it names no place."""
    first = message.strip().splitlines()[0] if message.strip() else message
    where = locate(message)
    if where is None:
        return [f"{indent}{first}"]
    place = f"{where.path}:{where.line}" if where.line is not None else where.path
    out = [f"{indent}{place}: {first}"]
    for code in where.source or []:
        out.append(f"{indent}    {code}")
    return out
