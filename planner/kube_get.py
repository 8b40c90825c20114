"""A plain GET against the Kubernetes API with the admin kubeconfig, for the plan's
read-only questions (what a drain would meet, whether a chart's values are pruned): the
official client costs about a second of CPU to import, more than the rest of a plan, and
these questions need one request each (tests/bench/FINDINGS.md on the client's cost).

TLS checks the server against the kubeconfig's CA; the client certificate and key go
through a private temporary directory for the moment ssl needs them as files (as the
official client does with its own temporary files), and are removed at once. Answers are
bounded: a list of more than MAX_BYTES is refused, never read on."""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.parse
from typing import Any

MAX_BYTES = 64 << 20


class ApiGetError(Exception):
    """The API answered with an error, or not with what was asked; `status` when it said."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _context(admin: dict[str, Any]) -> ssl.SSLContext:
    cluster = admin["clusters"][0]["cluster"]
    user = admin["users"][0]["user"]
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    context = ssl.create_default_context(cadata=ca)
    if "client-certificate-data" in user:
        with tempfile.TemporaryDirectory(prefix="cargoship-") as private:
            cert, key = os.path.join(private, "c"), os.path.join(private, "k")
            for path, field in ((cert, "client-certificate-data"),
                                (key, "client-key-data")):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(base64.b64decode(user[field]))
            context.load_cert_chain(cert, key)
    return context


def get_json(admin: dict[str, Any], path: str, query: list[tuple[str, str]] | None = None,
             timeout: float = 30) -> Any:
    """GET `path` and return its JSON body; ApiGetError on any answer but 200."""
    server = urllib.parse.urlsplit(admin["clusters"][0]["cluster"]["server"])
    headers = {"Accept": "application/json"}
    token = admin["users"][0]["user"].get("token")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    target = path + (f"?{urllib.parse.urlencode(query)}" if query else "")
    # Here, not at the top: http.client and the email parsers behind it are ~13 ms of a
    # plan's start-up, and most plans never ask the API anything.
    import http.client

    conn = http.client.HTTPSConnection(server.hostname or "", server.port or 443,
                                       context=_context(admin), timeout=timeout)
    try:
        conn.request("GET", target, headers=headers)
        response = conn.getresponse()
        body = response.read(MAX_BYTES + 1)
    except (OSError, http.client.HTTPException) as exc:
        raise ApiGetError(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if response.status != 200:
        raise ApiGetError(f"HTTP {response.status} {response.reason}", response.status)
    if len(body) > MAX_BYTES:
        raise ApiGetError(f"{path}: an answer of more than {MAX_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise ApiGetError(f"{path}: not JSON") from None
