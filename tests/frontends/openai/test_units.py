"""The OpenAI frontend's pure parts: stop strings, chat templates, request checks, restricted
groups, and the serve flags' errors (one line naming the flag, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modelyard.cli.main import build_parser
from modelyard.frontends.openai.errors import OpenAIError
from modelyard.frontends.openai.options import parse_openai_restrictions
from modelyard.frontends.openai.requests import chat_request, completion_request
from modelyard.frontends.openai.results import StopMatcher
from modelyard.frontends.openai.templates import (
    RenderError,
    TemplateError,
    default_template,
    from_folder,
)
from modelyard.frontends.restricted import RestrictionError


def _feed(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    out = "".join(matcher.feed(p) for p in pieces)
    return out + matcher.flush(), matcher.stopped


def test_stop_strings_across_pieces() -> None:
    assert _feed(["END"], ["one E", "N", "D two"]) == ("one ", True)
    assert _feed(["END"], ["one EN", "x"]) == ("one ENx", False)
    assert _feed(["a", "bc"], ["xxb", "c a"]) == ("xx", True)
    assert _feed([], ["free"]) == ("free", False)


def test_the_default_template() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert default_template().render(messages) == "system: be brief\nuser: hi\nassistant:"
    assert default_template().render(messages, add_generation_prompt=False) == (
        "system: be brief\nuser: hi\n"
    )


def test_a_tokenizer_folder(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": {"content": "</s>", "__type": "AddedToken"},
        "chat_template": [
            {"name": "tool_use", "template": "tools"},
            {"name": "default", "template": "{% for m in messages %}{{ m.content }}{{ eos_token }}"
             "{% endfor %}"},
        ],
    }))  # fmt: skip
    template = from_folder(tmp_path)
    assert template is not None
    assert template.render([{"role": "user", "content": "a"}]) == "a</s>"
    (tmp_path / "chat_template.jinja").write_text("{{ messages | length }}")  # preferred
    template = from_folder(tmp_path)
    assert template is not None and template.render([{"role": "u", "content": ""}]) == "1"


def test_template_errors(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="does not exist"):
        from_folder(tmp_path / "missing")
    (tmp_path / "chat_template.jinja").write_text("{% for %}")
    with pytest.raises(TemplateError, match=r"chat_template\.jinja"):
        from_folder(tmp_path)
    (tmp_path / "chat_template.jinja").write_text(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}"
    )
    template = from_folder(tmp_path)
    assert template is not None
    with pytest.raises(RenderError, match="user first"):
        template.render([{"role": "system", "content": ""}])
    (tmp_path / "empty").mkdir()
    assert from_folder(tmp_path / "empty") is None  # a folder without a template


def test_what_goes_into_sampling_parameters() -> None:
    request = completion_request({
        "model": "m", "prompt": ["p"], "max_tokens": 4, "stream": True, "temperature": 0,
        "user": "u", "top_k": None, "min_p": 0.1, "stop": "x",
        "stream_options": {"include_usage": True},
    })  # fmt: skip
    assert request.prompt == "p" and request.max_tokens == 4 and request.include_usage
    assert request.sampling == {"temperature": 0, "min_p": 0.1, "stop": ["x"]}
    chat = chat_request({
        "model": "m", "max_tokens": 9, "max_completion_tokens": 3,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                  {"type": "text", "text": "b"}]}],
    })  # fmt: skip
    assert chat.max_tokens == 3 and chat.messages == [{"role": "user", "content": "a\nb"}]


@pytest.mark.parametrize(
    ("doc", "param"),
    [
        ({"prompt": "x"}, "model"),
        ({"model": "m", "prompt": "x", "stream_options": {}}, "stream_options"),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "prompt": "x", "logit_bias": {"1": 2}}, "logit_bias"),
        ({"model": "m", "prompt": "x", "suffix": "y"}, "suffix"),
        ({"model": "m", "prompt": "x", "stop": [1]}, "stop"),
        ({"model": "m", "prompt": ["a", "b"]}, "prompt"),
    ],
)
def test_refused_completions(doc: dict[str, object], param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        completion_request(doc)
    assert info.value.status == 400 and info.value.param == param


def test_restricted_groups() -> None:
    parsed = parse_openai_restrictions([["inference,metrics", "k", "v"]])
    assert set(parsed.groups) == {"inference", "metrics"}
    with pytest.raises(RestrictionError, match="Unknown API 'shared-memory'"):
        parse_openai_restrictions([["shared-memory", "k", "v"]])
    with pytest.raises(RestrictionError, match="multiple config groups"):
        parse_openai_restrictions([["health", "k", "v"], ["health", "a", "b"]])


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--openai-port", "70000"], "argument --openai-port: expected a port number"),
        (["--tokenizer", "/no/such/folder"], "argument --tokenizer: tokenizer folder"),
        (["--openai-restricted-api", "nope", "k", "v"], "argument --openai-restricted-api: "
         "Unknown API 'nope'"),
        (["--default-max-tokens", "0"], "argument --default-max-tokens: expected a positive"),
    ],
)  # fmt: skip
def test_bad_flags(flags: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["serve", "repo", *flags])
    assert info.value.code == 2
    assert fragment in capsys.readouterr().err
