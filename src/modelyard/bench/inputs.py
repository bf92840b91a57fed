"""Request tensors: random or zero data, or perf_analyzer's --input-data JSON files and folders.

Every input becomes raw bytes in the host's (little-endian) order (BYTES elements length-prefixed, as both protocols
carry them), built once before the load starts, so no request pays for encoding its data.
As in perf_analyzer, random data is drawn once per input and reused; the entries of a JSON
file are sent round-robin, and with ``-b N`` request k carries entries k..k+N-1.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor, triton_to_np_dtype

from modelyard.bench.args import Options
from modelyard.bench.model import ModelInfo, SetupError, TensorSpec

STRING_CHARS = np.frombuffer(
    b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", np.uint8
)


@dataclass(frozen=True)
class WireTensor:
    """One input of one request, ready for either protocol."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes


Request = tuple[WireTensor, ...]
# One batch-1 sample of one input: its shape (without the batch dim) and raw bytes.
Sample = tuple[tuple[int, ...], bytes]


def build_streams(model: ModelInfo, opts: Options) -> list[list[Request]]:
    """The requests to send, checked against the model: one stream sent round-robin, or for
    a sequence model one stream per sequence's data (perf_analyzer's data streams)."""
    if model.max_batch_size == 0 and opts.batch_size != 1:
        raise SetupError(
            f"model '{model.name}' does not support batching (max_batch_size 0): "
            f"-b/--batch-size must be 1, got {opts.batch_size}"
        )
    if model.max_batch_size and opts.batch_size > model.max_batch_size:
        raise SetupError(
            f"-b/--batch-size {opts.batch_size} is over the max_batch_size "
            f"{model.max_batch_size} of model '{model.name}'"
        )
    if model.sequence and opts.batch_size != 1:
        raise SetupError(f"model '{model.name}' is a sequence model: each request carries -b 1")
    unknown = sorted(set(opts.shapes) - {t.name for t in model.inputs})
    if unknown:
        raise SetupError(f"--shape names unknown input(s) {unknown} of model '{model.name}'")
    mode = opts.input_data[0]
    streams: list[list[dict[str, Sample]]]
    if mode in ("random", "zero"):
        streams = [[{t.name: _generated(t, mode, opts) for t in model.inputs if not t.optional}]]
    else:
        streams = []
        for path in opts.input_data:
            p = Path(path)
            streams += (
                [[_directory_entry(p, model, opts)]]
                if p.is_dir()
                else _json_streams(p, model, opts)
            )
    if not model.sequence:
        streams = [[entry for stream in streams for entry in stream]]
    b = opts.batch_size
    return [[_request(stream, k, model, b) for k in range(len(stream))] for stream in streams]


def _request(entries: list[dict[str, Sample]], k: int, model: ModelInfo, batch: int) -> Request:
    tensors = []
    for spec in model.inputs:
        if spec.name not in entries[k]:
            continue  # an optional input the data leaves out
        picked = [entries[(k + i) % len(entries)].get(spec.name) for i in range(batch)]
        shape = entries[k][spec.name][0]
        if any(p is None or p[0] != shape for p in picked):
            raise SetupError(
                f"input '{spec.name}': -b {batch} batches entries {k}..{k + batch - 1} of the "
                "input data, which must all give it the same shape"
            )
        data = b"".join(p[1] for p in picked if p is not None)
        full = (batch, *shape) if model.max_batch_size else shape
        tensors.append(WireTensor(spec.name, spec.datatype, full, data))
    return tuple(tensors)


def _shape(spec: TensorSpec, opts: Options, where: str) -> tuple[int, ...]:
    shape = opts.shapes.get(spec.name, spec.dims)
    if len(shape) != len(spec.dims) or any(
        d not in (-1, s) for d, s in zip(spec.dims, shape, strict=True)
    ):
        raise SetupError(
            f"--shape {spec.name}:{','.join(map(str, shape))} does not fit the model's dims "
            f"{list(spec.dims)} (give the shape without the batch dimension)"
        )
    if any(d < 0 for d in shape):
        raise SetupError(
            f"input '{spec.name}' has variable dims {list(spec.dims)}: give its shape with "
            f"--shape {spec.name}:D1,D2,...{where}"
        )
    return shape


def _generated(spec: TensorSpec, mode: str, opts: Options) -> Sample:
    shape = _shape(spec, opts, "")
    count = math.prod(shape)
    rng = np.random.default_rng(0)
    if spec.datatype == "BYTES":
        if opts.string_data is not None:
            items = [opts.string_data.encode()] * count
        elif mode == "zero":
            items = [b"\0" * opts.string_length] * count
        else:
            chars = rng.choice(STRING_CHARS, size=(count, opts.string_length))
            items = [row.tobytes() for row in chars]
        return shape, _bytes_tensor(items)
    dtype = _np_dtype(spec)
    if mode == "zero":
        array = np.zeros(count, dtype)
    elif dtype == np.bool_:
        array = rng.integers(0, 2, count).astype(dtype)
    elif np.issubdtype(dtype, np.integer):
        array = rng.integers(0, 100, count).astype(dtype)  # small: valid for any int type
    else:
        array = rng.random(count, np.float32).astype(dtype)
    return shape, array.tobytes()


def _np_dtype(spec: TensorSpec) -> np.dtype[Any]:
    t = triton_to_np_dtype(spec.datatype)
    if t is None:
        raise SetupError(
            f"input '{spec.name}' has datatype {spec.datatype}, which bench cannot make"
        )
    dtype: np.dtype[Any] = np.dtype(t)
    return dtype


def _bytes_tensor(items: list[bytes]) -> bytes:
    serialized = serialize_byte_tensor(np.array(items, dtype=np.object_))
    return bytes(serialized.item()) if serialized.size else b""


