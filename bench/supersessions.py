"""Updates found at write time, read back: which memories the store marked superseded, on data where it should not.

    python -m bench.supersessions [--datasets locomo] [--client plain] [--verbose] [--url URL]

LoCoMo's conversations are loaded as the chosen client stores them (bench/quality_data.py; the plain client adds
turn by turn with `session_id` and `timestamp`, as an agent would), at the defaults. A conversation states facts
and news, and hardly ever one that replaces an earlier one, so every supersession made is read as a suspect: the
figure is the share of turns marked superseded (a false one hides a true turn: its score halved, its successor
answering for it), and `--verbose` prints each pair (the older turn, the newer, the cue and the cosine) to read by
hand. `python -m bench.updates` measures the other side (the updates found).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.common import gateway_at
from bench.embedding_quality import DATA
from bench.quality_data import CLIENTS, load_locomo, memories, store


def supersessions(client: httpx.Client, tenant: str) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(older memory, newer memory, the change's detail) for each supersession of the tenant."""
    every = memories(client, tenant)
    by_id = {m["id"]: m for m in every}
    for memory in every:
        if memory["status"] != "superseded":
            continue
        history = client.get(f"/memory/{memory['id']}/history", params={"user_id": tenant}).json()["items"]
        for change in history:
            if change["event"] == "superseded" and change["other_id"] in by_id:
                yield memory, by_id[change["other_id"]], change["detail"]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.supersessions", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--client", default="plain", choices=CLIENTS, help="how memories are stored (default plain)")
    parser.add_argument("--provider", default="local", choices=["synthetic", "local", "static"])
    parser.add_argument("--url", help="use this running gateway instead of a private stack")
    parser.add_argument("--data", type=Path, default=DATA, help="evaluation data root (default ../shared/data)")
    parser.add_argument("--verbose", action="store_true", help="print every supersession")
    args = parser.parse_args()
    started = time.perf_counter()
    corpus = load_locomo(args.data, f"s{int(started) % 100000}-" if args.url else "", 0)
    with (
        gateway_at(args.url, provider=args.provider, database="bench_supersessions") as base,
        httpx.Client(base_url=base, timeout=300) as client,
    ):
        store(client, corpus, args.client, ["a"])
        total = made = 0
        for tenant in corpus.docs:
            stored = corpus.copy_tenant(tenant, "a")
            total += len(memories(client, stored))
            for older, newer, detail in supersessions(client, stored):
                made += 1
                if args.verbose:
                    print(f"- {detail.get('cue')!r} {detail.get('similarity')} margin {detail.get('margin')}")
                    print(f"    old: {older['content'][:150]}")
                    print(f"    new: {newer['content'][:150]}")
    print(f"LoCoMo ({args.client} client): {made} of {total} turns superseded ({made / max(total, 1):.2%})")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
