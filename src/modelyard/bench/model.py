"""What bench needs to know about the model, read from the server's metadata and config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class SetupError(Exception):
    """The server or model cannot be benchmarked as asked; reported as one line, exit code 2."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    dims: tuple[int, ...]  # without the batch dim; -1 where variable
    optional: bool = False


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[str, ...]
    max_batch_size: int
    decoupled: bool
    sequence: bool


def _dims(shape: Any) -> tuple[int, ...]:
    # gRPC's JSON mapping writes int64 dims as strings
    return tuple(int(d) for d in shape)


def parse_model(metadata: dict[str, Any], config: dict[str, Any]) -> ModelInfo:
    """Metadata and config as the HTTP API returns them (gRPC's, converted to JSON, after
    unwrapping ``config``): dims come from metadata, batching and decoupling from config."""
    max_batch = int(config.get("max_batch_size", 0))
    optional = {i["name"] for i in config.get("input", []) if i.get("optional")}
    inputs = []
    for t in metadata.get("inputs", []):
        dims = _dims(t.get("shape", []))
        if max_batch > 0:
            dims = dims[1:]  # metadata shows the batch dim as a leading -1
        inputs.append(TensorSpec(t["name"], t["datatype"], dims, t["name"] in optional))
    versions = metadata.get("versions") or [""]
    return ModelInfo(
        name=metadata.get("name", ""),
        version=str(versions[-1]),
        inputs=tuple(inputs),
        outputs=tuple(o["name"] for o in metadata.get("outputs", [])),
        max_batch_size=max_batch,
        decoupled=bool(config.get("model_transaction_policy", {}).get("decoupled", False)),
        sequence="sequence_batching" in config,
    )


def fetch_model(protocol: str, url: str, model: str, version: str, timeout_s: float) -> ModelInfo:
    """Read the model's metadata and config with the sync tritonclient of ``protocol``."""
    try:
        if protocol == "http":
            metadata, config = _fetch_http(url, model, version, timeout_s)
        else:
            metadata, config = _fetch_grpc(url, model, version, timeout_s)
    except SetupError:
        raise
    except Exception as exc:
        what = f"model '{model}'" + (f" version {version}" if version else "")
        raise SetupError(
            f"cannot read {what} from {url} over {protocol}: {_message(exc)}"
        ) from None
    return parse_model(metadata, config)


def _message(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and not str(exc):
        text = f"{type(exc).__name__} (is the server running?)"
    return text


def _fetch_http(url: str, model: str, version: str, timeout_s: float) -> tuple[dict[str, Any], ...]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(
        url, connection_timeout=timeout_s, network_timeout=timeout_s
    )
    try:
        metadata = client.get_model_metadata(model, version)
        config = client.get_model_config(model, version)
        if not client.is_model_ready(model, version):
            raise SetupError(f"model '{model}' is not ready on {url}")
    finally:
        client.close()
    return metadata, config


def _fetch_grpc(url: str, model: str, version: str, timeout_s: float) -> tuple[dict[str, Any], ...]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        metadata = client.get_model_metadata(model, version, as_json=True, client_timeout=timeout_s)
        config = client.get_model_config(model, version, as_json=True, client_timeout=timeout_s)
        if not client.is_model_ready(model, version, client_timeout=timeout_s):
            raise SetupError(f"model '{model}' is not ready on {url}")
    finally:
        client.close()
    return metadata, config.get("config", {})
