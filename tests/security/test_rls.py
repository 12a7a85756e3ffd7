"""Row-level security on a store of its own: the app role sees one tenant's rows or none, the maintenance role sees
the store, neither owns a table or bypasses the policies, and foreign keys refuse another tenant's ids."""

from __future__ import annotations

import hashlib
import io
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, ProgrammingError

from shared.api.memories import MemoryCreate
from shared.db import Database, create_db_engine, schema_session
from shared.embedding import SyntheticEmbedder
from shared.ingest import intake, sniff
from shared.jobs import ChunkSpec
from shared.lifecycle.decay_cycle import CycleOptions, DecayCycle
from shared.memory import summaries
from shared.memory.digest import SummaryParams
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.storage import decay_steps, selected
from shared.storage import jobs as job_store
from shared.storage.rows import SectorVector, occurred_sql
from shared.tenancy import DbRole, require_role

pytestmark = pytest.mark.integration

# Every table that holds a tenant's rows, as migration 0013 protects it.
TENANT_TABLES = [
    "memories",
    "memory_vectors",
    "fresh_codes",
    "waypoints",
    "term_stats",
    "tenant_stats",
    "conversation_heads",
    "documents",
    "document_uploads",
    "jobs",
    "job_chunks",
    "user_summaries",
    "memory_text",
    "memory_history",
]
# What each of the tenant's memories is about: every sector gets vectors.
CONTENTS = [
    "I feel so happy and excited today, I love this!!",
    "How to restart the VPN: open settings, then step by step reconnect",
    "Yesterday I met Ana at the station and we talked for an hour",
    "Looking back, I think the lesson I learned is to be patient",
    "The capital of France is Paris, a fact from geography",
]
ANNA, BORIS = "anna", "boris"


def two_tenants(make_store, settings, name: str) -> tuple[Database, Database, MemoryEngine]:
    """A store of its own with two tenants' rows in every tenant table: (app role, maintenance role, engine)."""
    url, app = make_store(name)
    _, maintenance = make_store(name, role=DbRole.MAINTENANCE)
    engine = MemoryEngine(settings.model_copy(update={"database_url": url}), SyntheticEmbedder(dim=384))
    for tenant in (ANNA, BORIS):
        populate(app.bound(tenant), engine, tenant)
    return app, maintenance, engine


@pytest.fixture(scope="module")
def store(make_store, settings):
    return two_tenants(make_store, settings, "rls")


def populate(db: Database, engine: MemoryEngine, tenant: str) -> None:
    """As the tenant's requests would: memories of one conversation (vectors, a `next` waypoint, its head, BM25
    statistics), one stored in bulk (its vectors fresh, with their codes), a batch job with its chunk, an uploaded
    document with its job and staged bytes, the summary of its memories, and an edit in a memory's history."""
    for content in CONTENTS:
        with db.session() as s:
            engine.add(s, tenant, MemoryCreate(content=f"{tenant}: {content}", metadata={"session_id": "s1"}))
    with db.session() as s:  # a bulk write's memory, waiting in the fresh tier for its merge (with its code)
        prepared, _ = engine.prepare([MemoryCreate(content=f"{tenant}: a note stored in bulk")], tenant)
        engine.store(s, prepared, settle=False)
    with db.session() as s:
        job_id, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=1, params={}, idempotency_key=None)
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", [{"content": "pending"}])])
    data = f"{tenant}'s notes on the harbour".encode()
    with db.session() as s:
        intake.accept_upload(
            s,
            user_id=tenant,
            source=io.BytesIO(data),
            digest=hashlib.sha256(data).hexdigest(),
            size=len(data),
            fmt=sniff(data),
            filename="notes.txt",
            declared_type=None,
            params={},
        )
    with db.session() as s:
        summaries.build(s, tenant, SummaryParams())
    with db.session() as s:  # a content edit leaves the earlier content in the memory's history
        first = s.execute(text("SELECT id FROM memories WHERE user_id = :u ORDER BY created_at LIMIT 1"), {"u": tenant})
        engine.update(s, tenant, first.scalar_one(), {"content": f"{tenant}: {CONTENTS[0]} (edited)"})


