"""Costly inputs against the gateway, at the defaults (the local MiniLM model) and with the bounds lifted, in one
run: what one tenant's long-token texts cost the service and everyone else.

Each variant gets a stack of its own (gateway + worker) on one store, and measures:

  (a) one add of 99,000 `>` and one query of 16,000 `!` (99,000 and 16,000 tokens): status and seconds;
  (b) idle: another tenant's `GET /memory/all` and an anonymous `GET /health`, p50/p95 over --probes calls;
  (c) a burst: --burst concurrent adds of 3,000 `!` (3,000 tokens each, with a conversation in their metadata)
      from one tenant, while the other tenant lists and the probe checks health, one after another; the burst's
      answers by status, its wall time, the probes' p50/p95 against idle, the gateway's RSS before, at its most,
      and after.

`unbounded` lifts the token limits and opens the gateway's embedding gate (64 at once, a queue of 1,000): about the
gateway before the limits (its model arena is off in both; with it on, the process also kept what every peak took).

    python -m bench.costly_inputs                      # both variants, a burst of 45 (~5 min)
    python -m bench.costly_inputs --burst 16 --variants default
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil

from bench.common import StackUrl, fresh_database, percentiles, servers, stack

VARIANTS = {
    "default": {},
    "unbounded": {
        "MNEMOFLOW_MAX_CONTENT_TOKENS": "1000000",
        "MNEMOFLOW_MAX_QUERY_TOKENS": "1000000",
        "MNEMOFLOW_GATEWAY_EMBED_CONCURRENCY": "64",
        "MNEMOFLOW_GATEWAY_EMBED_QUEUE": "1000",
    },
}


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def rss_mb(pid: int) -> float:
    process = psutil.Process(pid)
    return (process.memory_info().rss + sum(c.memory_info().rss for c in process.children(recursive=True))) / 1e6


def timed(call) -> tuple[httpx.Response | None, float]:
    started = time.perf_counter()
    try:
        response = call()
    except httpx.HTTPError:
        response = None
    return response, (time.perf_counter() - started) * 1000


def probe_until(done: threading.Event, url: str, samples: dict[str, list[float]], errors: Counter) -> None:
    """Another tenant's list and an anonymous health check, one after the other, until `done`."""
    with httpx.Client(base_url=url, timeout=120) as http:
        while not done.is_set():
            for name, call in (
                ("list", lambda: http.get("/memory/all", params={"l": 1, "user_id": "quiet"})),
                ("health", lambda: http.get("/health")),
            ):
                response, ms = timed(call)
                samples[name].append(ms)
                if response is None or response.status_code != 200:
                    errors[f"{name} {response.status_code if response is not None else 'timeout'}"] += 1


def run_variant(label: str, url: StackUrl, burst: int, probes: int) -> dict[str, object]:
    with httpx.Client(base_url=url, timeout=600) as http:
        http.post("/memory/add", json={"content": "the quiet tenant's oars are in the boathouse", "user_id": "quiet"})
        http.post("/memory/add", json={"content": "warm-up " + "!" * 3_000, "user_id": "noisy"})
        single = {}
        for name, call in (
            ("add 99,000 '>'", lambda: http.post("/memory/add", json={"content": ">" * 99_000, "user_id": "noisy"})),
            ("query 16,000 '!'", lambda: http.post("/memory/query", json={"query": "!" * 16_000, "user_id": "noisy"})),
        ):
            response, ms = timed(call)
            single[name] = (response.status_code if response is not None else "timeout", ms / 1000)
        idle: dict[str, list[float]] = {"list": [], "health": []}
        for _ in range(probes):
            idle["list"].append(timed(lambda: http.get("/memory/all", params={"l": 1, "user_id": "quiet"}))[1])
            idle["health"].append(timed(lambda: http.get("/health"))[1])

    before = rss_mb(url.gateway_pid)
    peak = before
    loaded: dict[str, list[float]] = {"list": [], "health": []}
    errors: Counter = Counter()
    done = threading.Event()

    def add(i: int) -> int | str:
        with httpx.Client(base_url=url, timeout=600) as alice:
            body = {"content": f"{'!' * 3_000} {i}", "user_id": "noisy", "metadata": {"session_id": "flood"}}
            try:
                return alice.post("/memory/add", json=body).status_code
            except httpx.HTTPError as exc:
                return type(exc).__name__

    prober = threading.Thread(target=probe_until, args=(done, url, loaded, errors), daemon=True)
    started = time.perf_counter()
    prober.start()
    with ThreadPoolExecutor(max_workers=burst) as pool:
        futures = [pool.submit(add, i) for i in range(burst)]
        while not all(f.done() for f in futures):
            peak = max(peak, rss_mb(url.gateway_pid))
            time.sleep(0.2)
        statuses = Counter(f.result() for f in futures)
    wall = time.perf_counter() - started
    done.set()
    prober.join(120)
    after = rss_mb(url.gateway_pid)

    print(f"\n== {label}")
    for name, (status, seconds) in single.items():
        print(f"  {name:<18} {status} in {seconds:.2f} s")
    print(f"  burst of {burst} adds of 3,000 '!': {dict(statuses)} in {wall:.1f} s")
    for name in ("list", "health"):
        quiet, busy = percentiles(idle[name]), percentiles(loaded[name]) if loaded[name] else None
        if busy is None:
            print(f"  {name}: idle p50 {quiet['p50']:.1f} ms; no answer during the burst")
            continue
        print(
            f"  {name:<6} idle p50 {quiet['p50']:.1f} / p95 {quiet['p95']:.1f} ms; during the burst p50 "
            f"{busy['p50']:.1f} / p95 {busy['p95']:.1f} ms ({busy['p95'] / quiet['p95']:.1f}x idle p95, "
            f"{len(loaded[name])} calls)"
        )
    if errors:
        print(f"  probe failures: {dict(errors)}")
    print(f"  gateway RSS: {before:.0f} MB before, {peak:.0f} MB at most, {after:.0f} MB after")
    return {"statuses": statuses, "rss": (before, peak, after)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=45, help="concurrent costly adds [45]")
    parser.add_argument("--probes", type=int, default=50, help="idle probe calls of each kind [50]")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    with servers() as srv, environment({"MNEMOFLOW_EMBEDDING_PROVIDER": "local"}):
        for label in args.variants:
            database = fresh_database(srv.admin_url, f"bench_costly_{label}")
            with environment(VARIANTS[label]), stack(database, srv.redis_url) as url:
                run_variant(label, url, args.burst, args.probes)


if __name__ == "__main__":
    main()
