"""The server's configuration, typed: every flag of ``modelyard serve`` a field, built once
from the command line (:func:`config_from_args`, the one reader of the parsed flags) or from
Python (:meth:`ServerConfig.from_args`, with the same parser and so the same defaults), then
handed down: ``serve``, ``dev`` and ``--ray`` read nothing else.

Building it checks every value the flags can be checked for without starting anything, with
the command's own messages and exit codes (``SystemExit``). What only the running process can
say is settled when the server starts (``server.serve``): the log file opens, the open-file
limit is raised (the HTTP connection cap follows it), the GPUs are found, and the cloud
endpoints read their environment.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from modelyard.backends.loader import LoadOptions
from modelyard.cli.cloud_flags import default_repositories
from modelyard.cli.serve_flags import parse_serve_args
from modelyard.config.backend_settings import parse_backend_config
from modelyard.core.options import ServerOptions
from modelyard.frontends import options as fe
from modelyard.frontends.cloud.options import CloudSettings, port_collision
from modelyard.frontends.grpc.channel import GrpcChannel
from modelyard.frontends.http.limits import MAX_DEFAULT_CONNECTIONS, HttpLimits
from modelyard.frontends.openai.options import OpenAIOptions, parse_openai_restrictions
from modelyard.frontends.options import Endpoint, FrontendOptions
from modelyard.logs import LogConfig
from modelyard.metrics.options import metrics_address, metrics_settings
from modelyard.scheduling.rate_limiter import RateLimitSettings
from modelyard.tracing.config import TraceConfig, TraceConfigError, parse_trace_flags


@dataclass(frozen=True)
class Endpoints:
    """Triton's three endpoints (``--allow-*``, ``--*-address``, ``--*-port``)."""

    http: Endpoint
    grpc: Endpoint
    metrics: Endpoint  # its address is --http-address's unless --metrics-address is given


@dataclass(frozen=True)
class RaySettings:
    """``--ray ADDRESS`` and the flags that go with it (cli/ray_flags.py)."""

    address: str  # auto, HOST:PORT, ray://HOST:PORT, or local
    replica_cpus: float  # --ray-replica-cpus
    num_cpus: float | None  # --ray-num-cpus (local only; None: this machine's)
    num_gpus: float | None  # --ray-num-gpus (local only; None: this machine's)
    frontend_resource: str  # --ray-frontend-resource ("": every node)
    deploy_timeout_secs: float  # --ray-deploy-timeout-secs


