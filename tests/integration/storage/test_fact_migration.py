"""Migration 0029 hashes the facts of a store's existing memories: the oldest phrasing of a fact gets the hash, later
phrasings keep none (a migration merges nothing), each tenant apart; afterwards a new phrasing is the oldest one."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from infra.embedded import recreate_database
from infra.migrate import upgrade
from shared.config import normalize_database_url
from shared.text import fact_hash, normalize_content

pytestmark = pytest.mark.integration

ROWS = [  # (user, content, stored at)
    ("alice", "In the morning Alice likes green tea.", "2026-01-02"),
    ("alice", "Alice likes green tea in the morning.", "2026-01-01"),  # the oldest phrasing
    ("alice", "alice likes green tea in the morning", "2026-01-03"),
    ("alice", "Alice likes green tea in the evening.", "2026-01-04"),
    ("bob", "alice likes green tea in the morning", "2026-01-05"),  # another tenant's
]


def test_the_oldest_phrasing_of_each_tenant_s_fact_gets_the_hash(servers):
    url = recreate_database(servers["admin_url"], "mnemoflow_test_fact_hash")
    upgrade(url, "0028")
    engine = create_engine(normalize_database_url(url))
    try:
        with engine.begin() as connection:
            for user_id, content, at in ROWS:
                connection.execute(
                    text(
                        "INSERT INTO memories (user_id, content, primary_sector, sectors, content_hash, salience, "
                        "decay_lambda, created_at) VALUES (:u, :c, 'semantic', ARRAY['semantic'], md5(:c), 0.5, "
                        "0.005, CAST(:at AS timestamptz))"
                    ),
                    {"u": user_id, "c": content, "at": at},
                )
        upgrade(url)
        with engine.begin() as connection:
            hashed = dict(
                connection.execute(
                    text("SELECT user_id || ' ' || content, fact_hash FROM memories ORDER BY created_at")
                ).all()
            )
            morning = fact_hash(normalize_content(ROWS[1][1]))
            assert hashed == {
                "alice Alice likes green tea in the morning.": morning,
                "alice In the morning Alice likes green tea.": None,
                "alice alice likes green tea in the morning": None,
                "alice Alice likes green tea in the evening.": fact_hash(normalize_content(ROWS[3][1])),
                "bob alice likes green tea in the morning": morning,
            }
            with pytest.raises(IntegrityError, match="memories_user_fact"), connection.begin_nested():
                connection.execute(
                    text(
                        "INSERT INTO memories (user_id, content, primary_sector, sectors, content_hash, "
                        "fact_hash, salience, decay_lambda) VALUES ('alice', 'x', 'semantic', ARRAY['semantic'], "
                        "'x', :f, 0.5, 0.005)"
                    ),
                    {"f": morning},
                )
    finally:
        engine.dispose()
