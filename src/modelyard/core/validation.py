"""Checks a request against its model's configuration, with Triton's messages, and decodes
raw tensor bytes into numpy views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from modelyard import tensor_bytes
from modelyard.errors import InvalidArgument
from modelyard.types import InferRequest, Tensor


@dataclass(frozen=True, slots=True)
class IOSpec:
    name: str
    datatype: str
    dims: tuple[int, ...]  # without the batch dimension
    optional: bool = False
    reshape: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ModelSignature:
    """What validation needs to know about a model version."""

    name: str
    max_batch_size: int
    inputs: dict[str, IOSpec]
    outputs: dict[str, IOSpec]
    allow_ragged: frozenset[str] = frozenset()
    required_count: int = field(init=False)  # inputs that are not optional; checked per request

    def __post_init__(self) -> None:
        count = sum(1 for spec in self.inputs.values() if not spec.optional)
        object.__setattr__(self, "required_count", count)


def _rid(request: InferRequest) -> str:
    return f"[request id: {request.id or '<id_unknown>'}] "


def _shape_text(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _dims_match(expected: tuple[int, ...], got: tuple[int, ...]) -> bool:
    if expected == got:  # the common case, without the per-dimension loop
        return True
    if len(expected) != len(got):
        return False
    return all(e == -1 or e == g for e, g in zip(expected, got, strict=False))


def validate(request: InferRequest, sig: ModelSignature) -> list[str] | None:
    """Validate ``request`` in place (decoding ``raw`` inputs); return the output names to
    produce (None = all). Raises InvalidArgument naming what is wrong."""
    model = sig.name
    n = len(request.inputs)
    if n > len(sig.inputs) or n < sig.required_count:
        raise InvalidArgument(_count_message(request, sig))
    seen: set[str] = set()
    batch_size = 0
    for tensor in request.inputs:
        spec = sig.inputs.get(tensor.name)
        if spec is None:
            raise InvalidArgument(f"unexpected inference input '{tensor.name}' for model '{model}'")
        if tensor.name in seen:
            raise InvalidArgument(
                f"{_rid(request)}input '{tensor.name}' specified more than once for model '{model}'"
            )
        seen.add(tensor.name)
        if tensor.datatype != spec.datatype:
            raise InvalidArgument(
                f"{_rid(request)}inference input '{tensor.name}' data-type is '{tensor.datatype}', "
                f"but model '{model}' expects '{spec.datatype}'"
            )
        shape = tensor.shape
        if sig.max_batch_size > 0:
            if len(shape) == 0:
                raise InvalidArgument(
                    f"{_rid(request)}inference input '{tensor.name}' must have a batch dimension "
                    f"for model '{model}'"
                )
            this_batch = shape[0]
            if batch_size == 0:
                batch_size = this_batch
            elif this_batch != batch_size:
                raise InvalidArgument(
                    f"{_rid(request)}input '{tensor.name}' batch size does not match other inputs "
                    f"for '{model}'"
                )
            item_shape = shape[1:]
            expected_full = (-1, *spec.dims)
        else:
            item_shape = shape
            expected_full = spec.dims
        if tensor.name not in sig.allow_ragged and not _dims_match(spec.dims, item_shape):
            note = ""
            if sig.max_batch_size > 0:
                note = (
                    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch "
                    "dimension to be prepended to each input shape. If you want to specify the full "
                    "shape including the batch dim in your input dims config, try setting "
                    "max_batch_size to zero. See the model configuration docs for more info on "
                    "max_batch_size."
                )
            raise InvalidArgument(
                f"{_rid(request)}unexpected shape for input '{tensor.name}' for model '{model}'. "
                f"Expected {_shape_text(expected_full)}, got {_shape_text(shape)}. {note}"
            )
        _decode(request, tensor, model)

    if sig.max_batch_size > 0 and batch_size > sig.max_batch_size:
        raise InvalidArgument(
            f"{_rid(request)}inference request batch-size must be <= {sig.max_batch_size} for '{model}'"
        )
    if len(seen) != len(sig.inputs) and any(
        name not in seen and not spec.optional for name, spec in sig.inputs.items()
    ):
        raise InvalidArgument(_count_message(request, sig))

    if request.outputs is None:
        return None
    names: list[str] = []
    for out in request.outputs:
        if out.name not in sig.outputs:
            raise InvalidArgument(f"unexpected inference output '{out.name}' for model '{model}'")
        names.append(out.name)
    return names


def _count_message(request: InferRequest, sig: ModelSignature) -> str:
    """Triton's text, quirks included: inputs listed newest first and comma-joined, and the
    missing list printed as "]" when nothing required is missing."""
    got = ",".join(f"'{t.name}'" for t in reversed(request.inputs))
    names = {t.name for t in request.inputs}
    missing = "".join(
        f"'{n}'," for n, spec in sig.inputs.items() if not spec.optional and n not in names
    )
    missing = "[" + missing
    missing = missing[:-1] + "]"
    return (
        f"{_rid(request)}expected {len(sig.inputs)} inputs but got {len(request.inputs)} inputs for "
        f"model '{sig.name}'. Got input(s) [{got}], but missing required input(s) {missing}. "
        "Please provide all required input(s)."
    )


def _decode(request: InferRequest, tensor: Tensor, model: str) -> None:
    """Turn ``raw`` bytes into ``data`` (a zero-copy view for fixed-size types)."""
    if tensor.raw is None:
        if tensor.data is None and tensor.device is not None:
            return  # a GPU tensor from a model (BLS): its shape was checked where it was made
        if tensor.data is None:
            raise InvalidArgument(
                f"{_rid(request)}input '{tensor.name}' has no data for model '{model}'"
            )
        if tuple(tensor.data.shape) != tensor.shape:
            tensor.data = tensor.data.reshape(tensor.shape)
        return
    raw = tensor.raw
    expected = tensor_bytes.expected_byte_size(tensor.datatype, tensor.shape)
    if expected is not None:
        if len(raw) != expected:
            raise InvalidArgument(
                f"{_rid(request)}input byte size mismatch for input '{tensor.name}' for model "
                f"'{model}'. Expected {expected}, got {len(raw)}"
            )
        tensor.data = tensor_bytes.array_from_raw(tensor.datatype, tensor.shape, raw)
    else:
        try:
            elements = tensor_bytes.deserialize_bytes(raw)
        except ValueError as e:
            raise InvalidArgument(
                f"{_rid(request)}input '{tensor.name}' for model '{model}' holds malformed BYTES data: {e}"
            ) from None
        count = tensor_bytes.element_count(tensor.shape)
        if len(elements) != count:
            raise InvalidArgument(
                f"{_rid(request)}expected {count} string elements for inference input "
                f"'{tensor.name}' for model '{model}', got {len(elements)}"
            )
        tensor.data = tensor_bytes.bytes_array(elements, tensor.shape)
    tensor.raw = None


def signature_from_config(cfg: Any) -> ModelSignature:
    """Build a ModelSignature from a normalized model_config_pb2.ModelConfig."""
    from modelyard.types import config_datatype

    def spec(io: Any, is_input: bool) -> IOSpec:
        dims = tuple(int(d) for d in io.dims)
        reshape = tuple(int(d) for d in io.reshape.shape) if io.HasField("reshape") else None
        return IOSpec(
            io.name,
            config_datatype(io.data_type),
            dims,
            bool(io.optional) if is_input else False,
            reshape,
        )

    inputs = {i.name: spec(i, True) for i in cfg.input}
    outputs = {o.name: spec(o, False) for o in cfg.output}
    ragged = frozenset(i.name for i in cfg.input if i.allow_ragged_batch)
    return ModelSignature(cfg.name, int(cfg.max_batch_size), inputs, outputs, ragged)
