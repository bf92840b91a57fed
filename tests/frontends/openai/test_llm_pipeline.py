"""The example LLM pipeline (examples/llm_pipeline: tokenizer, a streaming generator, a
detokenizer, a decoupled BLS model tying them) over the OpenAI API, generate_stream and the
example's own client, in both execution modes. The generator continues a fixed story, so
every answer is known."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import openai
import pytest

from tests.conftest import Serving
from tests.frontends.openai.rawhttp import BOUND_S, OPENAI_FLAGS
from tests.helpers import MODES, ROOT
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(240)

EXAMPLE = ROOT / "examples" / "llm_pipeline"


@pytest.fixture(scope="module", params=MODES)
def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(
        EXAMPLE / "model_repository", *OPENAI_FLAGS, mode=request.param,
        endpoints=("http", "openai"),
    ) as srv:  # fmt: skip
        yield srv


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.openai_url, api_key="none", timeout=BOUND_S,
                       max_retries=0) as c:  # fmt: skip
        yield c


def test_only_the_pipeline_is_served(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == ["llm"]


def test_streamed_completion(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(
        model="llm", prompt="The fox", max_tokens=5, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == " jumps over the lazy dog"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (2, 5)


def test_the_story_ends_with_stop(client: openai.OpenAI) -> None:
    result = client.completions.create(model="llm", prompt="warm den", max_tokens=50, echo=True)
    assert result.choices[0].text == "warm den and falls asleep . the end ."
    assert result.choices[0].finish_reason == "stop"  # the generator reached [EOS]
    assert result.usage is not None and result.usage.completion_tokens == 7


async def test_async_streamed_chat_with_the_tokenizer_template(server: ServerProcess) -> None:
    async with openai.AsyncOpenAI(base_url=server.openai_url, api_key="none",
                                  timeout=BOUND_S, max_retries=0) as aclient:  # fmt: skip
        stream = await aclient.chat.completions.create(
            model="llm", messages=[{"role": "user", "content": "where does the bird sing"}],
            max_tokens=4, stream=True,
        )  # fmt: skip
        chunks = [c async for c in stream]
    # The template (tokenizer/tokenizer_config.json) ends the prompt with [EOS] and
    # <|assistant|>, and "sing", which the story lacks: it goes on from "bird".
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == " sings in the old"
    assert chunks[-1].choices[0].finish_reason == "length"


def test_generate_stream(server: ServerProcess) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.ports["http"], timeout=BOUND_S)
    body = {"text_input": "the river", "stream": True, "exclude_input_in_output": True,
            "sampling_parameters": json.dumps({"max_tokens": 3})}  # fmt: skip
    try:
        conn.request("POST", "/v2/models/llm/generate_stream", json.dumps(body))
        response = conn.getresponse()
        assert response.status == 200
        events = [json.loads(line[6:]) for line in response.read().split(b"\n")
                  if line.startswith(b"data: ")]  # fmt: skip
    finally:
        conn.close()
    assert [e["text_output"] for e in events] == [" and", " drinks", " the", ""]
    assert events[0]["num_input_tokens"] == 2
    assert events[-1]["finish_reason"] == "length"


def test_the_example_client(server: ServerProcess) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLE / "client.py"), "--openai-url", server.openai_url,
         "--http-url", server.http_url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        "completion: jumps over the lazy dog . the dog  [length]  usage: 2 in, 8 out" in run.stdout
    )
    assert "generate_stream: jumps over the lazy dog . the dog\n" in run.stdout
