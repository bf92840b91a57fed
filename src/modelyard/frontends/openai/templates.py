"""Chat templates: Jinja, rendered as Hugging Face tokenizers render theirs (sandboxed,
``trim_blocks`` and ``lstrip_blocks``, ``raise_exception``, ``strftime_now``, the special
tokens as variables), read from a local tokenizer folder (``chat_template.jinja`` or
``tokenizer_config.json``) or a model config's ``chat_template`` parameter. Nothing is
fetched from a hub. Without either, ``DEFAULT_TEMPLATE``: one ``role: content`` line per
message, then ``assistant:`` when a generation prompt is asked for."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

DEFAULT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
_SPECIAL_TOKENS = (
    "bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token",
)  # fmt: skip


class TemplateError(ValueError):
    """A template that cannot be read or compiled (the message says where and why)."""


class RenderError(ValueError):
    """The template refused the conversation (its ``raise_exception``) or failed on it."""


@dataclass
class ChatTemplate:
    """A compiled template and the special tokens it is rendered with."""

    source: str
    origin: str  # where it came from, for messages: a path, a model, "default"
    tokens: dict[str, str] = field(default_factory=dict)
    _compiled: Any = None

    def compile(self) -> None:
        """Compile now (TemplateError naming ``origin``): a broken template fails where it
        is configured, not on a client's request."""
        if self._compiled is None:
            env = _environment()
            try:
                self._compiled = env.from_string(self.source)
            except Exception as e:  # jinja2.TemplateSyntaxError, or anything it raises
                raise TemplateError(f"chat template of {self.origin}: {e}") from None

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> str:
        self.compile()
        variables: dict[str, Any] = {**self.tokens, **(extra or {})}
        variables["messages"] = messages
        variables["add_generation_prompt"] = add_generation_prompt
        try:
            return str(self._compiled.render(**variables))
        except Exception as e:
            raise RenderError(f"chat template of {self.origin}: {e}") from None


def _raise_exception(message: str) -> None:
    raise RenderError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _environment() -> Any:
    try:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # the 'openai' extra
        raise TemplateError(
            f"chat templates need jinja2 ({e}): pip install 'modelyard[openai]'"
        ) from None
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def default_template() -> ChatTemplate:
    return ChatTemplate(DEFAULT_TEMPLATE, "the default template")


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])  # an AddedToken as tokenizer_config.json writes it
    return None


def from_folder(folder: Path | str) -> ChatTemplate | None:
    """The template of a local tokenizer folder, with its special tokens; None when it has
    none. TemplateError when the folder or its files cannot be read."""
    path = Path(folder)
    if not path.is_dir():
        raise TemplateError(f"tokenizer folder '{folder}' does not exist or is not a folder")
    config: dict[str, Any] = {}
    config_file = path / "tokenizer_config.json"
    if config_file.is_file():
        try:
            loaded = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise TemplateError(f"cannot read '{config_file}': {e}") from None
        if not isinstance(loaded, dict):
            raise TemplateError(f"'{config_file}' does not hold a JSON object")
        config = loaded
    tokens = {name: text for name in _SPECIAL_TOKENS if (text := _token_text(config.get(name)))}
    jinja_file = path / "chat_template.jinja"  # newer tokenizers keep it in a file of its own
    if jinja_file.is_file():
        try:
            source = jinja_file.read_text(encoding="utf-8")
        except OSError as e:
            raise TemplateError(f"cannot read '{jinja_file}': {e}") from None
        template = ChatTemplate(source, str(jinja_file), tokens)
    else:
        source_value = _pick(config.get("chat_template"))
        if source_value is None:
            return None
        template = ChatTemplate(source_value, str(config_file), tokens)
    template.compile()
    return template


def _pick(value: Any) -> str | None:
    """``chat_template`` is a string, or a list of named templates (the "default" one)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        chosen = named.get("default")
        return chosen if isinstance(chosen, str) else None
    return None
