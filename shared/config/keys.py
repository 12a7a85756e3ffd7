"""What the keys of a deployment must be: each one random enough to be a secret, none standing for two callers.
Messages say which key, by its variable and place, never the key itself."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "secret", "password", "test", "xxx"})
MIN_KEY_CHARS = 12
# Bits of the key's own character distribution, times its length: 0 for "000000000000", 19 for "abcabcabcabc",
# 43 for twelve different characters, ~150 for `secrets.token_urlsafe(24)`.
MIN_KEY_BITS = 40.0


def pattern_bits(key: str) -> float:
    """The key's length times the Shannon entropy of its characters: low for repeats and short alphabets."""
    counts = Counter(key)
    return -sum(n * math.log2(n / len(key)) for n in counts.values()) if key else 0.0


def weakness(key: str) -> str | None:
    """Why `key` cannot be a secret, or None."""
    if any(c.isspace() for c in key):
        return "contains whitespace"
    if key.lower() in PLACEHOLDER_SECRETS:
        return "is a placeholder"
    if len(key) < MIN_KEY_CHARS:
        return f"is shorter than {MIN_KEY_CHARS} characters"
    if pattern_bits(key) < MIN_KEY_BITS:
        return "repeats too few characters to be random"
    return None


def key_problems(
    tenant_keys: Mapping[str, str],
    operator_key: str | None,
    *,
    om_key: str | None = None,
    om_tenant: str = "",
    strength: bool,
) -> list[str]:
    """What is wrong with a configuration's keys: a tenant key that is also the operator's (that tenant would read
    everyone's), OpenMemory's key listed for another tenant too, and (`strength`: outside development) keys that
    are not random."""
    problems = []
    if operator_key is not None and (operator_key in tenant_keys or operator_key == om_key):
        problems.append(
            "a tenant's key is also MNEMOFLOW_ADMIN_API_KEY: that tenant would act as the operator; give the operator "
            "a key of its own"
        )
    if om_key is not None and tenant_keys.get(om_key, om_tenant) != om_tenant:
        problems.append(
            f"OM_API_KEY is also in MNEMOFLOW_API_KEYS for another tenant than MNEMOFLOW_DEFAULT_USER_ID "
            f"({om_tenant!r}): a key may stand for one tenant"
        )
    if strength:
        named = [(f"key {i} of MNEMOFLOW_API_KEYS", key) for i, key in enumerate(tenant_keys, start=1)]
        named += [("OM_API_KEY", om_key)] if om_key is not None else []
        named += [("MNEMOFLOW_ADMIN_API_KEY", operator_key)] if operator_key is not None else []
        problems += [f"{name} {why}" for name, key in named if (why := weakness(key))]
    return problems
