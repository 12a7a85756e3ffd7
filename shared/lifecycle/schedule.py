"""When and how the decay cycle runs (decay seed, "Decay Process Lifecycle"); `Settings.decay` builds it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DecaySchedule:
    """The cycle's cadence and manners. Defaults are the decay seed's (OpenMemory's OM_DECAY_* names work)."""

    interval_minutes: float = 1440.0  # OM_DECAY_INTERVAL_MINUTES: a scheduled cycle this often
    ratio: float = 0.03  # OM_DECAY_RATIO: the share of each sector segment a cycle processes
    threads: int = 3  # OM_DECAY_THREADS: segments decayed at once
    sleep_ms: int = 200  # OM_DECAY_SLEEP_MS: pause between segments
    cooldown_seconds: float = 60.0  # a scheduled cycle is skipped this soon after the last one finished
    # A scheduled cycle that finds queries active tries again this often, this many times, then skips the interval.
    defer_seconds: float = 60.0
    max_deferrals: int = 30
    # Scale the tier's lambda by the memory's sector rate relative to the mean sector rate (architecture seed 2.3).
    sector_scaling: bool = True
    # How long a query counts as active for the cycle if its gateway dies before saying it finished.
    active_query_ttl_seconds: float = 30.0