@dataclass(frozen=True)
class IgnoredFlags:
    """Flags accepted so that Triton's command lines run unchanged; they change nothing here."""

    grpc_infer_allocation_pool_size: int
    sagemaker_thread_count: int
    vertex_ai_thread_count: int
    # (GPU id, bytes) pairs: GPU tensors pass between processes in place, no pool to size
    cuda_memory_pool_byte_size: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ServerConfig:
    """Everything ``modelyard serve`` was told. Build it with :meth:`from_args` (or
    :func:`config_from_args`); change a field with ``dataclasses.replace``."""

    core: ServerOptions  # what the core reads: repositories, control mode, loading, tracing...
    frontends: FrontendOptions  # limits, restrictions, TLS, forwarded headers, gRPC channel
    endpoints: Endpoints
    openai: OpenAIOptions | None  # None: no --openai-port
    cloud: CloudSettings  # SageMaker and Vertex AI
    log: LogConfig  # --log-*
    ray: RaySettings | None  # None: served by this process
    heap_retain_mb: int  # --heap-retain-mb
    min_compute_capability: float  # --min-supported-compute-capability
    ignored: IgnoredFlags
    # What the checks found worth a warning (an unknown --metrics-config name): logged when
    # the server starts, once the log is set up.
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_args(cls, argv: Sequence[str]) -> ServerConfig:
        """The configuration ``modelyard serve ARGV...`` runs with: the same flags, defaults,
        checks and messages; a bad value raises ``SystemExit`` as the command exits."""
        return config_from_args(parse_serve_args(argv))


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """``serve``'s (or ``dev``'s) parsed flags, checked, as a :class:`ServerConfig`."""
    command: str = args.command
    repositories = default_repositories(
        ([args.repository] if args.repository else []) + list(args.model_repository)
    )
    if not repositories:
        _usage_error(
            command, "no model repository: modelyard serve REPOSITORY (or --model-repository PATH)"
        )
    if args.log_verbose < 0:
        raise SystemExit(f"--log-verbose must be 0 or more, got {args.log_verbose}")
    if args.heap_retain_mb < 0:
        raise SystemExit(f"--heap-retain-mb must be 0 or more, got {args.heap_retain_mb}")
    endpoints = Endpoints(
        http=Endpoint(args.allow_http, args.http_address, args.http_port),
        grpc=Endpoint(args.allow_grpc, args.grpc_address, args.grpc_port),
        metrics=Endpoint(
            args.allow_metrics,
            metrics_address(args.metrics_address, args.http_address),
            args.metrics_port,
        ),
    )
    try:
        frontends = _frontends(args)
    except fe.FlagError as e:
        _usage_error(command, f"argument {e.flag}: {e}")
    cloud = CloudSettings(
        allow_sagemaker=args.allow_sagemaker,
        sagemaker_port=args.sagemaker_port,
        sagemaker_safe_port_range=args.sagemaker_safe_port_range,
        allow_vertex_ai=args.allow_vertex_ai,
        vertex_ai_port=args.vertex_ai_port,
        vertex_ai_default_model=args.vertex_ai_default_model or "",
    )
    ray = _ray(args)
    problem = port_collision(endpoints.http, endpoints.grpc, endpoints.metrics, cloud)
    if problem is None and cloud.served and ray is not None:
        problem = "--allow-sagemaker and --allow-vertex-ai are not served with --ray yet"
    if problem is not None:
        _usage_error(command, problem)
    if ray is not None:
        if args.model_namespacing:
            raise SystemExit("--model-namespacing is not supported with --ray")
        if problem := local_flags_problem(ray):
            _usage_error(command, problem)
    warnings: list[str] = []
    return ServerConfig(
        core=_core(args, repositories, warnings),
        frontends=frontends,
        endpoints=endpoints,
        openai=_openai(args),
        cloud=cloud,
        log=LogConfig(
            log_file=args.log_file,
            log_info=args.log_info,
            log_warning=args.log_warning,
            log_error=args.log_error,
            log_verbose_level=args.log_verbose,
            log_format=args.log_format,
        ),
        ray=ray,
        heap_retain_mb=args.heap_retain_mb,
        min_compute_capability=args.min_supported_compute_capability,
        ignored=IgnoredFlags(
            grpc_infer_allocation_pool_size=args.grpc_infer_allocation_pool_size,
            sagemaker_thread_count=args.sagemaker_thread_count,
            vertex_ai_thread_count=args.vertex_ai_thread_count,
            cuda_memory_pool_byte_size=tuple(args.cuda_memory_pool_byte_size),
        ),
        warnings=tuple(warnings),
    )


def local_flags_problem(ray: RaySettings) -> str:
    """The flags that size a local Ray instance, given for a cluster this server joins."""
    if ray.address == "local":
        return ""
    for flag, value in (("--ray-num-cpus", ray.num_cpus), ("--ray-num-gpus", ray.num_gpus)):
        if value is not None:
            return (
                f"{flag} sizes the Ray instance of --ray local; the cluster at "
                f"'{ray.address}' has its own"
            )
    return ""


def _usage_error(command: str, message: str) -> NoReturn:
    """One line, as argparse reports a bad command line, and exit code 2."""
    sys.stderr.write(f"modelyard {command}: error: {message}\n")
    raise SystemExit(2)


def _core(args: argparse.Namespace, repositories: list[str], warn: list[str]) -> ServerOptions:
    return ServerOptions(
        repositories=repositories,
        control_mode=args.model_control_mode,
        namespacing=args.model_namespacing,
        load_models=list(args.load_model),
        server_id=args.id,
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        exit_timeout=args.exit_timeout_secs,
        poll_secs=args.repository_poll_secs,
        load_threads=args.model_load_thread_count,
        allow_client_shm=args.allow_client_shm,
        cache_bytes=_cache_bytes(args.cache_config),
        trace=_trace_config(args.trace_flags),
        rate_limit=RateLimitSettings(args.rate_limit, tuple(args.rate_limit_resource)),
        metrics=metrics_settings(
            args.allow_metrics,
            args.allow_gpu_metrics,
            args.allow_cpu_metrics,
            args.metrics_interval_ms,
            args.metrics_config,
            warn.append,
        ),
        load=LoadOptions(
            auto_complete=not (args.strict_model_config or args.disable_auto_complete_config),
            backend_settings=parse_backend_config(args.backend_config),
            config_name=args.model_config_name or "",
            retry_count=args.model_load_retry_count,
            gpus=None,  # (found when the server starts: server.serve)
        ),
    )


