"""Settings: one typed object read from the environment (shared.config.settings), declared by area."""

from shared.config.keys import PLACEHOLDER_SECRETS
from shared.config.parsing import normalize_database_url
from shared.config.server import OpenAccessRefused
from shared.config.settings import Settings, get_settings
from shared.embedding.params import PROVIDERS

__all__ = [
    "PLACEHOLDER_SECRETS",
    "PROVIDERS",
    "OpenAccessRefused",
    "Settings",
    "get_settings",
    "normalize_database_url",
]
