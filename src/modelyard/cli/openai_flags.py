"""`modelyard serve` flags for the OpenAI-compatible frontend (off unless ``--openai-port``
is given), with the names of Triton's OpenAI frontend; each value is checked as it is parsed
(a bad one: one line naming the flag, exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from modelyard.cli.values import positive_int
from modelyard.frontends.openai.options import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_PORT,
    OPENAI_GROUPS,
    parse_openai_restrictions,
)
from modelyard.frontends.openai.templates import TemplateError, from_folder
from modelyard.frontends.restricted import RestrictionError


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port number (0 picks a free one), got '{value}'"
        )
    return port


def _tokenizer(value: str) -> str:
    """A local folder whose chat template compiles (nothing is fetched from a hub)."""
    try:
        template = from_folder(value)
    except TemplateError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if template is None:
        raise argparse.ArgumentTypeError(
            f"'{value}' has no chat template (no chat_template.jinja, and no chat_template "
            "in tokenizer_config.json)"
        )
    return value


class _Restrict(argparse.Action):
    """``--openai-restricted-api APIS KEY VALUE``, repeatable; checked across repeats."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        given = [*getattr(namespace, self.dest, []), list(values or [])]
        try:
            parse_openai_restrictions(given)
        except RestrictionError as e:
            parser.error(f"argument {option_string}: {e}")
        setattr(namespace, self.dest, given)


def add_openai_flags(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--openai-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve the OpenAI-compatible API (/v1/completions, /v1/chat/completions, "
        f"/v1/embeddings, /v1/models) on this port; off unless given (Triton's "
        f"frontend uses {DEFAULT_PORT}; 0 picks a free one)",
    )
    s.add_argument(
        "--openai-address",
        default="0.0.0.0",
        help="address the OpenAI-compatible API binds",
    )
    s.add_argument(
        "--openai-api-key",
        default="",
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every /v1/ request (else 401)",
    )
    s.add_argument(
        "--openai-restricted-api",
        nargs=3,
        action=_Restrict,
        default=[],
        metavar=("APIS", "KEY", "VALUE"),
        help="restrict OpenAI API groups (comma-separated: "
        f"{', '.join(OPENAI_GROUPS)}) to requests carrying header KEY with VALUE "
        "(else 401); repeatable",
    )
    s.add_argument(
        "--tokenizer",
        type=_tokenizer,
        default=None,
        metavar="PATH",
        help="a local tokenizer folder whose chat template (chat_template.jinja or "
        "tokenizer_config.json) renders chats for models without a template of their own",
    )
    s.add_argument(
        "--default-max-tokens",
        type=positive_int,
        default=DEFAULT_MAX_TOKENS,
        metavar="N",
        help="max_tokens of an OpenAI request that does not say",
    )
