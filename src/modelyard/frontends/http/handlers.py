"""Handlers for every endpoint except inference and generate.

Each takes the core, the request and the route's captured segments and returns a response
or raises ModelyardError (the router turns it into ``{"error": ...}`` with the table's
status). JSON field type errors are Triton's INTERNAL (500) ones; see protocol.md §1.3.
"""

from __future__ import annotations

import base64
import binascii
import inspect
from typing import TYPE_CHECKING, Any

from modelyard.errors import InternalError, InvalidArgument, Unavailable, Unsupported
from modelyard.frontends.http import infer_body
from modelyard.frontends.http.request_response import (
    Request,
    Response,
    empty_response,
    json_response,
    json_value_response,
    message_response,
    read_body,
)
from modelyard.serving.cuda_regions import BAD_HANDLE, HANDLE_SIZE, decode_handle
from modelyard.tracing.settings import parse_update

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer

_NO_MEMBER = "attempt to access non-existing object member '{}'"  # (Triton's JSON reader)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


async def _json_body(request: Request) -> dict[str, Any] | None:
    """The body as a JSON object, or None when the body is empty."""
    body = await read_body(request)
    if not body:
        return None
    return infer_body.as_object(infer_body.parse_json(body))


# -- health and metadata -----------------------------------------------------------------------


async def health(core: InferenceServer, kind: str) -> Response:
    ok = core.is_live() if kind == "live" else await core.check_ready()
    return empty_response(200 if ok else 400)


def server_metadata(core: InferenceServer) -> Response:
    return json_value_response(core.server_metadata())


def model_metadata(core: InferenceServer, model: str, version: str) -> Response:
    return json_value_response(core.model_metadata(model, version))


async def model_ready(core: InferenceServer, model: str, version: str) -> Response:
    if await core.check_model_ready(model, version):
        return empty_response(200)
    return message_response("Model version not ready", 400, json=False)


def model_config(core: InferenceServer, model: str, version: str) -> Response:
    return json_response(core.model_config_json(model, version))


async def statistics(core: InferenceServer, model: str, version: str) -> Response:
    return json_value_response(await core.statistics(model, version))


# -- repository --------------------------------------------------------------------------------


async def repository_index(core: InferenceServer, request: Request) -> Response:
    doc = await _json_body(request)
    ready = False
    if doc is not None and "ready" in doc:
        ready = infer_body.as_bool(doc["ready"])
    index = await _maybe_await(core.repository_index(ready))
    return json_value_response(index)


async def load_model(core: InferenceServer, request: Request, model: str) -> Response:
    doc = await _json_body(request)
    config: str | None = None
    files: dict[str, bytes] = {}
    params = None if doc is None else doc.get("parameters")
    if params is not None:
        for key, value in infer_body.as_object(params).items():
            text = infer_body.as_str(value)
            if key == "config":
                config = text
            elif key.startswith("file:"):
                try:  # the path is checked by the core (file_override.check_path)
                    files[key] = base64.b64decode(text, validate=True)
                except (binascii.Error, ValueError):
                    raise InvalidArgument(
                        f"failed to decode base64 encoded content of load parameter '{key}'"
                    ) from None
            else:
                raise InternalError("unexpected error on creating Triton parameter")
    await _maybe_await(core.load_model(model, config=config, files=files or None))
    return empty_response(200, json=True)


async def unload_model(core: InferenceServer, request: Request, model: str) -> Response:
    doc = await _json_body(request)
    dependents = False
    params = None if doc is None else doc.get("parameters")
    if params is not None and "unload_dependents" in infer_body.as_object(params):
        dependents = infer_body.as_bool(params["unload_dependents"], "unload_dependents")
    await _maybe_await(core.unload_model(model, unload_dependents=dependents))
    return empty_response(200, json=True)


# -- logging and trace -------------------------------------------------------------------------

_LOG_BOOLS = ("log_info", "log_warning", "log_error")


