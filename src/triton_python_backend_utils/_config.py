"""ModelConfig (the auto_complete_config helper) and the config/tensor lookup helpers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._request import InferenceRequest
    from ._response import InferenceResponse
    from ._tensor import Tensor

__all__ = [
    "ModelConfig",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "using_decoupled_model_transaction_policy",
]

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


class ModelConfig:
    """The model configuration handed to ``auto_complete_config``.

    Built from the config's JSON text (modelyard also accepts the dict). The helpers raise
    ValueError with Triton's texts when the model contradicts the configuration.
    """

    def __init__(self, model_config: str | bytes | dict[str, Any]) -> None:
        if isinstance(model_config, dict):
            self._model_config: dict[str, Any] = model_config
        else:
            self._model_config = json.loads(model_config)

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def as_dict(self) -> dict[str, Any]:
        """The configuration dict (the live object: changes to it are kept)."""
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function for model '{self._name()}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher unless another scheduler is configured (no-op if set)."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name()}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, _OUTPUT_PROPERTIES)

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        model = self._name()
        for prop in tensor:
            if prop not in allowed:
                listed = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{tensor['name']}' in auto-complete-config function for model "
                    f"'{model}' contains property other than {listed}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' is missing "
                "'name' property."
            )
        for prop in ("data_type", "dims"):
            if prop not in tensor:
                raise ValueError(
                    f"{kind} '{tensor['name']}' in auto-complete-config function for model "
                    f"'{model}' is missing '{prop}' property."
                )
        name = tensor["name"]
        existing_list: list[dict[str, Any]] = self._model_config.setdefault(kind, [])
        for existing in existing_list:
            if existing.get("name") != name:
                continue
            cfg_type = existing.get("data_type", "TYPE_INVALID")
            if cfg_type != "TYPE_INVALID" and cfg_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{cfg_type} for {kind} '{name}', model provides {tensor['data_type']}"
                )
            cfg_dims = existing.get("dims")
            if cfg_dims and cfg_dims != tensor["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims {cfg_dims}"
                )
            if (
                kind == "input"
                and "optional" in existing
                and "optional" in tensor
                and existing["optional"] != tensor["optional"]
            ):
                raise ValueError(
                    f"model '{model}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{existing['optional']}"
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if kind == "input" and "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        existing_list.append(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """E.g. ``{"decoupled": True}``; only the 'decoupled' property may be given."""
        model = self._name()
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{model}' contains property other than 'decoupled'."
                )
        policy: dict[str, Any] = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{model}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input Tensor called ``name``, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output Tensor called ``name``, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config's ``input`` entry called ``name``, or None."""
    for entry in model_config.get("input", ()):
        if entry["name"] == name:
            return entry  # type: ignore[no-any-return]
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The config's ``output`` entry called ``name``, or None."""
    for entry in model_config.get("output", ()):
        if entry["name"] == name:
            return entry  # type: ignore[no-any-return]
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """``model_config["model_transaction_policy"]["decoupled"]`` if the policy is present."""
    if "model_transaction_policy" in model_config:
        return model_config["model_transaction_policy"]["decoupled"]  # type: ignore[no-any-return]
    return False