def count(session, table: str, tenant: str | None = None) -> int:
    """Rows of `table` the session sees (of `tenant` when given: job_chunks and uploads through their parent)."""
    if tenant is None:
        return session.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
    parent = {"job_chunks": ("jobs", "job_id"), "document_uploads": ("documents", "document_id")}.get(table)
    where = f"{parent[1]} IN (SELECT id FROM {parent[0]} WHERE user_id = :u)" if parent else "user_id = :u"
    return session.execute(text(f"SELECT count(*) FROM {table} WHERE {where}"), {"u": tenant}).scalar_one()


def test_every_table_with_a_tenant_column_has_row_level_security(store):
    _, maintenance, _ = store
    with maintenance.session() as s:
        unprotected = s.execute(
            text(
                """
                SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
                WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
                  AND a.attname = 'user_id' AND NOT c.relrowsecurity
                """
            )
        ).scalars()
        protected = set(
            s.execute(
                text(
                    "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
                    "AND relrowsecurity"
                )
            ).scalars()
        )
    assert list(unprotected) == []
    assert protected == set(TENANT_TABLES) - {"memory_text"}  # the view reads the tenant's rows itself


@pytest.mark.parametrize("role", [DbRole.APP, DbRole.MAINTENANCE])
def test_the_roles_neither_own_a_table_nor_bypass_row_level_security(store, role):
    app, maintenance, _ = store
    with (app if role is DbRole.APP else maintenance).session() as s:
        me = s.execute(
            text(
                "SELECT current_user AS name, r.rolsuper, r.rolbypassrls, r.rolcanlogin "
                "FROM pg_roles r WHERE r.rolname = current_user"
            )
        ).one()
        owned = s.execute(
            text(
                "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
                "AND pg_has_role(current_user, relowner, 'USAGE')"
            )
        ).scalar_one()
    assert (me.name, me.rolsuper, me.rolbypassrls, me.rolcanlogin) == (role.value, False, False, False)
    assert owned == 0  # no table, index, view or sequence of the store is the role's own (or its members')


def test_without_a_tenant_the_app_role_sees_no_row_of_any_tenant_table(store):
    app, maintenance, _ = store
    with maintenance.session() as s:
        there = {table: count(s, table) for table in TENANT_TABLES if table != "memory_text"}
    assert all(there.values()), there  # both tenants have rows in every table
    with app.session() as s:
        seen = {table: count(s, table) for table in TENANT_TABLES}
    with app.reading() as s:  # the read path's autocommit statements too
        read = {table: count(s, table) for table in TENANT_TABLES}
    assert set(seen.values()) == set(read.values()) == {0}, (seen, read)


def test_a_tenant_sees_and_changes_only_its_own_rows(store):
    app, maintenance, engine = store
    with maintenance.session() as s:
        boris_rows = {table: count(s, table, BORIS) for table in TENANT_TABLES if table != "memory_text"}
        boris_memory = s.execute(text("SELECT id FROM memories WHERE user_id = :u LIMIT 1"), {"u": BORIS}).scalar()
    anna = app.bound(ANNA)
    with anna.session() as s:
        mine = {table: count(s, table, ANNA) for table in TENANT_TABLES}
        theirs = {table: count(s, table, BORIS) for table in TENANT_TABLES}
        # asked for boris's rows outright, by id: nothing to read, nothing to change
        assert s.execute(text("SELECT count(*) FROM memories WHERE id = :id"), {"id": boris_memory}).scalar() == 0
        changed = s.execute(
            text("UPDATE memories SET salience = 0 WHERE user_id = :u OR id = :id"), {"u": BORIS, "id": boris_memory}
        )
        assert changed.rowcount == 0
        assert s.execute(text("DELETE FROM jobs WHERE user_id = :u"), {"u": BORIS}).rowcount == 0
    assert all(mine.values()) and set(theirs.values()) == {0}, (mine, theirs)
    with pytest.raises(ProgrammingError, match="row-level security"), anna.session() as s:  # nor to write as him
        engine.add(s, BORIS, MemoryCreate(content="written into boris's memories by anna's request"))
    with pytest.raises(ProgrammingError, match="permission denied"), anna.session() as s:  # nor store-wide tables
        s.execute(text("SELECT count(*) FROM decay_runs"))
    with maintenance.session() as s:
        assert {table: count(s, table, BORIS) for table in boris_rows} == boris_rows  # all of his rows still there


