"""The classification extension: replace an output with its top-k classes as BYTES.

Each element is ``"<value>:<index>[:<label>]"`` with the value printed as C++
``std::to_string`` prints it (``%f`` for floating types, plain digits for integers); the
shape is ``[k]``, or ``[batch, k]`` for models that batch; ``k`` is clipped to the number of
classes (Triton's classification.cc, protocol.md §2.6).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from modelyard import tensor_bytes
from modelyard.errors import InvalidArgument
from modelyard.types import Tensor

_FLOAT_TYPES = frozenset({"FP16", "BF16", "FP32", "FP64"})
_INT_TYPES = frozenset({"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"})


def _format(value: Any, is_float: bool) -> str:
    return f"{float(value):f}" if is_float else str(int(value))


def top_k(
    values: np.ndarray[Any, Any], k: int, labels: Sequence[str] | None, is_float: bool
) -> list[bytes]:
    """Top-k classes of one flat row, highest first (ties: lower index first)."""
    flat = values.reshape(-1)
    n = flat.shape[0]
    order = np.lexsort((np.arange(n), -flat.astype(np.float64)))[: min(k, n)]
    out: list[bytes] = []
    for idx in order:
        i = int(idx)
        text = f"{_format(flat[i], is_float)}:{i}"
        if labels is not None and i < len(labels) and labels[i]:
            text += f":{labels[i]}"
        out.append(text.encode("utf-8"))
    return out


def classify(
    tensor: Tensor,
    k: int,
    batching: bool,
    labels: Sequence[str] | None = None,
) -> Tensor:
    """The classification output for ``tensor`` (a new BYTES tensor of the same name)."""
    datatype = tensor.datatype
    if datatype not in _FLOAT_TYPES and datatype not in _INT_TYPES:
        raise InvalidArgument(
            f"class result not available for output '{tensor.name}' due to unsupported type "
            f"'{datatype}'"
        )
    if tensor.data is not None:
        array = tensor.data
    else:
        raw = tensor.raw if tensor.raw is not None else b""
        array = tensor_bytes.array_from_raw(datatype, tensor.shape, raw)
    is_float = datatype in _FLOAT_TYPES
    shape = tuple(tensor.shape)
    if batching and len(shape) > 0:
        batch = shape[0]
        rows = array.reshape(batch, -1) if batch else array.reshape(0, 0)
        per_row = tensor_bytes.element_count(shape[1:])
        count = min(k, per_row)
        elements: list[bytes] = []
        for row in rows:
            elements.extend(top_k(row, k, labels, is_float))
        out_shape: tuple[int, ...] = (batch, count)
    else:
        per_row = tensor_bytes.element_count(shape)
        count = min(k, per_row)
        elements = top_k(array, k, labels, is_float)
        out_shape = (count,)
    data = tensor_bytes.bytes_array(elements, out_shape)
    return Tensor(tensor.name, "BYTES", out_shape, data=data)


_LABEL_CACHE: dict[str, tuple[int, list[str]]] = {}


def read_labels(path: Path) -> list[str] | None:
    """The lines of a label file (cached until the file changes); None if unreadable."""
    key = str(path)
    try:
        mtime = os.stat(key).st_mtime_ns
    except OSError:
        return None
    cached = _LABEL_CACHE.get(key)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    labels = text.splitlines()
    _LABEL_CACHE[key] = (mtime, labels)
    return labels


def output_labels(core: Any, cfg: Any, model: str, version: str, output: str) -> list[str] | None:
    """Labels of ``output`` from its config ``label_filename`` in the model's folder.

    Uses the core's ``output_labels(model, version, output)`` when it has one; otherwise
    finds the model folder through the core's repository registry.
    """
    hook = getattr(core, "output_labels", None)
    if hook is not None:
        result: list[str] | None = hook(model, version, output)
        return result
    filename = next((str(o.label_filename) for o in cfg.output if o.name == output), "")
    if not filename:
        return None
    locations = getattr(getattr(core, "registry", None), "locations", None)
    folder = locations.get(model) if isinstance(locations, dict) else None
    if folder is None:
        return None
    return read_labels(Path(folder) / filename)
