"""The OpenAI frontend over small test models, in both execution modes, with the official
``openai`` client (sync, async, streaming) and raw HTTP for the error cases.

The server runs with ``--tokenizer`` (a folder written here), an API key, and the metrics
group restricted. Test models (tests/models/oai_*): oai_echo answers JSON of what it got (the
mapping made visible), oai_stream streams words, oai_bls streams them through a decoupled
BLS call, oai_trtllm takes TensorRT-LLM's separate inputs, oai_embed embeds, oai_renamed and
oai_hidden carry the config parameters that rename and hide."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from tests.conftest import Serving
from tests.frontends.openai.rawhttp import BOUND_S, OPENAI_FLAGS, error_of, raw
from tests.helpers import MODES, wait_until
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(240)

KEY = "sekret"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODELS = ["oai_echo", "oai_stream", "oai_bls", "oai_trtllm", "oai_embed", "oai_renamed",
          "oai_hidden", "py_identity"]  # fmt: skip
SERVED = {"oai_echo", "oai_stream", "oai_bls", "oai_trtllm", "oai_embed", "acme/echo-llm"}
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}"
)


@pytest.fixture(scope="module", params=MODES)
def server(
    request: pytest.FixtureRequest, serving: Serving, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    tokenizer = tmp_path_factory.mktemp("tokenizer")
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": {"__type": "AddedToken", "content": "<s>"},
        "chat_template": TEMPLATE,
    }))  # fmt: skip
    with serving.server(
        None, *OPENAI_FLAGS, "--openai-api-key", KEY, "--tokenizer", str(tokenizer),
        "--openai-restricted-api", "metrics", "metrics-key", "metrics-value",
        "--http-max-input-size", "65536",
        models=MODELS, mode=request.param, endpoints=("http", "openai"),
    ) as srv:  # fmt: skip
        yield srv


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.openai_url, api_key=KEY, timeout=BOUND_S,
                       max_retries=0) as c:  # fmt: skip
        yield c


@pytest.fixture
def aclient(server: ServerProcess) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=server.openai_url, api_key=KEY, timeout=BOUND_S, max_retries=0
    )


def _echo(text: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(text)
    return doc


def test_models_lists_what_follows_the_convention(client: openai.OpenAI) -> None:
    models = client.models.list().data
    assert {m.id for m in models} == SERVED  # not oai_hidden, not py_identity
    assert all(m.object == "model" and m.owned_by == "modelyard" for m in models)
    renamed = client.models.retrieve("acme/echo-llm")  # a name with a slash
    assert renamed.id == "acme/echo-llm"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("oai_hidden")


def test_completion_maps_onto_vllm_inputs(client: openai.OpenAI) -> None:
    result = client.completions.create(
        model="oai_echo", prompt="hello there", max_tokens=7, temperature=0.5, top_p=0.9,
        seed=3, stop=["\x01"], extra_body={"top_k": 5},
    )  # fmt: skip
    choice = result.choices[0]
    got = _echo(choice.text)
    assert got == {
        "prompt": "hello there",
        "stream": False,
        "exclude_input_in_output": True,
        "sampling_parameters": {
            "temperature": 0.5, "top_p": 0.9, "seed": 3, "stop": ["\x01"], "top_k": 5,
            "max_tokens": 7,
        },
        "usage_asked": [True, True],
    }  # fmt: skip
    assert result.object == "text_completion" and result.model == "oai_echo"
    assert result.usage is not None
    assert result.usage.prompt_tokens == 2
    assert result.usage.completion_tokens == len(choice.text.split())
    assert choice.finish_reason == "length"  # the model reported max_tokens tokens or more


def test_echo_and_the_default_max_tokens(client: openai.OpenAI) -> None:
    got = _echo(client.completions.create(model="oai_echo", prompt="p", echo=True).choices[0].text)
    assert got["exclude_input_in_output"] is False
    assert got["sampling_parameters"] == {"max_tokens": 16}


def test_chat_renders_the_tokenizer_template(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="oai_echo",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
        max_completion_tokens=3,
    )
    got = _echo(result.choices[0].message.content or "")
    assert got["prompt"] == "<s>[SYSTEM] be brief\n[USER] hi\n[ASSISTANT]"
    assert got["sampling_parameters"] == {"max_tokens": 3}
    assert got["exclude_input_in_output"] is True
    assert result.object == "chat.completion"
    assert result.choices[0].message.role == "assistant"


def test_a_model_template_and_name_from_its_config(client: openai.OpenAI) -> None:
    result = client.chat.completions.create(
        model="acme/echo-llm",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    )
    assert result.model == "acme/echo-llm"
    got = _echo(result.choices[0].message.content or "")
    assert got["prompt"] == "<system>be brief<user>hi<assistant>"


def test_streamed_completion_chunks_usage_and_length(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(
        model="oai_stream", prompt="one two three", max_tokens=4, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert texts == ["w1", " w2", " w3", " w4"]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 4)
    assert len({c.id for c in chunks}) == 1


async def test_async_streamed_chat(aclient: openai.AsyncOpenAI) -> None:
    async with aclient:
        stream = await aclient.chat.completions.create(
            model="oai_stream", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
            stream=True, extra_body={"finish_reason": "content_filter"},
        )  # fmt: skip
        chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "w1 w2 w3"
    assert chunks[-1].choices[0].finish_reason == "content_filter"  # the model's own
    assert all(c.object == "chat.completion.chunk" for c in chunks)


async def test_async_completion(aclient: openai.AsyncOpenAI) -> None:
    async with aclient:
        result = await aclient.completions.create(model="oai_echo", prompt="say:done")
    assert result.choices[0].text == "done"
    assert result.choices[0].finish_reason == "stop"


def test_a_decoupled_model_answers_whole_without_stream(client: openai.OpenAI) -> None:
    result = client.completions.create(model="oai_stream", prompt="a b", max_tokens=3)
    assert result.choices[0].text == "w1 w2 w3"
    assert result.usage is not None and result.usage.completion_tokens == 3


def test_stop_strings_end_the_text(client: openai.OpenAI) -> None:
    said = client.completions.create(model="oai_echo", prompt="say:one two STOP three",
                                     stop="STOP")  # fmt: skip
    assert said.choices[0].text == "one two "
    assert said.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(
        model="oai_stream", prompt="x", max_tokens=6, stop=[" w3"], stream=True
    ))  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks) == "w1 w2"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_tensorrt_llm_style_inputs(client: openai.OpenAI) -> None:
    result = client.completions.create(
        model="oai_trtllm", prompt="hi", max_tokens=5, temperature=0.25, top_p=0.5, seed=9,
        stop=["\x01"],
    )  # fmt: skip
    got = _echo(result.choices[0].text)
    assert got == {
        "text_input": {"shape": [1, 1], "value": "hi"},
        "max_tokens": {"shape": [1, 1], "value": 5},
        "stream": {"shape": [1, 1], "value": False},
        "temperature": {"shape": [1, 1], "value": 0.25},
        "top_p": {"shape": [1, 1], "value": 0.5},
        "seed": {"shape": [1, 1], "value": 9},
        "stop_words": {"shape": [1, 1], "value": ["\x01"]},
        "exclude_input_in_output": {"shape": [1, 1], "value": True},
    }
    assert result.usage is None  # the model reports no token counts


def _embedding(text: str) -> list[float]:
    data = text.encode()
    return [len(data), sum(data) % 1000, data[0], data[-1], len(text.split()), 0.5, -1.0, 2.25]


def test_embeddings(client: openai.OpenAI, server: ServerProcess) -> None:
    result = client.embeddings.create(model="oai_embed", input=["a b", "xyz"])  # base64
    assert [d.embedding for d in result.data] == [_embedding("a b"), _embedding("xyz")]
    assert [d.index for d in result.data] == [0, 1]
    assert result.usage.prompt_tokens == 3
    status, _, body = raw(server, "POST", "/v1/embeddings", headers=AUTH, body={
        "model": "oai_embed", "input": "hello", "encoding_format": "float"})  # fmt: skip
    assert status == 200
    assert json.loads(body)["data"][0]["embedding"] == _embedding("hello")
    status, _, body = raw(server, "POST", "/v1/embeddings", headers=AUTH, body={
        "model": "oai_embed", "input": "hello", "encoding_format": "base64"})  # fmt: skip
    import base64

    vector = np.frombuffer(base64.b64decode(json.loads(body)["data"][0]["embedding"]), "<f4")
    assert vector.tolist() == _embedding("hello")


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "fragment"),
    [
        ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, "model", "`nope` does not"),
        ("/v1/completions", b"{not json", 400, None, "could not parse the JSON"),
        ("/v1/completions", {"model": "oai_echo"}, 400, "prompt", "Missing required"),
        ("/v1/chat/completions", {"model": "oai_echo"}, 400, "messages", "Missing required"),
        ("/v1/chat/completions", {"model": "oai_echo", "messages": []}, 400, "messages",
         "empty array"),
        ("/v1/completions", {"model": "oai_echo", "prompt": "x", "n": 2}, 400, "n",
         "only single choice"),
        ("/v1/completions", {"model": "oai_echo", "prompt": "x", "temperature": "hot"}, 400,
         "temperature", "Invalid type for 'temperature'"),
        ("/v1/completions", {"model": "oai_echo", "prompt": "x", "top_p": 3}, 400, "top_p",
         "above maximum"),
        ("/v1/completions", {"model": "oai_echo", "prompt": [1, 2]}, 400, "prompt",
         "token ids"),
        ("/v1/completions", {"model": "oai_embed", "prompt": "x"}, 400, "model",
         "does not support text generation"),
        ("/v1/embeddings", {"model": "oai_echo", "input": "x"}, 400, "model",
         "does not support embeddings"),
        ("/v1/embeddings", {"model": "oai_embed", "input": [3]}, 400, "input", "token ids"),
    ],
)  # fmt: skip
def test_bad_requests_get_openai_errors(
    server: ServerProcess, path: str, body: Any, status: int, param: str | None, fragment: str
) -> None:
    got_status, headers, got = raw(server, "POST", path, body, AUTH)
    assert got_status == status, got
    assert headers["content-type"] == "application/json"
    error = error_of(got)
    assert fragment in error["message"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"


def test_a_body_past_the_input_size_limit(server: ServerProcess) -> None:
    body = {"model": "oai_echo", "prompt": "x" * 70000}
    status, _, got = raw(server, "POST", "/v1/completions", body, AUTH)
    assert status == 413 and "exceeds the maximum allowed 65536 bytes" in error_of(got)["message"]


def test_model_errors(server: ServerProcess, client: openai.OpenAI) -> None:
    for stream in (False, True):
        status, _, body = raw(
            server, "POST", "/v1/completions",
            {"model": "oai_echo", "prompt": "fail:boom", "stream": stream}, AUTH,
        )  # fmt: skip
        assert status == 500
        error = error_of(body)
        assert "boom" in error["message"] and error["type"] == "server_error"
    with pytest.raises(openai.InternalServerError, match="boom"):
        client.completions.create(model="oai_echo", prompt="fail:boom")
    assert client.completions.create(model="oai_echo", prompt="say:ok").choices[0].text == "ok"


def test_api_key_routes_and_methods(server: ServerProcess) -> None:
    status, _, body = raw(server, "GET", "/v1/models")
    assert status == 401 and "didn't provide an API key" in error_of(body)["message"]
    status, _, body = raw(server, "GET", "/v1/models", headers={"Authorization": "Bearer no"})
    assert status == 401 and error_of(body)["code"] == "invalid_api_key"
    bad = openai.OpenAI(base_url=server.openai_url, api_key="wrong", max_retries=0)
    with bad, pytest.raises(openai.AuthenticationError):
        bad.models.list()
    status, _, body = raw(server, "GET", "/v1/nothing", headers=AUTH)
    assert status == 404 and "Invalid URL (GET /v1/nothing)" in error_of(body)["message"]
    status, _, body = raw(server, "GET", "/v1/completions", headers=AUTH)
    assert status == 405
    assert raw(server, "GET", "/health/ready")[0] == 200  # no key outside /v1/
    assert raw(server, "GET", "/health")[0] == 200


def test_restricted_metrics(server: ServerProcess, client: openai.OpenAI) -> None:
    client.completions.create(model="oai_echo", prompt="say:counted")
    status, _, body = raw(server, "GET", "/metrics")
    assert status == 401
    error = error_of(body)
    assert error["type"] == "authentication_error" and "'metrics-key'" in error["message"]
    status, headers, body = raw(server, "GET", "/metrics", headers={"metrics-key": "metrics-value"})
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'nv_inference_request_success{model="oai_echo",version="1"}' in body.decode()


def test_disconnect_cancels_the_request_and_its_bls_call(
    server: ServerProcess, tmp_path: Path
) -> None:
    marker = tmp_path / "cancelled"
    body = json.dumps({"model": "oai_bls", "prompt": "go", "stream": True, "max_tokens": 10,
                       "marker": str(marker)}).encode()  # fmt: skip
    sock = socket.create_connection(("127.0.0.1", server.ports["openai"]), timeout=BOUND_S)
    try:
        head = (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n")  # fmt: skip
        sock.sendall(head % (KEY.encode(), len(body)) + body)
        # In-process, a decoupled BLS call awaited on the loop hands its responses over only
        # once it ends: wait for the model to run, not for chunks.
        started = Path(f"{marker}.started")
        wait_until(started.exists, BOUND_S, what="oai_stream to start")
    finally:
        sock.close()
    # oai_stream (called by oai_bls) streams until it sees itself cancelled.
    wait_until(marker.exists, BOUND_S, what="oai_stream to see the cancellation")
    wait_until(lambda: marker.read_text() == "cancelled", BOUND_S, what=marker.read_text)
