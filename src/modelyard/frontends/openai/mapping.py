"""An OpenAI request as the model's input tensors (Triton's OpenAI frontend's mapping).

vLLM's convention: ``text_input`` (the prompt, or the rendered chat), ``stream`` (BOOL),
``exclude_input_in_output`` (BOOL: not ``echo``), ``sampling_parameters`` (a JSON object of
every sampling field the client sent, ``max_tokens`` always set), and
``return_num_input_tokens`` / ``return_num_output_tokens`` (BOOL true). TensorRT-LLM's:
the same ``text_input``, ``stream`` and echo switch, and ``max_tokens``, ``stop_words``,
``temperature``, ``top_p``, ... as inputs of their own. Each optional input is sent only when
the model declares it, in the datatype and shape (batch dimension included) it declares.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from modelyard.frontends.openai.catalog import TRTLLM, ServedModel
from modelyard.frontends.openai.errors import SERVER_ERROR, OpenAIError
from modelyard.frontends.openai.requests import GenerationRequest
from modelyard.types import InferRequest, Tensor, numpy_dtype

# TensorRT-LLM inputs filled from the sampling fields of the same name.
_TRTLLM_SAMPLING = (
    "temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty",
    "repetition_penalty",
)  # fmt: skip
_USAGE_SWITCHES = ("return_num_input_tokens", "return_num_output_tokens")


def _shape(model: ServedModel, name: str, count: int) -> tuple[int, ...]:
    """The shape of ``count`` elements for input ``name``: the innermost -1 takes them; a
    batching model gets a batch of one."""
    spec = model.input_spec(name)
    dims = list(spec.dims)
    fixed = 1
    for d in dims:
        if d != -1:
            fixed *= d
    wildcard = [i for i, d in enumerate(dims) if d == -1]
    if wildcard:
        for i in wildcard:
            dims[i] = 1
        if fixed == 0 or count % fixed:
            raise _mismatch(model, name, count)
        dims[wildcard[-1]] = count // fixed
    elif fixed != count:
        raise _mismatch(model, name, count)
    return (1, *dims) if model.signature.max_batch_size > 0 else tuple(dims)


def _mismatch(model: ServedModel, name: str, count: int) -> OpenAIError:
    dims = list(model.input_spec(name).dims)
    return OpenAIError(
        500,
        f"model '{model.name}' declares input '{name}' with dims {dims}, which cannot hold "
        f"the {count} value(s) the OpenAI API sends",
        SERVER_ERROR,
    )


def tensor(model: ServedModel, name: str, values: list[Any]) -> Tensor:
    """Input ``name`` holding ``values``, in the model's datatype."""
    datatype = model.input_spec(name).datatype
    shape = _shape(model, name, len(values))
    if datatype == "BYTES":
        items = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in values]
        array = np.empty(len(items), dtype=np.object_)
        array[:] = items
    else:
        try:
            array = np.array(values, dtype=numpy_dtype(datatype))
        except (ValueError, OverflowError) as e:
            raise OpenAIError(
                400, f"{name}: {e}", param=name, code="invalid_value"
            ) from None  # fmt: skip
    return Tensor(name, datatype, shape, data=array.reshape(shape))


def _check_required(model: ServedModel, given: dict[str, Tensor]) -> None:
    for spec in model.signature.inputs.values():
        if not spec.optional and spec.name not in given:
            raise OpenAIError(
                500,
                f"model '{model.name}' requires input '{spec.name}', which the OpenAI API "
                "does not fill (mark it optional in its config)",
                SERVER_ERROR,
            )


def generation_inputs(
    model: ServedModel, request: GenerationRequest, max_tokens: int
) -> InferRequest:
    """The core request for a completion or chat completion."""
    inputs: dict[str, Tensor] = {"text_input": tensor(model, "text_input", [request.prompt])}

    def put(name: str, value: Any) -> None:
        if model.has_input(name):
            inputs[name] = tensor(model, name, value if isinstance(value, list) else [value])

    put("stream", request.stream)
    if model.echo_input is not None:
        put(model.echo_input, not request.echo)
    if model.convention == TRTLLM:
        put("max_tokens", max_tokens)
        if request.stop:
            put("stop_words", list(request.stop))
        for name in _TRTLLM_SAMPLING:
            if name in request.sampling:
                put(name, request.sampling[name])
    else:
        sampling = {**request.sampling, "max_tokens": max_tokens}
        put("sampling_parameters", orjson.dumps(sampling).decode("utf-8"))
    for name in _USAGE_SWITCHES:
        put(name, True)
    _check_required(model, inputs)
    return InferRequest(model.name, list(inputs.values()), model.version)


def embedding_inputs(model: ServedModel, text: str) -> InferRequest:
    """The core request for one input of an embeddings request."""
    inputs = {"text_input": tensor(model, "text_input", [text])}
    if model.has_input("return_num_input_tokens"):
        inputs["return_num_input_tokens"] = tensor(model, "return_num_input_tokens", [True])
    _check_required(model, inputs)
    return InferRequest(model.name, list(inputs.values()), model.version)
