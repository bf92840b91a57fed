"""Certificates the TLS tests make for themselves with ``cryptography``: a certificate
authority, a server certificate it signs (for ``localhost`` and ``127.0.0.1``), a client
certificate it signs, and a second authority nobody trusts. Written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # the authority's certificate (what both sides trust)
    server: Pem
    client: Pem
    stranger: Pem  # a client certificate signed by another authority
    stranger_ca: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _authority(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def make_certificates(folder: Path) -> Certificates:
    """A fresh authority with a server and a client certificate, and a stranger's client
    certificate, as PEM files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _authority("modelyard test CA")
    other = _authority("someone else's CA")
    pems: dict[str, Pem] = {}
    for name, authority, server in (
        ("server", ca, True),
        ("client", ca, False),
        ("stranger", other, False),
    ):
        cert, key = _leaf(f"modelyard test {name}", authority, server)
        pems[name] = Pem(
            _write_cert(folder / f"{name}.crt", cert), _write_key(folder / f"{name}.key", key)
        )
    return Certificates(
        ca=_write_cert(folder / "ca.crt", ca[0]),
        server=pems["server"],
        client=pems["client"],
        stranger=pems["stranger"],
        stranger_ca=_write_cert(folder / "stranger-ca.crt", other[0]),
    )
