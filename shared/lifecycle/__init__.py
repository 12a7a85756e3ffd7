"""The memory lifecycle (decay seed): tiers, decay, compression, fingerprints, regeneration, and the cycles."""
