"""Which keys hold credentials, wherever they appear: registries.yaml, kubeconfigs, chart
values. One rule for every diff and summary cargoship shows, so a new file kind can't
forget one. Erring towards masking is cheap (a reviewer sees "***"); erring the other way
posts a credential in a pull request."""

from __future__ import annotations

import re

_EXACT = frozenset({"password", "passwd", "token", "auth", "secret", "identity_token",
                    "client-key", "client-key-data", "client-certificate-data",
                    "private-key", "private_key", "privatekey", "apikey", "api-key", "api_key",
                    "credentials", "bearer"})
# Any key ending in token/secret/password/key-data, however it is joined: id-token,
# refresh_token, client-secret, clientSecret, bootstrapToken, tls-key-data ...
_SUFFIX = re.compile(r"(?i)(token|secret|password|passwd|key-?data|keydata)$")


def is_credential_key(key: object) -> bool:
    if not isinstance(key, str):
        return False
    return key.lower() in _EXACT or bool(_SUFFIX.search(key))
