"""TLS material and kubeconfigs for the test API server, made with the `openssl` CLI.

`Pki.create(folder)` writes a CA, a server certificate for 127.0.0.1/localhost and a client certificate
(CN = user name, O = group, as the x509 authenticator reads them), all ECDSA P-256 and valid for a day.
`Pki.client_cert()` issues more identities; `foreign_client()` makes one signed by an unrelated CA (the server
must refuse it). Kubeconfigs are written as JSON, which both kubectl and the Python client's YAML loader read.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

CERT_DAYS = 1
DEFAULT_USER = "evictd-test-admin"
DEFAULT_GROUP = "system:masters"


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr.strip()}")


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path), cwd=path.parent)


def _sign(folder: Path, name: str, subject: str, extensions: str, ca_cert: Path, ca_key: Path) -> tuple[Path, Path]:
    key, csr, cert, ext = (folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.crt",
                           folder / f"{name}.ext")
    _key(key)
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr), cwd=folder)
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", str(CERT_DAYS), "-sha256", "-extfile", str(ext), "-out", str(cert), cwd=folder)
    return cert, key


def _ca(folder: Path, name: str, common_name: str) -> tuple[Path, Path]:
    key, cert = folder / f"{name}.key", folder / f"{name}.crt"
    _key(key)
    _openssl("req", "-x509", "-new", "-key", str(key), "-subj", f"/CN={common_name}", "-days", str(CERT_DAYS),
             "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-out", str(cert), cwd=folder)
    return cert, key


@dataclass(frozen=True)
class ClientCert:
    """A client identity: certificate and key files, and the user it authenticates as."""

    cert_path: Path
    key_path: Path
    user: str


@dataclass(frozen=True)
class Pki:
    """The files of one test cluster's PKI."""

    folder: Path
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client: ClientCert

    @classmethod
    def create(cls, folder: Path) -> Pki:
        folder.mkdir(parents=True, exist_ok=True)
        ca_cert, ca_key = _ca(folder, "ca", "evictd-test-ca")
        server_cert, server_key = _sign(
            folder, "apiserver", "/CN=kube-apiserver",
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
            ca_cert, ca_key)
        pki = cls(folder, ca_cert, ca_key, server_cert, server_key, ClientCert(Path(), Path(), ""))
        object.__setattr__(pki, "client", pki.client_cert(DEFAULT_USER, DEFAULT_GROUP))
        return pki

    def client_cert(self, user: str, group: str = "") -> ClientCert:
        """Issue a client certificate for `user` (CN) in `group` (O)."""
        subject = f"/CN={user}" + (f"/O={group}" if group else "")
        name = "client-" + "".join(c if c.isalnum() else "-" for c in user)
        cert, key = _sign(self.folder, name, subject,
                          "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                          "extendedKeyUsage=clientAuth\n", self.ca_cert, self.ca_key)
        return ClientCert(cert, key, user)

    def foreign_client(self) -> ClientCert:
        """A client certificate signed by a CA the server does not trust."""
        folder = self.folder / "foreign"
        folder.mkdir(exist_ok=True)
        ca_cert, ca_key = _ca(folder, "ca", "some-other-ca")
        cert, key = _sign(folder, "client", "/CN=intruder", "extendedKeyUsage=clientAuth\n", ca_cert, ca_key)
        return ClientCert(cert, key, "intruder")


def write_kubeconfig(path: Path, server_url: str, ca_cert: Path, *, client: ClientCert | None = None,
                     token: str | None = None, namespace: str = "default") -> Path:
    """Write a kubeconfig with one cluster, one user (client certificate or bearer token) and one context."""
    user: dict[str, str] = {}
    if client is not None:
        user = {"client-certificate": str(client.cert_path), "client-key": str(client.key_path)}
    if token is not None:
        user["token"] = token
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "evictd-test", "cluster": {"server": server_url, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": "evictd-test-user", "user": user}],
        "contexts": [{"name": "evictd-test",
                      "context": {"cluster": "evictd-test", "user": "evictd-test-user", "namespace": namespace}}],
        "current-context": "evictd-test",
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2))
    return path
