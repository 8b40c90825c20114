"""Secrets enter a plan only as salted digests (issue 31's gap: an unsalted digest passed
every test). Plans are posted in pull requests: an unsalted digest of a short password
can be guessed offline."""

from __future__ import annotations

import hashlib
import hmac
import os

from planner.config.secrets import Secret


def test_two_plans_of_one_secret_carry_different_digests() -> None:
    secret = Secret("env:PW", "hunter2")
    one, two = secret.salted_digest(os.urandom(16)), secret.salted_digest(os.urandom(16))
    assert one.startswith("hmac-sha256:") and one != two


def test_a_digest_is_never_the_unsalted_hash_of_the_value() -> None:
    salt = os.urandom(16)
    digest = Secret("env:PW", "hunter2").salted_digest(salt).removeprefix("hmac-sha256:")
    assert digest != hashlib.sha256(b"hunter2").hexdigest()
    assert digest != hmac.new(b"", b"hunter2", hashlib.sha256).hexdigest()
    assert digest == hmac.new(salt, b"hunter2", hashlib.sha256).hexdigest()
