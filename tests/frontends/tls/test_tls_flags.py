"""The network flags as the server reads them: which flag implies which (Triton's order
rules), the gRPC channel arguments with Triton's defaults, and a bad value as one line
naming the flag with exit code 2."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from modelyard.cli.main import build_parser
from modelyard.frontends.grpc.channel import GRPC_SERVER_DEFAULTS, GrpcChannel
from modelyard.frontends.options import FrontendOptions
from modelyard.server_config import ServerConfig
from tests.frontends.tls.certs import Certificates
from tests.serverproc import refused_start


def parse(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", "repo", *flags])


def options(*flags: str) -> FrontendOptions:
    return ServerConfig.from_args(["repo", *flags]).frontends


def refused(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    with pytest.raises(SystemExit) as info:
        options(*flags)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


def cert_flags(certs: Certificates, prefix: str = "grpc") -> list[str]:
    return [
        f"--{prefix}-server-cert={certs.server.cert}",
        f"--{prefix}-server-key={certs.server.key}",
        f"--{prefix}-root-cert={certs.ca}",
    ]


@pytest.mark.parametrize(
    ("flags", "use_ssl", "mutual"),
    [
        ((), False, False),
        (("--grpc-use-ssl",), True, False),
        (("--grpc-use-ssl-mutual",), True, True),
        # Triton: --grpc-use-ssl-mutual turns SSL on whatever its own value ...
        (("--grpc-use-ssl-mutual=false",), True, False),
        # ... and a later --grpc-use-ssl=false turns it off again.
        (("--grpc-use-ssl-mutual=true", "--grpc-use-ssl=false"), False, True),
        (("--grpc-use-ssl=false", "--grpc-use-ssl-mutual=on"), True, True),
    ],
)
def test_mutual_implies_ssl_in_command_line_order(
    flags: tuple[str, ...], use_ssl: bool, mutual: bool
) -> None:
    for prefix in ("grpc", "http"):
        args = parse(*(f.replace("grpc", prefix) for f in flags))
        assert getattr(args, f"{prefix}_use_ssl") is use_ssl
        assert getattr(args, f"{prefix}_use_ssl_mutual") is mutual


def test_certificates_are_read_only_with_ssl(certs: Certificates) -> None:
    fe = options("--grpc-server-cert=/nonexistent.crt", "--http-server-key=/nonexistent.key")
    assert fe.grpc_tls is None and fe.http_tls is None
    fe = options(
        "--grpc-use-ssl-mutual",
        "--http-use-ssl",
        *cert_flags(certs, "grpc"),
        *cert_flags(certs, "http"),
    )
    assert fe.grpc_tls is not None and fe.grpc_tls.mutual
    assert fe.grpc_tls.root == certs.ca.read_bytes()
    assert fe.http_tls is not None and not fe.http_tls.mutual


@pytest.mark.parametrize("prefix", ["grpc", "http"])
def test_a_certificate_that_cannot_be_used_is_one_line_naming_its_flag(
    capsys: pytest.CaptureFixture[str], certs: Certificates, tmp_path: Path, prefix: str
) -> None:
    p = f"--{prefix}"
    use = f"{p}-use-ssl"
    assert refused(capsys, use) == (
        f"modelyard serve: error: argument {p}-server-cert: needed with {use}"
    )
    missing = tmp_path / "missing.pem"
    line = refused(capsys, use, f"{p}-server-cert={certs.server.cert}", f"{p}-server-key={missing}")
    assert line == (
        f"modelyard serve: error: argument {p}-server-key: cannot read '{missing}': "
        "No such file or directory"
    )
    line = refused(
        capsys,
        f"{p}-use-ssl-mutual",
        f"{p}-server-cert={certs.server.cert}",
        f"{p}-server-key={certs.server.key}",
    )
    assert line.startswith(f"modelyard serve: error: argument {p}-root-cert: needed with ")
    # a key that is not the certificate's
    line = refused(
        capsys, use, f"{p}-server-cert={certs.server.cert}", f"{p}-server-key={certs.client.key}"
    )
    assert line.startswith(f"modelyard serve: error: argument {p}-server-cert: ")
    assert "not a PEM certificate and its (unencrypted) private key" in line
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    line = refused(capsys, use, *cert_flags(certs, prefix)[:2], f"{p}-root-cert={not_pem}")
    assert line == (
        f"modelyard serve: error: argument {p}-root-cert: '{not_pem}' holds no PEM certificate"
    )


def test_a_pattern_that_is_no_regular_expression_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = refused(capsys, "--grpc-header-forward-pattern=tenant(")
    assert line.startswith(
        "modelyard serve: error: argument --grpc-header-forward-pattern: not a regular expression"
    )
    fe = options("--http-header-forward-pattern=^X-")
    assert fe.http_forward is not None and fe.http_forward.pattern == "^X-"
    assert fe.grpc_forward is None


def test_grpc_channel_arguments_have_tritons_defaults() -> None:
    fe = options()
    assert fe.grpc_channel == GrpcChannel()
    # Triton's defaults are grpc core's: none is passed, each is in effect as grpc's default
    assert dict(fe.grpc_channel.arguments()) == {"grpc.so_reuseport": 0}
    assert GRPC_SERVER_DEFAULTS == {
        "grpc.keepalive_time_ms": 7200000,
        "grpc.keepalive_timeout_ms": 20000,
        "grpc.keepalive_permit_without_calls": 0,
        "grpc.http2.max_pings_without_data": 2,
        "grpc.http2.min_ping_interval_without_data_ms": 300000,
        "grpc.http2.max_ping_strikes": 2,
    }
    assert fe.grpc_channel.response_algorithm() is None


def test_grpc_channel_flags() -> None:
    fe = options(
        "--grpc-keepalive-time=1000",
        "--grpc-keepalive-timeout=500",
        "--grpc-keepalive-permit-without-calls=1",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=2000",
        "--grpc-http2-max-ping-strikes=5",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=3000",
        "--grpc-infer-response-compression-level=HIGH",
        "--grpc-infer-allocation-pool-size=16",
        "--reuse-grpc-port=true",
    )
    assert dict(fe.grpc_channel.arguments()) == {
        "grpc.so_reuseport": 1,
        "grpc.keepalive_time_ms": 1000,
        "grpc.keepalive_timeout_ms": 500,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.http2.max_pings_without_data": 0,
        "grpc.http2.min_ping_interval_without_data_ms": 2000,
        "grpc.http2.max_ping_strikes": 5,
        "grpc.max_connection_age_ms": 60000,
        "grpc.max_connection_age_grace_ms": 3000,
    }
    assert fe.grpc_channel.response_algorithm() == "deflate"
    assert (
        options("--grpc-infer-response-compression-level=low").grpc_channel.compression_level
        == "low"
    )


def test_serve_refuses_a_missing_certificate_with_exit_code_2(
    tmp_path: Path, certs: Certificates
) -> None:
    missing = tmp_path / "server.crt"
    err = refused_start(
        tmp_path,
        "--grpc-use-ssl",
        f"--grpc-server-cert={missing}",
        f"--grpc-server-key={certs.server.key}",
    )
    assert err.strip().splitlines()[-1] == (
        f"modelyard serve: error: argument --grpc-server-cert: cannot read '{missing}': "
        "No such file or directory"
    )
    err = refused_start(tmp_path, "--grpc-infer-response-compression-level=max")
    assert err.strip().splitlines()[-1] == (
        "modelyard serve: error: argument --grpc-infer-response-compression-level: invalid "
        "choice: 'max' (choose from 'none', 'low', 'medium', 'high')"
    )
