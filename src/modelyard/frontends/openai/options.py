"""The OpenAI frontend's settings (cli/openai_flags.py declares the flags and checks them as
they are parsed; ``modelyard.server_config`` reads them) and its restricted API groups, as
Triton's OpenAI frontend names them (``--openai-restricted-api``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from modelyard.frontends.restricted import (
    HEALTH,
    INFERENCE,
    MODEL_REPOSITORY,
    Restriction,
    RestrictionError,
    Restrictions,
)

METRICS = "metrics"
# Triton's OpenAI frontend's groups: inference (completions, chat, embeddings),
# model-repository (the model list), metrics, health.
OPENAI_GROUPS = (INFERENCE, MODEL_REPOSITORY, METRICS, HEALTH)
DEFAULT_PORT = 9000  # Triton's OpenAI frontend's
DEFAULT_MAX_TOKENS = 16  # Triton's OpenAI frontend's --default-max-tokens


@dataclass(frozen=True)
class OpenAIOptions:
    port: int = DEFAULT_PORT
    address: str = "0.0.0.0"
    api_key: str = ""  # "" = no key asked
    tokenizer: str = ""  # a local tokenizer folder: the default chat template
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    restrictions: Restrictions = field(default_factory=Restrictions)


def parse_openai_restrictions(values: Iterable[Iterable[str]]) -> Restrictions:
    """``--openai-restricted-api APIS KEY VALUE`` values (APIS comma-separated). Raises
    RestrictionError with the messages of Triton's OpenAI frontend."""
    restrictions = Restrictions()
    for apis, header, value in (tuple(v) for v in values):
        for api in apis.split(","):
            if api not in OPENAI_GROUPS:
                raise RestrictionError(
                    f"Unknown API '{api}'. Available APIs: {list(OPENAI_GROUPS)}"
                )
            if api in restrictions.groups:
                raise RestrictionError(
                    f"restricted api '{api}' can not be specified in multiple config groups"
                )
            restrictions.groups[api] = Restriction(header, value)
    return restrictions
