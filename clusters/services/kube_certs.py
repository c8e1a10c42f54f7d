"""The credentials of the `kubernetes` backend, made fresh for each run with `cryptography`: a CA,
a serving certificate it signs whose SANs are every API server address, a service-account signing
key (kube-apiserver refuses to start without one) and a static token file. The one-node cluster
(fencecheck/clusters/kube/) asks for more of the same: a token for each of its components (each
its own user and groups) and a client certificate the API server shows the kubelet.

ECDSA P-256 throughout: a key is made in microseconds (an RSA key takes tens of milliseconds),
and Go's TLS, Python's ssl and kube-apiserver's service-account signer all accept it."""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# The in-cluster names and the first service IP the API server gives itself ("kubernetes"
# service): clients that follow those names still verify.
EXTRA_DNS = ("kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost")
EXTRA_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True, slots=True)
class KubeCredentials:
    """Paths of the files made by `make_credentials`, and the bearer token (group
    system:masters: every right)."""

    ca_file: Path
    cert_file: Path
    key_file: Path
    sa_key_file: Path
    token_file: Path
    token: str
    # user name -> its token, for the `users` given to make_credentials
    tokens: dict[str, str] = field(default_factory=dict)
    # name -> (certificate, key), for the `clients` given to make_credentials
    client_certs: dict[str, tuple[Path, Path]] = field(default_factory=dict)

    def files(self) -> tuple[Path, ...]:
        return (self.ca_file, self.cert_file, self.key_file, self.sa_key_file, self.token_file)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # "EC PRIVATE KEY": kube-apiserver's --service-account-key-file does not read PKCS#8.
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def make_credentials(folder: Path, addresses: Sequence[str], *,
                     users: Sequence[tuple[str, str]] = (),
                     clients: Sequence[tuple[str, str, str]] = ()) -> KubeCredentials:
    """Write ca.crt, apiserver.crt/.key (SANs: `addresses` and the in-cluster names), sa.key and
    tokens.csv into `folder`. `users` are more lines of tokens.csv, (user, comma-separated
    groups), each with a token of its own; `clients` are client certificates the CA signs,
    (file name, common name, organization): `<name>.crt` and `<name>.key`."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    # Valid from a day back: a client whose clock a fault moved back must still accept it.
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fencecheck-kube-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                       False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = _key()
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in EXTRA_DNS]
    sans += [x509.IPAddress(ipaddress.ip_address(a))
             for a in dict.fromkeys([*addresses, *EXTRA_IPS])]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    token = secrets.token_hex(16)
    tokens = {user: secrets.token_hex(16) for user, _ in users}
    lines = [f"{token},fencecheck,fencecheck,system:masters"]
    lines += [f'{tokens[user]},{user},{user},"{groups}"' for user, groups in users]
    certs = {name: _client_cert(folder, name, cn, org, ca_key, ca_name, start, end)
             for name, cn, org in clients}
    return KubeCredentials(
        ca_file=_write(folder / "ca.crt", ca.public_bytes(serialization.Encoding.PEM)),
        cert_file=_write(folder / "apiserver.crt", cert.public_bytes(serialization.Encoding.PEM)),
        key_file=_write(folder / "apiserver.key", _pem(key)),
        sa_key_file=_write(folder / "sa.key", _pem(_key())),
        token_file=_write(folder / "tokens.csv", ("\n".join(lines) + "\n").encode()),
        token=token,
        tokens=tokens,
        client_certs=certs,
    )


def _client_cert(folder: Path, name: str, cn: str, org: str, ca_key: ec.EllipticCurvePrivateKey,
                 ca_name: x509.Name, start: datetime.datetime, end: datetime.datetime
                 ) -> tuple[Path, Path]:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                         x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (_write(folder / f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            _write(folder / f"{name}.key", _pem(key)))
