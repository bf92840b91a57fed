"""LLM mode's start: check the model is served where asked and encode its requests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from modelyard.bench.args import Options
from modelyard.bench.llm_args import LlmOptions
from modelyard.bench.llm_sender import LlmSpec
from modelyard.bench.llm_wire import error_message, generate_stream_request, openai_request
from modelyard.bench.model import SetupError, fetch_model
from modelyard.bench.wire import HttpRequest


def llm_spec(opts: Options) -> LlmSpec:
    llm = opts.llm
    assert llm is not None
    if llm.openai:
        _check_openai_model(opts.url, opts.model, llm, opts.request_timeout_s)
        requests = tuple(
            openai_request(
                llm.endpoint, opts.model, p, llm.max_tokens, llm.extra_inputs, llm.api_key
            )
            for p in llm.prompts
        )
    else:
        requests = _generate_requests(opts, llm)
    return LlmSpec(
        protocol="http",
        url=opts.url,
        streaming=True,
        decoupled=True,
        http_requests=requests,
        grpc_requests=(),
        streams=(tuple(range(len(requests))),),
        timeout_s=opts.request_timeout_s,
        endpoint=llm.endpoint,
    )


def _generate_requests(opts: Options, llm: LlmOptions) -> tuple[HttpRequest, ...]:
    model = fetch_model("http", opts.url, opts.model, opts.model_version, opts.request_timeout_s)
    inputs = tuple(t.name for t in model.inputs)
    if "text_input" not in inputs and "text_input" not in llm.extra_inputs:
        raise SetupError(
            f"model '{opts.model}' has no 'text_input' input: generate_stream mode sends the "
            "prompt there (Triton's vLLM and TensorRT-LLM convention)"
        )
    return tuple(
        generate_stream_request(
            opts.model, opts.model_version, p, llm.max_tokens, inputs, llm.extra_inputs
        )
        for p in llm.prompts
    )


def _check_openai_model(url: str, model: str, llm: LlmOptions, timeout_s: float) -> None:
    """The model is listed by GET /v1/models (which also checks the port and the key)."""
    request = urllib.request.Request(f"http://{url}/v1/models")
    if llm.api_key:
        request.add_header("Authorization", f"Bearer {llm.api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            doc: Any = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise SetupError(
            f"cannot list the models at {url}/v1/models: HTTP {exc.code}: "
            f"{error_message(exc.read())}"
        ) from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise SetupError(
            f"cannot list the models at {url}/v1/models (is the OpenAI frontend on that port?): "
            f"{reason}"
        ) from None
    served = [m.get("id") for m in doc.get("data", []) if isinstance(m, dict)]
    if model not in served:
        raise SetupError(
            f"model '{model}' is not served at {url}/v1/models (served: {', '.join(map(str, served)) or 'none'})"
        )