def _json_streams(path: Path, model: ModelInfo, opts: Options) -> list[list[dict[str, Sample]]]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SetupError(
            f"--input-data {path}: no such file or folder (or use random, zero)"
        ) from None
    except (OSError, ValueError) as exc:
        raise SetupError(f"--input-data {path}: not readable JSON: {exc}") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not data:
        raise SetupError(f'--input-data {path}: expected {{"data": [{{INPUT: ...}}, ...]}}')
    if isinstance(doc, dict) and "validation_data" in doc:
        print(f"modelyard bench: warning: {path}: validation_data is not checked", file=sys.stderr)
    if all(isinstance(item, list) for item in data):
        if not model.sequence:
            raise SetupError(
                f"{path}: data streams (lists of steps) are for sequence models, and "
                f"model '{model.name}' has no sequence batcher"
            )
        streams = []
        for i, stream in enumerate(data):
            if not stream:
                raise SetupError(f"{path}: data[{i}] is an empty data stream")
            where = f"{path}: data[{i}]"
            streams.append(
                [_json_entry(e, model, opts, f"{where}[{j}]") for j, e in enumerate(stream)]
            )
        return streams
    return [[_json_entry(e, model, opts, f"{path}: data[{i}]") for i, e in enumerate(data)]]


def _json_entry(entry: Any, model: ModelInfo, opts: Options, where: str) -> dict[str, Sample]:
    known = {t.name: t for t in model.inputs}
    if not isinstance(entry, dict):
        raise SetupError(f"{where}: expected an object of input names")
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise SetupError(
            f"{where}: unknown input(s) {unknown}; model '{model.name}' has {sorted(known)}"
        )
    missing = sorted(n for n, t in known.items() if n not in entry and not t.optional)
    if missing:
        raise SetupError(f"{where}: input(s) {missing} missing")
    return {n: _json_sample(known[n], v, opts, f"{where}.{n}") for n, v in entry.items()}


def _json_sample(spec: TensorSpec, value: Any, opts: Options, where: str) -> Sample:
    shape: tuple[int, ...] | None = None
    if isinstance(value, dict) and "content" in value:
        if "shape" in value:
            shape = tuple(int(d) for d in value["shape"])
        value = value["content"]
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise SetupError(
                f'{where}: expected a list, {{"b64": ...}} or {{"content": ..., "shape": ...}}'
            )
        try:
            raw = base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, TypeError) as exc:
            raise SetupError(f"{where}: bad base64: {exc}") from None
        if spec.datatype == "BYTES":
            try:
                elements = deserialize_bytes_tensor(raw).size
            except (struct.error, ValueError):
                raise SetupError(f"{where}: not length-prefixed BYTES elements") from None
        else:
            elements = len(raw) // _np_dtype(spec).itemsize
            if len(raw) % _np_dtype(spec).itemsize:
                raise SetupError(f"{where}: {len(raw)} bytes are no whole {spec.datatype} values")
        if shape is None:
            shape = _fit_shape(spec, opts, elements, where)
        if math.prod(shape) != elements:
            raise SetupError(f"{where}: {elements} values do not fill shape {list(shape)}")
        return shape, raw
    if spec.datatype == "BYTES":
        items = [
            str(v).encode() if not isinstance(v, bytes) else v
            for v in np.ravel(np.array(value, dtype=object))
        ]
        array_size = len(items)
    else:
        try:
            array = np.ravel(np.array(value, dtype=_np_dtype(spec)))
        except (TypeError, ValueError) as exc:
            raise SetupError(f"{where}: not {spec.datatype} values: {exc}") from None
        array_size = array.size
    if shape is None:
        shape = _fit_shape(spec, opts, array_size, where)
    if math.prod(shape) != array_size:
        raise SetupError(f"{where}: {array_size} values do not fill shape {list(shape)}")
    if spec.datatype == "BYTES":
        return shape, _bytes_tensor(items)
    return shape, array.tobytes()


def _fit_shape(spec: TensorSpec, opts: Options, size: int, where: str) -> tuple[int, ...]:
    """The input's shape: --shape or the model's dims, one variable dim taken from the count."""
    shape = opts.shapes.get(spec.name, spec.dims)
    variable = [i for i, d in enumerate(shape) if d < 0]
    if len(variable) == 1:
        known = math.prod(d for d in shape if d >= 0)
        if known and size % known == 0:
            return tuple(size // known if d < 0 else d for d in shape)
    return _shape(spec, opts, f' or a "shape" in {where}')


def _directory_entry(path: Path, model: ModelInfo, opts: Options) -> dict[str, Sample]:
    """perf_analyzer's folder form: one raw file per input (BYTES: one element per line)."""
    entry: dict[str, Sample] = {}
    for spec in model.inputs:
        f = path / spec.name
        if not f.is_file():
            if spec.optional:
                continue
            raise SetupError(f"--input-data {path}: no file '{spec.name}' for input '{spec.name}'")
        shape = _shape(spec, opts, "")
        if spec.datatype == "BYTES":
            lines = f.read_bytes().splitlines()
            if len(lines) != math.prod(shape):
                raise SetupError(f"{f}: {len(lines)} lines do not fill shape {list(shape)}")
            entry[spec.name] = (shape, _bytes_tensor(lines))
        else:
            raw = f.read_bytes()
            if len(raw) != math.prod(shape) * _np_dtype(spec).itemsize:
                raise SetupError(
                    f"{f}: {len(raw)} bytes do not fill shape {list(shape)} of {spec.datatype}"
                )
            entry[spec.name] = (shape, raw)
    return entry