def _cache_bytes(items: list[str]) -> int:
    from modelyard.core.response_cache import parse_cache_config

    try:
        return parse_cache_config(items)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def _trace_config(flags: list[tuple[str, str]]) -> TraceConfig:
    def warn(line: str) -> None:
        print(line, file=sys.stderr, flush=True)  # raw, as Triton prints them

    try:
        return parse_trace_flags(flags, warn)
    except TraceConfigError as e:
        raise SystemExit(str(e)) from None


def _frontends(args: argparse.Namespace) -> FrontendOptions:
    """The frontends' settings, in the order Triton checks them; FlagError for a bad one."""
    fe.check_max_input_size(args.http_max_input_size)
    limits = HttpLimits(
        max_input_size=args.http_max_input_size,
        max_header_size=args.http_max_header_size,
        max_body_size=args.http_max_body_size,
        read_timeout=args.http_read_timeout,
        idle_timeout=args.http_idle_timeout,
        max_connections=args.http_max_connections or MAX_DEFAULT_CONNECTIONS,
    )
    http_restrictions, grpc_restrictions = fe.restrictions(
        args.http_restricted_api, args.grpc_restricted_protocol
    )
    http_tls = fe.tls(
        "http",
        args.allow_http,
        args.http_use_ssl,
        args.http_use_ssl_mutual,
        args.http_server_cert or "",
        args.http_server_key or "",
        args.http_root_cert or "",
    )
    grpc_tls = fe.tls(
        "grpc",
        args.allow_grpc,
        args.grpc_use_ssl,
        args.grpc_use_ssl_mutual,
        args.grpc_server_cert or "",
        args.grpc_server_key or "",
        args.grpc_root_cert or "",
    )
    return FrontendOptions(
        limits,
        http_restrictions,
        grpc_restrictions,
        args.allow_dashboard,
        http_tls=http_tls,
        grpc_tls=grpc_tls,
        http_forward=fe.forward("http", args.http_header_forward_pattern or ""),
        grpc_forward=fe.forward("grpc", args.grpc_header_forward_pattern or ""),
        reuse_http_port=args.reuse_http_port,
        grpc_channel=GrpcChannel(
            keepalive_time_ms=args.grpc_keepalive_time,
            keepalive_timeout_ms=args.grpc_keepalive_timeout,
            keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
            http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
            http2_min_recv_ping_interval_without_data_ms=(
                args.grpc_http2_min_recv_ping_interval_without_data
            ),
            http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
            max_connection_age_ms=args.grpc_max_connection_age,
            max_connection_age_grace_ms=args.grpc_max_connection_age_grace,
            compression_level=args.grpc_infer_response_compression_level,
            reuse_port=args.reuse_grpc_port,
        ),
        http_max_connections=args.http_max_connections,
    )


def _openai(args: argparse.Namespace) -> OpenAIOptions | None:
    """The OpenAI frontend's settings, or None without ``--openai-port`` (the values were
    checked as they were parsed)."""
    if args.openai_port is None:
        return None
    return OpenAIOptions(
        port=args.openai_port,
        address=args.openai_address,
        api_key=args.openai_api_key or "",
        tokenizer=args.tokenizer or "",
        default_max_tokens=args.default_max_tokens,
        restrictions=parse_openai_restrictions(args.openai_restricted_api),
    )


def _ray(args: argparse.Namespace) -> RaySettings | None:
    if not args.ray:
        return None
    return RaySettings(
        address=args.ray,
        replica_cpus=args.ray_replica_cpus,
        num_cpus=args.ray_num_cpus,
        num_gpus=args.ray_num_gpus,
        frontend_resource=args.ray_frontend_resource,
        deploy_timeout_secs=args.ray_deploy_timeout_secs,
    )