def test_a_query_missing_its_tenant_condition_still_reads_only_the_tenant(store):
    # selected.primary_vectors looks memories up by id alone (the read path asks it only for its own hits): given
    # another tenant's id, row-level security answers for the missing condition.
    app, maintenance, engine = store
    with maintenance.session() as s:
        ids = {
            tenant: s.execute(
                text("SELECT id FROM memories WHERE user_id = :u AND primary_sector = 'semantic'"), {"u": tenant}
            )
            .scalars()
            .all()
            for tenant in (ANNA, BORIS)
        }
    query = {"semantic": SectorVector(engine.embedder.model, engine.embedder.embed(["Paris"])[0])}
    with app.reading(ANNA) as s:
        found = selected.primary_vectors(s, ids[ANNA] + ids[BORIS], query)
    assert ids[BORIS] and set(found) == set(ids[ANNA])


def test_the_maintenance_role_decays_every_tenant_and_the_app_role_only_its_own(make_store, settings):
    app, maintenance, _ = two_tenants(make_store, settings, "rls_decay")  # decayed: a store of its own
    later = datetime.now(UTC) + timedelta(days=60)
    params = decay_steps.DecayParams(
        rules=settings.tiers, sector_scaling=True, compress_below=0.0, cold_threshold=0.0, full_dim=384, min_dim=384
    )

    def step(db: Database) -> int:
        with db.session() as s:
            result = decay_steps.decay_step(
                s,
                "semantic",
                after=decay_steps.MIN_UUID,
                upto=decay_steps.MAX_UUID,
                limit=1000,
                now=later,
                params=params,
            )
            s.rollback()  # counted, not kept
        return result.processed

    with maintenance.session() as s:
        semantic = dict(
            s.execute(text("SELECT user_id, count(*) FROM memories WHERE primary_sector = 'semantic' GROUP BY 1")).all()
        )
    assert semantic[ANNA] and semantic[BORIS]
    assert step(maintenance) == semantic[ANNA] + semantic[BORIS]
    assert step(app.bound(ANNA)) == semantic[ANNA]
    assert step(app) == 0

    def salience(db: Database) -> dict[uuid.UUID, tuple[str, float]]:
        with db.session() as s:
            return {
                r.id: (r.user_id, r.salience) for r in s.execute(text("SELECT id, user_id, salience FROM memories"))
            }

    before = salience(maintenance)
    run = DecayCycle(maintenance, settings, dict.fromkeys(SECTORS, 384)).run(
        options=CycleOptions(trigger="operator", ratio=1.0, now=later)
    )
    after = salience(maintenance)
    decayed = [before[i][0] for i in before if after[i][1] < before[i][1]]
    assert run["status"] == "succeeded" and run["processed"] == len(before)
    memories = len(CONTENTS) + 1  # and the one stored in bulk
    assert sorted(decayed) == [ANNA] * memories + [BORIS] * memories


def test_foreign_keys_refuse_a_link_or_a_vector_to_another_tenants_memory(store):
    # The maintenance role sees both tenants, so no policy stands in the way: the keys alone refuse.
    _, maintenance, _ = store
    with maintenance.session() as s:
        memory = {
            tenant: s.execute(text("SELECT id FROM memories WHERE user_id = :u LIMIT 1"), {"u": tenant}).scalar()
            for tenant in (ANNA, BORIS)
        }
        document = s.execute(text("SELECT id FROM documents WHERE user_id = :u"), {"u": BORIS}).scalar()
    attempts = {
        "waypoints_dst_id_tenant_fkey": (
            "INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, 'anna', 0.5)"
        ),
        "memory_vectors_memory_id_tenant_fkey": (
            "INSERT INTO memory_vectors (memory_id, sector, user_id, dim, model, embedding) "
            "VALUES (:b, 'semantic', 'anna', 3, 'm', '[1,2,3]')"
        ),
        "memories_document_id_tenant_fkey": "UPDATE memories SET document_id = :d WHERE id = :a",
    }
    for constraint, statement in attempts.items():
        with pytest.raises(IntegrityError, match=constraint), maintenance.session() as s:
            s.execute(text(statement), {"a": memory[ANNA], "b": memory[BORIS], "d": document})


