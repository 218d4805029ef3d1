"""The webhook certificate of a Kueue manager on loopback, made with the openssl command.

Kueue's own certificate management (open-policy-agent/cert-controller) issues a certificate for
``kueue-webhook-service.kueue-system.svc`` alone, which an API server calling ``127.0.0.1``
rejects. It keeps a certificate it finds in its Secret when that certificate is valid for the
Service's name and signed by a CA named ``kueue-ca``, for more than its 90-day look-ahead; so
this one is valid for the Service's name and for 127.0.0.1, signed by such a CA, for a year.
The manager reads the files from its cert directory (in a pod, the Secret's mount).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuval_devtools.buildsteps import BuildError

CA_NAME = "kueue-ca"
DAYS = 365


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"kueue webhook certificate: openssl {args[0]} failed: {proc.stderr}")


def issue(directory: Path, service_dns: str) -> dict[str, bytes]:
    """Writes ca.crt, ca.key, tls.crt and tls.key into ``directory``; returns their contents."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_crt, ca_key = directory / "ca.crt", directory / "ca.key"
    tls_crt, tls_key = directory / "tls.crt", directory / "tls.key"
    # PKCS#1 ("RSA PRIVATE KEY"): the only form cert-controller parses a CA key in.
    for key in (ca_key, tls_key):
        _openssl("genrsa", "-traditional", "-out", str(key), "2048")
    new = ["req", "-x509", "-new", "-days", str(DAYS)]
    _openssl(
        *new,
        *("-key", str(ca_key), "-out", str(ca_crt)),
        *("-subj", f"/O=kueue/CN={CA_NAME}", "-addext", f"subjectAltName=DNS:{CA_NAME}"),
    )
    _openssl(
        *new,
        *("-key", str(tls_key), "-out", str(tls_crt)),
        *("-CA", str(ca_crt), "-CAkey", str(ca_key), "-subj", f"/CN={service_dns}"),
        *("-addext", f"subjectAltName=DNS:{service_dns},IP:127.0.0.1"),
        *("-addext", "basicConstraints=critical,CA:FALSE"),
        *("-addext", "extendedKeyUsage=serverAuth"),
    )
    return {p.name: p.read_bytes() for p in (ca_crt, ca_key, tls_crt, tls_key)}
