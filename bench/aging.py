"""Recall after time passes: LoCoMo asked after 30 and 90 days of the product's own decay.

    python -m bench.aging [--days 30,90] [--provider local]

Loads LoCoMo's conversations through the public API as a native client does (`bench.quality --client native`),
one copy of each conversation per age. The fresh copy is asked read-only first. Then the clock is advanced one
day at a time and each day's scheduled decay cycle runs at that simulated time, with the shipped cadence and
ratio (a daily cycle over 3 % of each sector: MNEMOFLOW_DECAY_* / OM_DECAY_*): tiers, decay, compression and
fingerprints, as the beat job does. On the day of each age its copy's times are moved that many days back (the
gateway answers at the wall clock, so its memories are then as old to a query as they were to the cycles), and
it is asked every question at the defaults
(k = 10, reinforcement and regeneration on, as a user asks), in order, so a question may find what an earlier
one regenerated. Printed per age: R@5 / R@10 beside the fresh figure, and the share of the questions' gold
memories that decay had compressed or fingerprinted before the questions were asked.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import text

from bench.common import fresh_database, servers, stack
from bench.embedding_quality import DATA
from bench.quality import Scores, ask_all
from bench.quality_data import load_locomo, memories, store
from shared.api.common import SECTORS
from shared.config import Settings
from shared.db import Database, create_db_engine
from shared.lifecycle.decay_cycle import CycleOptions, DecayCycle
from shared.tenancy import DbRole


def compression_of(database: Database, tenants: list[str]) -> dict[str, str]:
    """memory id -> its compression state (full, compressed, fingerprint)."""
    with database.session() as session:
        rows = session.execute(
            text("SELECT id::text, compression FROM memories WHERE user_id = ANY(:t)"), {"t": tenants}
        ).all()
    return {memory_id: state for memory_id, state in rows}


def shift_back(database: Database, tenants: list[str], days: int) -> None:
    with database.session() as session:
        session.execute(
            text(
                "UPDATE memories SET last_seen_at = last_seen_at - make_interval(days => :d), "
                "created_at = created_at - make_interval(days => :d), "
                "updated_at = updated_at - make_interval(days => :d), "
                "last_used_at = last_used_at - make_interval(days => :d) WHERE user_id = ANY(:t)"
            ),
            {"d": days, "t": tenants},
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.aging", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--provider", default="local", choices=["synthetic", "local", "static"])
    parser.add_argument("--days", default="30,90", help="ages to ask at, comma-separated (default %(default)s)")
    parser.add_argument("--limit-queries", type=int, default=0)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    ages = sorted({int(d) for d in args.days.split(",") if d.strip()})
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider
    corpus = load_locomo(args.data, "", args.limit_queries)
    copies = ["", *(f"d{age}" for age in ages)]
    with servers() as srv:
        url = fresh_database(srv.admin_url, "bench_aging")
        settings = Settings(database_url=url, redis_url=srv.redis_url, embedding_provider=args.provider)
        # store-wide: every copy's rows, and the decay cycle as its task runs it
        database = Database(create_db_engine(settings, "mnemoflow.aging", pool_size=2, role=DbRole.MAINTENANCE))
        with stack(url, srv.redis_url) as base, httpx.Client(base_url=base, timeout=300) as client:
            health = client.get("/health").json()["embedding"]
            mapping, seconds = store(client, corpus, "native", copies)
            print(
                f"provider {health['provider']}; {len(copies)} copies of LoCoMo stored in {seconds:.0f} s", flush=True
            )
            fresh = ask_all(client, corpus, mapping)
            print(f"  fresh   R@5 {fresh.mean('all:R@5'):.3f} R@10 {fresh.mean('all:R@10'):.3f}", flush=True)
            full_dims = dict.fromkeys(SECTORS, int(health["dimensions"]))
            cycle = DecayCycle(database, settings, full_dims)
            start = datetime.now(UTC)
            rows: list[tuple[int, Scores, Scores, float, float, dict[str, int]]] = []
            day = 0
            for age in ages:
                started = time.perf_counter()
                while day < age:
                    day += 1
                    cycle.run(options=CycleOptions(trigger="operator", now=start + timedelta(days=day)))
                tenants = [corpus.copy_tenant(t, f"d{age}") for t in corpus.docs]
                # The gateway answers at the wall clock: the copy's times move `age` days back, so a query now sees
                # its memories as old as the decay cycles saw them (recency, and salience decayed to query time).
                shift_back(database, tenants, age)
                states = compression_of(database, tenants)
                gold_memories = {
                    memory_id
                    for tenant in tenants
                    for memory_id, docs in mapping[tenant].items()
                    if docs & {g for q in corpus.questions for g in q.gold}
                }
                counts = {
                    s: sum(1 for m in gold_memories if states.get(m) == s) for s in ("compressed", "fingerprinted")
                }
                untouched = ask_all(client, corpus, mapping, copy=f"d{age}")
                print(
                    f"  {age:>3} days, read-only R@5 {untouched.mean('all:R@5'):.3f} "
                    f"R@10 {untouched.mean('all:R@10'):.3f}; gold memories compressed {counts['compressed']}, "
                    f"fingerprinted {counts['fingerprinted']} of {len(gold_memories)}",
                    flush=True,
                )
                scores = ask_all(client, corpus, mapping, copy=f"d{age}", reinforce=True)
                time.sleep(2)  # let the last regenerations land before counting
                regenerated = compression_of(database, tenants)
                back = sum(1 for m in gold_memories if states.get(m) != "full" and regenerated.get(m) == "full")
                decayed = counts["compressed"] + counts["fingerprinted"]
                rows.append(
                    (
                        age,
                        scores,
                        untouched,
                        counts["compressed"] / len(gold_memories),
                        counts["fingerprinted"] / len(gold_memories),
                        {"regenerated": back, "decayed": decayed},
                    )
                )
                print(
                    f"  {age:>3} days R@5 {scores.mean('all:R@5'):.3f} R@10 {scores.mean('all:R@10'):.3f}  "
                    f"(decay to day {age} and questions: {time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
            salience = {
                tenant: sum(m["salience"] for m in memories(client, tenant)) / max(1, len(mapping[tenant]))
                for tenant in [corpus.copy_tenant(t, f"d{ages[-1]}") for t in corpus.docs]
            }
        database.dispose()
    print(f"\nLoCoMo after time passes (provider {args.provider}, {len(corpus.questions)} questions, k = 10)")
    print(
        "| age | R@5 | R@10 | read-only R@5 / R@10 | gold memories compressed | fingerprinted "
        "| decayed gold memories regenerated by the questions |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| fresh | {fresh.mean('all:R@5'):.3f} | {fresh.mean('all:R@10'):.3f} | | 0 % | 0 % | |")
    for age, scores, untouched, compressed, fingerprinted, extra in rows:
        print(
            f"| {age} days | {scores.mean('all:R@5'):.3f} | {scores.mean('all:R@10'):.3f} | "
            f"{untouched.mean('all:R@5'):.3f} / {untouched.mean('all:R@10'):.3f} | {compressed:.0%} | "
            f"{fingerprinted:.0%} | {extra['regenerated']} of {extra['decayed']} |"
        )
    print(f"mean salience after {ages[-1]} days (after its questions): {sum(salience.values()) / len(salience):.3f}")


if __name__ == "__main__":
    main()
