"""The bottom floor of `shared/`: the engine's vocabulary, imported by every floor above and importing none."""
