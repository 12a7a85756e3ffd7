"""Identical idempotent batches sent at once, against the real gateway: every one is answered with the one job the
first made (202, "queued" for it and "existing" for the rest); none is a 503 while it waits for that first one.
Before, some got 503 (they waited on the first one's uncommitted row past the gateway's lock timeout) and most
429 (each identical retry was charged the batch's writes again)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import text

pytestmark = pytest.mark.e2e

SENDERS = 50


def test_fifty_identical_idempotent_batches_at_once_get_one_job(gateway, maintenance, tenant):
    items = [
        {"content": f"Crate {n} of the night's shipment left dock {n % 7}", "tags": ["dock"]} for n in range(10000)
    ]
    body = {"items": items, "user_id": tenant, "idempotency_key": "nightly-import"}

    def send(_: int) -> httpx.Response:
        with httpx.Client(base_url=gateway, timeout=120) as client:
            return client.post("/memory/batch", json=body)

    with ThreadPoolExecutor(SENDERS) as pool:
        responses = list(pool.map(send, range(SENDERS)))
    answers = [(r.status_code, r.json().get("job_id"), r.json().get("status")) for r in responses]
    refused = [r for r in responses if r.status_code != 202]
    assert not refused, (Counter(r.status_code for r in refused), [r.text for r in refused[:2]])
    assert len({job for _, job, _ in answers}) == 1
    assert sorted(status for _, _, status in answers) == ["existing"] * (SENDERS - 1) + ["queued"]
    with maintenance.session() as session:
        jobs = session.execute(text("SELECT count(*) FROM jobs WHERE user_id = :u"), {"u": tenant}).scalar()
    assert jobs == 1
