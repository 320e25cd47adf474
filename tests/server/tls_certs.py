"""Throwaway PEM files for the TLS tests: a CA, and certificates it signs for 127.0.0.1 (the
server) or a client, made with ``cryptography`` (EC P-256: quick to make)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class CA:
    """A certificate authority written to ``where/NAME-ca.pem``; :meth:`issue` signs more."""

    def __init__(self, where: Path, name: str = "test") -> None:
        self.where, self.key = where, ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"kvpool {name} CA")])
        usage = x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                              content_commitment=False, key_encipherment=False,
                              data_encipherment=False, key_agreement=False,
                              encipher_only=False, decipher_only=False)
        self.cert = (_builder(subject, subject, self.key.public_key())
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                     .add_extension(usage, True)
                     .sign(self.key, hashes.SHA256()))
        self.path = str(where / f"{name}-ca.pem")
        Path(self.path).write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, client: bool = False) -> tuple[str, str, bytes]:
        """(cert path, key path, the certificate's DER) for 127.0.0.1, or a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = (_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
                            self.cert.subject, key.public_key())
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), False))
        if not client:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = self.where / f"{name}.pem", self.where / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return str(cert_path), str(key_path), cert.public_bytes(serialization.Encoding.DER)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)))
