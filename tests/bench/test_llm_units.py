"""The pure parts of bench's LLM mode: flags, request bodies, reading events, the samples a
stream gives and the record's LLM fields."""

from __future__ import annotations

import argparse
import json
from array import array
from pathlib import Path

import pytest

from modelyard.bench.args import UsageError, add_parser, options_from
from modelyard.bench.llm_report import llm_fields
from modelyard.bench.llm_sender import Streamed, TokenSamples
from modelyard.bench.llm_wire import (
    EventError,
    Piece,
    error_message,
    generate_stream_request,
    openai_request,
    read_generate_event,
    read_openai_event,
)
from modelyard.bench.load import WorkerResult

VLLM_INPUTS = ("text_input", "stream", "sampling_parameters", "exclude_input_in_output",
               "return_num_input_tokens", "return_num_output_tokens")  # fmt: skip


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", "llm", *argv])


def test_flags_and_defaults(tmp_path: Path) -> None:
    opts = options_from(parse("--endpoint", "openai-chat"))
    assert opts.llm is not None and opts.llm.openai
    assert opts.url == "localhost:9000"  # the OpenAI port's default
    assert opts.llm.prompts == ("Once upon a time",) and opts.llm.max_tokens == 16
    opts = options_from(parse("--endpoint", "generate_stream", "--prompt", "a", "--prompt", "b",
                              "--max-tokens", "3", "--extra-inputs", "temperature:0.5",
                              "--extra-inputs", "tag:x:y"))  # fmt: skip
    assert opts.url == "localhost:8000" and opts.llm is not None
    assert opts.llm.prompts == ("a", "b") and opts.llm.max_tokens == 3
    assert opts.llm.extra_inputs == {"temperature": 0.5, "tag": "x:y"}
    assert options_from(parse()).llm is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt", "x"], "--prompt needs --endpoint (LLM mode)"),
        (["--max-tokens", "3"], "--max-tokens needs --endpoint (LLM mode)"),
        (["--endpoint", "openai-chat", "-i", "grpc"], "--endpoint streams over HTTP"),
        (["--endpoint", "openai-chat", "-b", "2"], "-b/--batch-size does not apply to --endpoint"),
        (["--endpoint", "generate_stream", "--max-tokens", "0"], "--max-tokens must be at least 1"),
        (["--endpoint", "generate_stream", "--api-key", "k"], "--api-key is for the OpenAI"),
        (["--endpoint", "openai-chat", "--extra-inputs", "novalue"], "--extra-inputs expects"),
        (["--endpoint", "openai-chat", "--prompt", "a", "--prompts-file", "f"], "not both"),
    ],
)
def test_bad_flags(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        options_from(parse(*argv))


def test_prompts_file(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"text": "one"}\n\n  two words\n{"text": "{three}"}\n')
    opts = options_from(parse("--endpoint", "openai-chat", "--prompts-file", str(path)))
    assert opts.llm is not None and opts.llm.prompts == ("one", "  two words", "{three}")
    path.write_text('{"prompt": "x"}\n')
    with pytest.raises(UsageError, match="line 1 is a JSON object without a string 'text'"):
        options_from(parse("--endpoint", "openai-chat", "--prompts-file", str(path)))
    path.write_text("\n\n")
    with pytest.raises(UsageError, match="no prompt in it"):
        options_from(parse("--endpoint", "openai-chat", "--prompts-file", str(path)))
    with pytest.raises(UsageError, match="cannot read it"):
        options_from(parse("--endpoint", "openai-chat", "--prompts-file", str(tmp_path / "no")))


def test_generate_stream_bodies_follow_the_model() -> None:
    vllm = generate_stream_request("m/x", "2", "hi", 7, VLLM_INPUTS, {"temperature": {"a": 1}})
    assert vllm.path == "/v2/models/m%2Fx/versions/2/generate_stream"
    assert json.loads(vllm.body) == {
        "text_input": "hi", "stream": True, "exclude_input_in_output": True,
        "sampling_parameters": '{"max_tokens": 7}', "return_num_output_tokens": True,
        "temperature": '{"a": 1}',  # an object goes to a BYTES input as its JSON text
    }  # fmt: skip
    trtllm = generate_stream_request("m", "", "hi", 7, ("text_input", "max_tokens"), {})
    assert trtllm.path == "/v2/models/m/generate_stream"
    assert json.loads(trtllm.body) == {"text_input": "hi", "max_tokens": 7}


def test_openai_bodies() -> None:
    chat = openai_request("openai-chat", "llm", "hi", 4, {"temperature": 0}, "k")
    assert chat.path == "/v1/chat/completions"
    assert chat.headers["Authorization"] == "Bearer k"
    assert json.loads(chat.body) == {
        "model": "llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "stream": True, "stream_options": {"include_usage": True}, "temperature": 0,
    }  # fmt: skip
    completion = openai_request("openai-completions", "llm", "hi", 4, {}, None)
    assert completion.path == "/v1/completions" and "Authorization" not in completion.headers
    assert json.loads(completion.body)["prompt"] == "hi"


def test_reading_generate_stream_events() -> None:
    assert read_generate_event(b'{"text_output": " fox", "num_output_tokens": 1}') == Piece(1)
    assert read_generate_event(b'{"text_output": "The fox", "num_output_tokens": [0]}') == Piece(0)
    assert read_generate_event(b'{"text_output": " a b c", "num_output_tokens": 3}') == Piece(3)
    assert read_generate_event(b'{"text_output": " fox"}') == Piece(1)  # no count: one token
    assert read_generate_event(b'{"text_output": ""}') == Piece(0)
    assert read_generate_event(b'{"text_output": ["a", "b"]}') == Piece(1)
    with pytest.raises(EventError, match="boom"):
        read_generate_event(b'{"error": "boom"}')
    with pytest.raises(EventError, match="not JSON"):
        read_generate_event(b"{nope")


def test_reading_openai_events() -> None:
    role = b'{"choices": [{"delta": {"role": "assistant", "content": ""}}]}'
    assert read_openai_event(role, chat=True) == Piece(0)
    token = b'{"choices": [{"delta": {"content": " fox"}, "finish_reason": null}]}'
    assert read_openai_event(token, chat=True) == Piece(1)
    assert read_openai_event(b'{"choices": [{"text": " fox"}]}', chat=False) == Piece(1)
    usage = b'{"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 9}}'
    assert read_openai_event(usage, chat=False) == Piece(0, usage_tokens=9)
    assert read_openai_event(b"[DONE]", chat=True) == Piece(done=True)
    with pytest.raises(EventError, match=r"^bad model$"):
        read_openai_event(b'{"error": {"message": "bad model", "type": "x"}}', chat=False)


def test_error_messages() -> None:
    assert error_message(b'{"error": "Request for unknown model"}') == "Request for unknown model"
    assert error_message(b'{"error": {"message": "no key"}}') == "no key"
    assert error_message(b"<html>") == "<html>"


def test_samples_of_a_stream() -> None:
    samples = TokenSamples()
    # sent at 100; tokens at 110 (1), 130 (1), 160 (3: the gap counts a third for each)
    samples.add(100, Streamed(3, 170, [110, 130, 160], [1, 1, 3], 5))
    samples.add(200, Streamed(0, 260, [], [], 0))  # answered with no token
    samples.add(300, Streamed(1, 320, [310], [1], 1))
    assert list(samples.ttft_ns) == [10, 10]
    assert list(samples.itl_ns) == [20, 10]
    assert list(samples.output_tokens) == [5, 0, 1]
    assert list(samples.per_user) == pytest.approx([4 * 1e9 / 50])  # two tokens or more only
    assert samples.without_tokens == 1


def test_llm_fields_pool_the_workers() -> None:
    def worker(ttft_us: list[int], itl_us: list[int], osl: list[int]) -> WorkerResult:
        samples = TokenSamples(
            array("q", [t * 1000 for t in ttft_us]), array("q", [t * 1000 for t in itl_us]),
            array("q", osl), array("d", [100.0] * len(osl)),
        )  # fmt: skip
        return WorkerResult(tokens=samples)

    fields = llm_fields(
        [worker([1, 3], [2, 2], [4, 6]), worker([2], [4], [5]), WorkerResult()], 2.0
    )
    assert fields["output_tokens"] == 15 and fields["output_token_throughput"] == 7.5
    assert (fields["ttft_min_us"], fields["ttft_p50_us"], fields["ttft_max_us"]) == (1, 2, 3)
    assert fields["ttft_avg_us"] == 2 and fields["itl_p50_us"] == 2 and fields["itl_max_us"] == 4
    assert fields["output_sequence_length_avg"] == 5.0
    assert fields["output_sequence_length_p50"] == 5.0
    assert fields["output_token_throughput_per_user_avg"] == 100.0
    assert fields["requests_with_tokens"] == 3 and fields["requests_without_tokens"] == 0
    empty = llm_fields([WorkerResult(tokens=TokenSamples())], 1.0)
    assert empty["output_tokens"] == 0 and empty["ttft_p50_us"] is None
    assert empty["output_sequence_length_avg"] is None