def test_a_tenant_set_on_a_connection_never_outlives_its_unit_of_work(settings, make_store):
    # One connection, reused by turns: a read for anna (the tenant stays on the connection between its
    # autocommit statements), a transaction for boris, then units with no tenant, which must see nothing.
    url, _ = make_store("rls")
    one = Database(create_db_engine(settings.model_copy(update={"database_url": url}), "tests.rls", pool_size=1))
    try:
        seen: list[tuple[int, int]] = []

        def visible(session) -> None:
            pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
            seen.append((pid, session.execute(text("SELECT count(*) FROM memories")).scalar_one()))

        for unit in (
            lambda: one.reading(ANNA),
            lambda: one.session(),
            lambda: one.session(BORIS),
            lambda: one.reading(),
            lambda: one.reading(ANNA),
            lambda: one.bound(BORIS).reading(),
            lambda: one.session(),
        ):
            with unit() as s:
                visible(s)
        with pytest.raises(ProgrammingError), one.session(ANNA) as s:  # a failed transaction ...
            visible(s)
            s.execute(text("SELECT no_such_column FROM memories"))
        with one.reading() as s:  # ... leaves nothing behind either
            visible(s)
    finally:
        one.dispose()
    assert len({pid for pid, _ in seen}) == 1  # the same connection throughout
    n = len(CONTENTS) + 1  # a tenant's memories: its conversation's and the one stored in bulk
    assert [count for _, count in seen] == [n, 0, n, 0, n, n, 0, n, 0]


def test_a_connection_that_does_not_act_as_its_role_is_refused(settings, make_store):
    # As if a connection pooler had dropped the start-up option: the connection would act as the owner.
    url, _ = make_store("rls")
    engine = create_db_engine(settings.model_copy(update={"database_url": url}), "tests.rls", role=DbRole.OWNER)
    require_role(engine, DbRole.APP)
    try:
        with pytest.raises(RuntimeError, match="not 'mnemoflow_app'"):
            engine.connect()
    finally:
        engine.dispose()


def test_the_read_paths_indexes_stay_usable_under_row_level_security(make_store, settings):
    # Under a policy the planner uses an index for a condition only if it cannot leak (leakproof). The full-text
    # match (ts_match_vq) is not: through memory_text (a view with the tenant's condition of its own) the GIN index
    # stays usable. COALESCE is not either: when a memory happened is indexed, and asked, as a CASE.
    url, app = make_store("rls_text")
    with schema_session(settings.model_copy(update={"database_url": url}), "tests.rls") as s:  # a tenant of 3,000
        s.execute(
            text(
                "INSERT INTO memories (user_id, content, content_hash, primary_sector, sectors, salience, "
                "decay_lambda) SELECT 'clara', 'word' || g || ' and some common text', md5(g::text), 'semantic', "
                "ARRAY['semantic'], 0.5, 0.01 FROM generate_series(1, 3000) g"
            )
        )
        s.execute(text("ANALYZE memories"))

    def plan(sql: str) -> str:
        with app.reading("clara") as s:
            return "\n".join(s.execute(text(f"EXPLAIN {sql}"), {"u": "clara", "q": "word123"}).scalars())

    text_search = "SELECT id FROM {} m WHERE m.user_id = :u AND m.search @@ CAST(:q AS tsquery)"
    assert "memories_search_gin" in plan(text_search.format("memory_text"))
    assert "memories_search_gin" not in plan(text_search.format("memories"))
    period = (
        "SELECT id FROM memories m WHERE m.user_id = :u AND {0} >= now() - interval '2 days' "
        "AND {0} < now() - interval '1 day' ORDER BY {0} DESC LIMIT 10"
    )
    assert "memories_user_happened" in plan(period.format(occurred_sql("m")))
    assert "memories_user_happened" not in plan(period.format("COALESCE(m.occurred_at, m.created_at)"))
