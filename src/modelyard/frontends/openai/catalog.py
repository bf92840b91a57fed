"""Which models the OpenAI API serves, under which names, and how requests map onto each.

A ready model is served when its (latest ready) version has a BYTES ``text_input`` input and
a BYTES ``text_output`` output (a generation model, Triton's vLLM-backend convention), or a
BYTES ``text_input`` input and a floating-point ``embedding`` output (an embedding model).
Its config's ``parameters`` may say more:

* ``openai_model_name``: the name clients use instead of the model's own;
* ``openai_expose``: ``false`` hides the model from the OpenAI API;
* ``chat_template``: a Jinja chat template (its text);
* ``tokenizer``: a tokenizer folder (relative to the model's folder, or absolute) whose
  ``chat_template.jinja`` or ``tokenizer_config.json`` holds the chat template.

A generation model declaring ``sampling_parameters`` gets them as one JSON object (vLLM's
convention); one declaring separate ``max_tokens``, ``temperature``, ... inputs gets those
(TensorRT-LLM's); ``stream``, ``exclude_input_in_output`` and the usage switches are sent
when declared.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelyard.core.validation import IOSpec, ModelSignature
from modelyard.frontends.openai.errors import SERVER_ERROR, OpenAIError, unknown_model
from modelyard.frontends.openai.templates import ChatTemplate, TemplateError, from_folder

if TYPE_CHECKING:
    from modelyard.core.api import InferenceServer
    from modelyard.core.model_version import ModelVersion

log = logging.getLogger("modelyard")

GENERATE = "generate"
EMBEDDING = "embedding"
VLLM = "vllm"
TRTLLM = "tensorrtllm"
# TensorRT-LLM's separate sampling inputs (the ones this frontend fills).
TRTLLM_INPUTS = frozenset(
    {"max_tokens", "temperature", "top_p", "top_k", "seed", "stop_words",
     "frequency_penalty", "presence_penalty", "repetition_penalty", "beam_width"}
)  # fmt: skip
_ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")
_FLOATS = ("FP16", "BF16", "FP32", "FP64")
_FALSE = ("false", "0", "no", "off")


@dataclass
class ServedModel:
    """One model as the OpenAI API serves it."""

    id: str  # the name clients use
    name: str  # the model's name in the repository
    version: str
    kind: str  # GENERATE or EMBEDDING
    convention: str  # VLLM or TRTLLM
    signature: ModelSignature
    decoupled: bool
    created: int
    echo_input: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    folder: Path | None = None
    template: ChatTemplate | None = None  # resolved on first use

    def has_input(self, name: str) -> bool:
        return name in self.signature.inputs

    def input_spec(self, name: str) -> IOSpec:
        return self.signature.inputs[name]


def _parameters(config: Any) -> dict[str, str]:
    return {str(k): str(v.string_value) for k, v in config.parameters.items()}


def describe(name: str, mv: ModelVersion, folder: Path | None) -> ServedModel | None:
    """How the OpenAI API serves ``mv``, or None when it does not."""
    params = _parameters(mv.config)
    if params.get("openai_expose", "").strip().lower() in _FALSE:
        return None
    sig = mv.signature
    text_in = sig.inputs.get("text_input")
    if text_in is None or text_in.datatype != "BYTES":
        return None
    text_out = sig.outputs.get("text_output")
    embedding = sig.outputs.get("embedding")
    if text_out is not None and text_out.datatype == "BYTES":
        kind = GENERATE
    elif embedding is not None and embedding.datatype in _FLOATS:
        kind = EMBEDDING
    else:
        return None
    convention = VLLM
    if "sampling_parameters" not in sig.inputs and TRTLLM_INPUTS & set(sig.inputs):
        convention = TRTLLM
    echo = next((n for n in _ECHO_INPUTS if n in sig.inputs), None)
    return ServedModel(
        id=params.get("openai_model_name", "").strip() or name,
        name=name,
        version=str(mv.version),
        kind=kind,
        convention=convention,
        signature=sig,
        decoupled=mv.decoupled,
        created=int(time.time()),
        echo_input=echo,
        parameters=params,
        folder=folder,
    )


class Catalog:
    """The served models, read from the core's registry on each call (models load and
    unload at any time); each version is described once."""

    def __init__(self, core: InferenceServer, default: ChatTemplate):
        self.core = core
        self.default = default
        self._seen: weakref.WeakKeyDictionary[ModelVersion, ServedModel | None] = (
            weakref.WeakKeyDictionary()
        )
        self._clashes: set[str] = set()

    def models(self) -> list[ServedModel]:
        served: dict[str, ServedModel] = {}
        registry = self.core.registry
        for name in sorted(registry.entries):
            entry = registry.entries[name]
            if entry.state != "READY" or not entry.versions:
                continue
            mv = entry.versions[max(entry.versions)]
            if mv not in self._seen:
                self._seen[mv] = describe(name, mv, registry.locations.get(name))
            model = self._seen[mv]
            if model is None:
                continue
            if model.id in served:
                if model.id not in self._clashes:
                    self._clashes.add(model.id)
                    log.warning(
                        "OpenAI API: models '%s' and '%s' are both named '%s'; serving '%s'",
                        served[model.id].name, name, model.id, served[model.id].name,
                    )  # fmt: skip
                continue
            served[model.id] = model
        return list(served.values())

    def find(self, model_id: str, kind: str) -> ServedModel:
        """The served model named ``model_id`` of ``kind``; 404 in OpenAI's shape if none."""
        for model in self.models():
            if model.id == model_id:
                if model.kind != kind:
                    what = "text generation" if kind == GENERATE else "embeddings"
                    raise OpenAIError(
                        400,
                        f"The model `{model_id}` does not support {what}.",
                        param="model",
                        code="model_not_supported",
                    )
                return model
        raise unknown_model(model_id)

    def template(self, model: ServedModel) -> ChatTemplate:
        """The model's chat template: its config's ``chat_template``, else its config's
        ``tokenizer`` folder's, else the server's (``--tokenizer``, or the default)."""
        if model.template is None:
            try:
                model.template = self._own_template(model) or self.default
            except TemplateError as e:
                raise OpenAIError(500, str(e), SERVER_ERROR) from None
        return model.template

    def _own_template(self, model: ServedModel) -> ChatTemplate | None:
        source = model.parameters.get("chat_template", "")
        if source.strip():
            template = ChatTemplate(source, f"model '{model.name}'")
            template.compile()
            return template
        folder = model.parameters.get("tokenizer", "").strip()
        if folder:
            path = Path(folder)
            if not path.is_absolute() and model.folder is not None:
                path = model.folder / path
            return from_folder(path)
        return None
