"""A throw-away certificate authority and broker certificate for the secured devstack broker.

Made with ``openssl`` (present on every machine this project targets) at the first start:
a CA (``ca.pem``, its key ``ca.key``), and a broker key and certificate for ``127.0.0.1`` and
``localhost`` signed by it, packed into a PKCS#12 keystore the broker reads. Clients trust
``ca.pem`` (``KAFKA_SSL_CA_LOCATION``). Keys are written owner-only; they are dev keys, never
for anything but this local broker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devstack.errors import DevstackError

DAYS = 365  # a dev CA; a new data folder makes a new one
KEY_BITS = "2048"
HOSTS = "subjectAltName=IP:127.0.0.1,DNS:localhost"  # clients verify the broker's name


@dataclass(frozen=True)
class Certificates:
    """The files of a CA and a broker certificate signed by it."""

    folder: Path

    @property
    def ca(self) -> Path:
        """The CA certificate (PEM): what clients trust."""
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        """The CA's private key (PEM, owner-only)."""
        return self.folder / "ca.key"

    @property
    def keystore(self) -> Path:
        """The broker's key and certificate chain (PKCS#12, owner-only)."""
        return self.folder / "broker.p12"

    def exist(self) -> bool:
        """True when the CA and the broker keystore were made already."""
        return self.ca.is_file() and self.keystore.is_file()


def make_ca(folder: Path, name: str) -> Certificates:
    """Make a self-signed CA named ``name`` in ``folder`` (which is created)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    certs = Certificates(folder)
    _openssl(
        "req",
        "-x509",
        "-newkey",
        f"rsa:{KEY_BITS}",
        "-nodes",
        "-sha256",
        "-days",
        str(DAYS),
        "-subj",
        f"/CN={name}",
        "-keyout",
        str(certs.ca_key),
        "-out",
        str(certs.ca),
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    certs.ca_key.chmod(0o600)
    return certs


def make_broker_keystore(certs: Certificates, password: str) -> None:
    """Make the broker's key and certificate (signed by ``certs``' CA) as a PKCS#12 keystore.

    The password reaches ``openssl`` through its environment, never its command line.
    """
    work = certs.folder
    key, csr, crt = work / "broker.key", work / "broker.csr", work / "broker.pem"
    _openssl(
        "req",
        "-newkey",
        f"rsa:{KEY_BITS}",
        "-nodes",
        "-sha256",
        "-subj",
        "/CN=localhost",
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    key.chmod(0o600)
    ext = work / "broker.ext"
    ext.write_text(f"{HOSTS}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(certs.ca),
        "-CAkey",
        str(certs.ca_key),
        "-CAcreateserial",
        "-days",
        str(DAYS),
        "-sha256",
        "-extfile",
        str(ext),
        "-out",
        str(crt),
    )
    _openssl(
        "pkcs12",
        "-export",
        "-in",
        str(crt),
        "-inkey",
        str(key),
        "-certfile",
        str(certs.ca),
        "-name",
        "broker",
        "-out",
        str(certs.keystore),
        "-passout",
        "env:DEVSTACK_KEYSTORE_PASSWORD",
        env={"DEVSTACK_KEYSTORE_PASSWORD": password},
    )
    certs.keystore.chmod(0o600)
    for leftover in (csr, ext):
        leftover.unlink(missing_ok=True)


def _openssl(*args: str, env: dict[str, str] | None = None) -> None:
    tool = shutil.which("openssl")
    if tool is None:
        raise DevstackError(
            "openssl was not found; the secured broker makes its dev CA with it. "
            "Install it (Debian: apt-get install openssl)."
        )
    done = subprocess.run(  # noqa: S603 - arguments built here
        [tool, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise DevstackError(f"openssl {args[0]} failed: {done.stderr.strip()[-500:]}")
