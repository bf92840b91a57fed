"""The server's options (``modelyard serve``'s flags, for the core) and Triton's version
strings."""

from __future__ import annotations

from dataclasses import dataclass, field

from modelyard.backends.loader import LoadOptions
from modelyard.errors import InvalidArgument
from modelyard.scheduling.rate_limiter import RateLimitSettings
from modelyard.serving.metrics_settings import MetricsSettings
from modelyard.tracing.config import TraceConfig

# The extensions server metadata lists, in Triton's order (system_shared_memory only where
# client shared memory is allowed).
EXTENSIONS = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


@dataclass(frozen=True)
class ServerOptions:
    repositories: list[str] = field(default_factory=list)
    control_mode: str = "none"  # none | explicit | poll
    # --model-namespacing: each repository a namespace, one name may be a model in several
    namespacing: bool = False
    load_models: list[str] = field(default_factory=list)
    server_id: str = "triton"
    strict_readiness: bool = True
    exit_on_error: bool = False
    exit_timeout: float = 30.0
    load: LoadOptions = field(default_factory=LoadOptions)
    poll_secs: float = 15.0  # poll mode: seconds between repository scans
    load_threads: int = 4  # models loading at once (--model-load-thread-count)
    allow_client_shm: bool = True  # both shared-memory extensions (--allow-client-shm)
    cache_bytes: int = 0  # local response cache size (--cache-config local,size=N); 0 = none
    trace: TraceConfig = field(default_factory=TraceConfig)  # --trace-config
    # --allow-metrics, --allow-*-metrics, --metrics-interval-ms, --metrics-config
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    # --rate-limit, --rate-limit-resource
    rate_limit: RateLimitSettings = field(default_factory=RateLimitSettings)


def parse_version(version: str) -> int | None:
    if version == "":
        return None
    if not (version.isascii() and version.isdigit()):
        raise InvalidArgument(
            f"failed to get model version from specified version string '{version}' "
            "(details: stol), version should be an integral value > 0"
        )
    return int(version)
