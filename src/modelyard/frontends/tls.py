"""TLS for the frontends: gRPC's as Triton 2.51 sets it up (``--grpc-use-ssl``...), and the
same options for HTTPS (``--http-use-ssl``..., beyond Triton).

Triton's rules: ``--grpc-use-ssl-mutual`` turns SSL on as well (whatever its value, and a
later ``--grpc-use-ssl=false`` turns it off again: cli/network_flags.py keeps that order);
the certificate files are read only when SSL is on; the root certificate verifies client
certificates, which are required only with mutual authentication. Where Triton reads a
missing file as empty and then fails to start with an unrelated message ("Socket ... already
in use"), modelyard refuses to start with one line naming the flag; mutual authentication
without a root certificate (Triton starts, then refuses every client) is refused too.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any


class TlsError(ValueError):
    """A TLS setting that cannot work: ``flag`` names the flag, the message says why."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


@dataclass(frozen=True)
class TlsSettings:
    """What a TLS endpoint serves with: PEM files (paths) and their contents."""

    cert_file: str
    key_file: str
    root_file: str  # "" when none was given
    cert: bytes
    key: bytes
    root: bytes
    mutual: bool  # clients must present a certificate the root certificate signed


def tls_settings(
    prefix: str, use_ssl: bool, mutual: bool, cert: str, key: str, root: str
) -> TlsSettings | None:
    """Check and read the files of ``--<prefix>-...``; None when SSL is off. Raises
    TlsError naming the flag at fault."""
    if not use_ssl:
        return None
    files = {"server-cert": cert, "server-key": key}
    for name, path in files.items():
        if not path:
            raise TlsError(f"--{prefix}-{name}", f"needed with --{prefix}-use-ssl")
    if mutual and not root:
        raise TlsError(
            f"--{prefix}-root-cert",
            f"needed with --{prefix}-use-ssl-mutual (it verifies the clients' certificates)",
        )
    contents = {
        name: _read(f"--{prefix}-{name}", path)
        for name, path in (*files.items(), ("root-cert", root))
    }
    settings = TlsSettings(
        cert,
        key,
        root,
        contents["server-cert"],
        contents["server-key"],
        contents["root-cert"],
        mutual,
    )
    server_context(settings, prefix)  # the files must be PEM and the key must fit
    return settings


def _read(flag: str, path: str) -> bytes:
    if not path:
        return b""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsError(flag, f"cannot read '{path}': {e.strerror or e}") from None


def server_context(settings: TlsSettings, prefix: str = "http") -> ssl.SSLContext:
    """The server side of a TLS connection (HTTPS); raises TlsError for files that are not
    a PEM certificate and its key."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # trusts no client but the root's
    context.set_alpn_protocols(["http/1.1"])
    try:
        # (an encrypted key fails here instead of prompting for its passphrase)
        context.load_cert_chain(settings.cert_file, settings.key_file, password=b"")
    except ssl.SSLError:
        raise TlsError(
            f"--{prefix}-server-cert",
            f"'{settings.cert_file}' and --{prefix}-server-key '{settings.key_file}' are "
            "not a PEM certificate and its (unencrypted) private key",
        ) from None
    if settings.root:
        try:
            context.load_verify_locations(cadata=settings.root.decode("ascii", "replace"))
        except (ssl.SSLError, ValueError):
            raise TlsError(
                f"--{prefix}-root-cert", f"'{settings.root_file}' holds no PEM certificate"
            ) from None
    context.verify_mode = ssl.CERT_REQUIRED if settings.mutual else ssl.CERT_NONE
    return context


def served_chain(settings: TlsSettings) -> bytes:
    """The certificates gRPC sends: the certificate file, then the root certificate file.
    Triton's gRPC (OpenSSL) completes the chain it sends from its trust store, the root
    certificate, by itself; grpcio's BoringSSL sends only what it is given. (HTTPS needs
    nothing: Python's ssl is OpenSSL.)"""
    cert, root = settings.cert, settings.root.strip()
    if not root or root in cert:
        return cert
    return cert.rstrip(b"\n") + b"\n" + root + b"\n"


def grpc_credentials(settings: TlsSettings) -> Any:
    """gRPC's server credentials, as Triton builds them: one key/certificate pair, the root
    certificate, a verified client certificate required with mutual authentication."""
    import grpc

    return grpc.ssl_server_credentials(
        [(settings.key, served_chain(settings))],
        root_certificates=settings.root or None,
        require_client_auth=settings.mutual,
    )
