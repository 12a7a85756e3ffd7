"""Data a tenant owns: its export and import (JSON Lines), its erasure, and cancelling its jobs (docs/data.md)."""