async def logging_settings(core: InferenceServer, request: Request) -> Response:
    if request.method == "GET":
        return json_value_response(core.get_log_settings())
    doc = await _json_body(request) or {}
    update: dict[str, Any] = {}
    if doc.get("log_file") is not None:
        raise Unsupported("log file location can not be updated through network protocol")
    for key in _LOG_BOOLS:
        if doc.get(key) is not None:
            update[key] = infer_body.as_bool(doc[key])
    if doc.get("log_verbose_level") is not None:
        update["log_verbose_level"] = infer_body.as_uint(doc["log_verbose_level"])
    if doc.get("log_format") is not None:
        fmt = infer_body.as_str(doc["log_format"])
        if fmt not in ("default", "ISO8601"):
            raise Unavailable(f"invalid argument for --log_format, got: {fmt}")
        update["log_format"] = fmt
    return json_value_response(core.update_log_settings(update))


async def trace_settings(core: InferenceServer, request: Request, model: str = "") -> Response:
    if request.method == "GET":
        return json_value_response(_http_trace(core.get_trace_settings(model)))
    doc = await _json_body(request) or {}
    raw: dict[str, Any] = {}
    for key in ("trace_file", "trace_level", "trace_rate", "trace_count", "log_frequency"):
        if key not in doc:
            continue
        value = doc[key]
        if value is not None:
            if key == "trace_level":
                value = [infer_body.as_str(v) for v in infer_body.as_array(value)]
            elif key != "trace_file":
                value = infer_body.as_str(value)
        raw[key] = value
    if model:  # Triton checks the model before the settings
        core.get_trace_settings(model)
    update = parse_update(raw)
    return json_value_response(_http_trace(core.update_trace_settings(model, update)))


def _http_trace(settings: dict[str, Any]) -> dict[str, Any]:
    """Triton's HTTP answer repeats a key given several times (``resource``); a JSON reader
    keeps the last."""
    return {
        k: v[-1] if isinstance(v, list) and k != "trace_level" else v for k, v in settings.items()
    }


# -- shared memory -----------------------------------------------------------------------------


async def system_shm(core: InferenceServer, request: Request, region: str, action: str) -> Response:
    if action == "status":
        return json_value_response(core.shm_status(region))
    if action == "register":
        if not region:
            raise InvalidArgument(
                "'region name' is necessary to register system shared memory region"
            )
        doc = await _json_body(request) or {}
        if "key" not in doc:
            raise InvalidArgument("Shared memory register request has no 'key' field")
        key = infer_body.as_str(doc["key"])
        offset = infer_body.as_uint(doc["offset"]) if "offset" in doc else 0
        if "byte_size" not in doc:
            raise InvalidArgument("Shared memory register request has no 'byte_size' field")
        byte_size = infer_body.as_uint(doc["byte_size"])
        core.shm_register(region, key, offset, byte_size)
        return empty_response(200, json=True)
    core.shm_unregister(region)  # unknown names (and "all" with none registered) succeed
    return empty_response(200, json=True)


async def cuda_shm(core: InferenceServer, request: Request, region: str, action: str) -> Response:
    if action == "status":
        return json_value_response(core.cuda_shm_status(region))
    if action == "register":
        if not region:
            raise InvalidArgument(
                "'region name' is necessary to register cuda shared memory region"
            )
        doc = await _json_body(request) or {}
        handle, device_id, byte_size = _cuda_register_body(doc)
        core.cuda_shm_register(region, handle, device_id, byte_size)
        return empty_response(200, json=True)
    core.cuda_shm_unregister(region)  # unknown names (and "all" with none registered) succeed
    return empty_response(200, json=True)


def _cuda_register_body(doc: dict[str, Any]) -> tuple[bytes, int, int]:
    """``(handle, device_id, byte_size)`` of a CUDA register body, read and checked in
    Triton's order (a GPU build's: these come before the server looks for a GPU)."""
    if "raw_handle" not in doc:
        raise InvalidArgument("Shared memory register request has no 'raw_handle' field")
    raw = doc["raw_handle"]
    if type(raw) is not dict or "b64" not in raw:
        raise InternalError(_NO_MEMBER.format("b64"))
    b64 = infer_body.as_str(raw["b64"])
    byte_size = _member_uint(doc, "byte_size")
    device_id = _member_uint(doc, "device_id")
    handle = decode_handle(b64)
    if len(handle) != HANDLE_SIZE:
        raise InvalidArgument(BAD_HANDLE)
    return handle, device_id, byte_size


def _member_uint(doc: dict[str, Any], member: str) -> int:
    if member not in doc:
        raise InternalError(_NO_MEMBER.format(member))
    return infer_body.as_uint(doc[member])
