"""Reading a request body's fields with OpenAI's messages: each error names its parameter
(``param``) and says what was expected."""

from __future__ import annotations

from typing import Any

import orjson

from modelyard.frontends.http.request_response import Request, read_body
from modelyard.frontends.openai.errors import OpenAIError, bad_request

_KINDS = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
    "object": (dict,),
    "array": (list,),
}


async def read_object(request: Request, limit: int) -> dict[str, Any]:
    """The request's body as a JSON object; 413 past ``limit`` bytes
    (``--http-max-input-size``, as Triton's OpenAI frontend bounds it)."""
    length = request.header(b"content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise _too_large(int(length), limit)
    body = await read_body(request)
    if len(body) > limit:
        raise _too_large(len(body), limit)
    return parse_object(body)


def _too_large(size: int, limit: int) -> OpenAIError:
    return OpenAIError(
        413, f"Request body size of {size} bytes exceeds the maximum allowed {limit} bytes"
    )


def parse_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, else 400."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise bad_request(f"We could not parse the JSON body of your request: {e}") from None
    if not isinstance(doc, dict):
        raise bad_request(
            f"The request body must be a JSON object, but got {_type_name(doc)} instead."
        )
    return doc


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    for name, types in _KINDS.items():
        if type(value) in types and not (name == "integer" and type(value) is bool):
            return f"a{'n' if name[0] in 'aeiou' else ''} {name}"
    return "a value of another type"


def _is(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and type(value) is bool:
        return False
    if kind == "integer" and type(value) is float:
        return value.is_integer()
    return type(value) in _KINDS[kind]


def wrong_type(name: str, kind: str, value: Any) -> Exception:
    return bad_request(
        f"Invalid type for '{name}': expected {_article(kind)}, but got "
        f"{_type_name(value)} instead.",
        name,
        "invalid_type",
    )


def _article(kind: str) -> str:
    return f"a{'n' if kind[0] in 'aeiou' else ''} {kind}"


def get(doc: dict[str, Any], name: str, kind: str, required: bool = False) -> Any:
    """``doc[name]`` when it is of ``kind`` (JSON's names); None when absent or null (400
    when ``required``)."""
    value = doc.get(name)
    if value is None:
        if required:
            raise bad_request(
                f"Missing required parameter: '{name}'.", name, "missing_required_parameter"
            )
        return None
    if not _is(value, kind):
        raise wrong_type(name, kind, value)
    return int(value) if kind == "integer" else value


def bounded(
    doc: dict[str, Any],
    name: str,
    kind: str,
    low: float | None = None,
    high: float | None = None,
) -> Any:
    """A number (or None) within ``[low, high]``, else 400 in OpenAI's words."""
    value = get(doc, name, kind)
    if value is None:
        return None
    word = "integer" if kind == "integer" else "decimal"
    if low is not None and value < low:
        raise bad_request(
            f"Invalid '{name}': {word} below minimum value. Expected a value >= {low:g}, but "
            f"got {value:g} instead.",
            name,
            f"{word}_below_min_value",
        )
    if high is not None and value > high:
        raise bad_request(
            f"Invalid '{name}': {word} above maximum value. Expected a value <= {high:g}, but "
            f"got {value:g} instead.",
            name,
            f"{word}_above_max_value",
        )
    return value


def strings(doc: dict[str, Any], name: str) -> list[str]:
    """A string or an array of strings (``stop``) as a list; [] when absent."""
    value = doc.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise bad_request(
        f"Invalid type for '{name}': expected a string or an array of strings, but got "
        f"{_type_name(value)} instead.",
        name,
        "invalid_type",
    )


def unsupported(name: str, what: str) -> Exception:
    return bad_request(f"{what} is not currently supported", name, "unsupported_parameter")
