"""The read path against real PostgreSQL + pgvector: candidates, waypoints, scoring, selection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.api.query import QueryFilters, RetrievalOptions
from shared.embedding import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.retrieval.service import Retriever
from shared.storage import memories as memory_store
from shared.storage import waypoints as waypoint_store
from tests.integration.helpers import add, query, search

pytestmark = pytest.mark.integration


def test_query_finds_by_words_and_ranks_the_relevant_memory_first(db, engine, tenant, retriever):
    add(db, engine, tenant, "The staging database password rotates every Monday")
    add(db, engine, tenant, "Bob's birthday party is on the 14th of March")
    add(db, engine, tenant, "Use pnpm instead of npm in the frontend repository")
    outcome = query(db, retriever, tenant, "when is Bob's birthday?")
    assert outcome.matches, "expected at least one match"
    best, row = outcome.matches[0]
    assert "birthday" in row["content"]
    assert best.lexical_rank == 1 and best.dense_rank is not None
    assert set(best.components) >= {"similarity", "salience", "recency", "waypoint"}


def test_tenants_never_see_each_other(db, engine, tenant, retriever):
    other = f"{tenant}-other"
    add(db, engine, other, "Secret launch code for project falcon is 4471")
    add(db, engine, tenant, "Project falcon status meeting moved to Thursday")
    outcome = query(db, retriever, tenant, "project falcon launch code")
    contents = [row["content"] for _, row in outcome.matches]
    assert contents == ["Project falcon status meeting moved to Thursday"]


@pytest.mark.parametrize("kind", ["association", "next"])  # `next`: a document's reading order
def test_one_hop_waypoint_surfaces_a_memory_with_no_direct_hit(db, engine, tenant, kind, retriever):
    seed, _ = add(db, engine, tenant, "Kubernetes cluster upgrade scheduled for Saturday night")
    linked, _ = add(db, engine, tenant, "Remember to notify the on-call rotation beforehand")
    with db.session() as s:
        s.execute(text("DELETE FROM waypoints WHERE user_id = :u"), {"u": tenant})  # only the link made here
        s.execute(
            text("INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight) VALUES (:a, :b, :u, :k, 0.9)"),
            {"a": seed["id"], "b": linked["id"], "u": tenant, "k": kind},
        )
    outcome = query(db, retriever, tenant, "kubernetes cluster upgrade")
    by_id = {c.id: c for c, _ in outcome.matches}
    assert seed["id"] in by_id and linked["id"] in by_id
    hop = by_id[linked["id"]]
    assert hop.hops == 1 and hop.via == seed["id"] and hop.waypoint_weight == pytest.approx(0.9)
    assert hop.lexical_rank is None and hop.path == [str(seed["id"]), str(linked["id"])]
    assert (seed["id"], linked["id"]) in outcome.traversed


def test_activation_reaches_two_hops_and_reinforces_each_link_walked(db, engine, tenant, retriever):
    seed, _ = add(db, engine, tenant, "Kubernetes cluster upgrade scheduled for Saturday night")
    mid, _ = add(db, engine, tenant, "Remember to notify the on-call rotation beforehand")
    far, _ = add(db, engine, tenant, "Priya carries the pager this month")
    with db.session() as s:
        for src, dst in ((seed["id"], mid["id"]), (far["id"], mid["id"])):  # the second against the walk
            s.execute(
                text("INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.9)"),
                {"a": src, "b": dst, "u": tenant},
            )
    with db.session() as s:  # full-text seeds only: the far memory can come in through the links alone
        outcome = search(
            retriever,
            s,
            tenant,
            "kubernetes cluster upgrade",
            k=8,
            filters=QueryFilters(),
            options=RetrievalOptions(dense=False),
        )
    by_id = {c.id: c for c, _ in outcome.matches}
    reached = by_id[far["id"]]
    assert reached.hops == 2 and reached.path == [str(seed["id"]), str(mid["id"]), str(far["id"])]
    assert reached.lexical_rank is None and reached.waypoint_weight == pytest.approx(0.81)
    assert {(seed["id"], mid["id"]), (mid["id"], far["id"])} <= set(outcome.traversed)
    assert by_id[mid["id"]].hops == 1


def test_each_stage_can_be_switched_off(db, engine, tenant, retriever):
    seed, _ = add(db, engine, tenant, "Kubernetes cluster upgrade scheduled for Saturday night")
    linked, _ = add(db, engine, tenant, "Remember to notify the on-call rotation beforehand")
    add(db, engine, tenant, "Quarterly revenue rose by four percent")
    with db.session() as s:
        s.execute(
            text("INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.9)"),
            {"a": seed["id"], "b": linked["id"], "u": tenant},
        )

    def ask(**options):
        with db.session() as s:
            return search(
                retriever,
                s,
                tenant,
                "kubernetes upgrade",
                k=8,
                filters=QueryFilters(),
                options=RetrievalOptions(**options),
            ).matches

    lexical_only = ask(dense=False, waypoints=False, rank="fusion")
    assert [c.id for c, _ in lexical_only] == [seed["id"]]  # the one memory with the words
    assert lexical_only[0][0].dense_rank is None and lexical_only[0][0].score == lexical_only[0][0].rrf_score
    dense_only = ask(lexical=False, waypoints=False, rank="fusion")
    assert all(c.lexical_rank is None and c.dense_rank is not None for c, _ in dense_only)
    assert [c.rrf_score for c, _ in dense_only] == sorted((c.rrf_score for c, _ in dense_only), reverse=True)
    assert linked["id"] not in {c.id for c, _ in ask(dense=False, waypoints=False)}
    assert linked["id"] in {c.id for c, _ in ask(dense=False)}  # only through the waypoint
    with pytest.raises(ValueError, match="at least one of lexical and dense"):
        RetrievalOptions(lexical=False, dense=False)


def test_diversity_lets_a_different_memory_pass_a_near_duplicate(db, engine, tenant, retriever):
    first, _ = add(db, engine, tenant, "I prefer Python for data science projects")
    twin, _ = add(db, engine, tenant, "I prefer Python for data science work")
    other, _ = add(db, engine, tenant, "Our team is small: three engineers on data projects")

    def ranked(**kw):
        with db.session() as s:
            outcome = search(retriever, s, tenant, "python data science preference", k=3, filters=QueryFilters(), **kw)
        return outcome.matches

    plain = [c.id for c, _ in ranked()]
    assert plain == [first["id"], twin["id"], other["id"]]
    diverse = ranked(diversity=0.5)
    assert [c.id for c, _ in diverse] == [first["id"], other["id"], twin["id"]]
    redundancy = {c.id: c.components["redundancy"] for c, _ in diverse}
    assert redundancy[first["id"]] == 0.0 and redundancy[twin["id"]] > redundancy[other["id"]]
    assert [c.id for c, _ in ranked(diversity=1.0)] == plain  # lambda 1: relevance alone


def test_the_weaker_of_two_contradicting_memories_is_demoted(db, engine, tenant, retriever):
    old, _ = add(db, engine, tenant, "The office wifi password is tulip42", salience=0.3)
    new, _ = add(db, engine, tenant, "The office wifi password is orchid77", salience=0.9)

    def scores(**options):
        with db.session() as s:
            outcome = search(
                retriever,
                s,
                tenant,
                "office wifi password",
                k=5,
                filters=QueryFilters(min_score=0),
                options=RetrievalOptions(**options),
            )
        return {c.id: c for c, _ in outcome.matches}

    before = scores()
    with db.session() as s:
        assert waypoint_store.create_link(s, tenant, new["id"], old["id"], kind="contradicts", weight=1.0)
    after = scores()
    assert after[old["id"]].score == pytest.approx(before[old["id"]].score * 0.3)
    assert after[old["id"]].components["conflict_penalty"] == 0.3
    assert after[new["id"]].score == pytest.approx(before[new["id"]].score)  # the stronger one keeps its score

    with db.session() as s:  # supersedes marks the older memory; OpenMem's status penalty halves it
        assert waypoint_store.create_link(s, tenant, new["id"], old["id"], kind="supersedes", weight=1.0)
        assert memory_store.get_memory(s, tenant, old["id"])["status"] == "superseded"
        assert not waypoint_store.create_link(
            s, f"{tenant}-other", new["id"], old["id"], kind="association", weight=1.0
        )
    shown = scores(include_superseded=True)  # by default the newer answers for it and it is not returned
    assert old["id"] not in scores() and shown[old["id"]].score == pytest.approx(before[old["id"]].score * 0.5 * 0.3)


def test_a_newer_version_answers_for_the_older_one_its_question_matches(db, engine, tenant, retriever):
    old, _ = add(db, engine, tenant, "I live in a small flat in Paris close to the Louvre")
    new, _ = add(db, engine, tenant, "We finally moved to Berlin last month")
    add(db, engine, tenant, "The flat upstairs is being painted this week")
    question = "which city do I live in, Paris flat"  # the older statement's words, none of the newer one's
    before = [c.id for c, _ in query(db, retriever, tenant, question, min_score=0).matches]
    assert before[0] == old["id"] and (new["id"] not in before or before.index(new["id"]) > 1)

    with db.session() as s:  # what a client's POST /memory/link does
        assert waypoint_store.create_link(s, tenant, new["id"], old["id"], kind="supersedes", weight=1.0)
    outcome = query(db, retriever, tenant, question, min_score=0)
    ranked = [c.id for c, _ in outcome.matches]
    assert ranked[0] == new["id"] and old["id"] not in ranked  # it answers for the older one
    newer = outcome.matches[0][0]
    assert newer.inherited == pytest.approx(newer.components["inherited"], abs=1e-6) and newer.inherited > 0
    assert newer.inherited_from == old["id"] and newer.via == old["id"] and newer.answers_for == (old["id"],)
    with db.session(tenant) as s:
        options = RetrievalOptions(include_superseded=True)
        shown = search(retriever, s, tenant, question, filters=QueryFilters(min_score=0), options=options)
    assert [c.id for c, _ in shown.matches][:2] == [new["id"], old["id"]]  # the older right below it

    with db.session(tenant) as s:
        options = RetrievalOptions(waypoints=False)
        ablated = search(retriever, s, tenant, question, filters=QueryFilters(min_score=0), options=options)
    assert ablated.matches[0][0].id == old["id"]  # versions are links: off with the graph


def test_a_chain_of_versions_answers_by_its_last(db, engine, tenant, retriever):
    first, _ = add(db, engine, tenant, "My desk phone extension is 4410 on the third floor")
    second, _ = add(db, engine, tenant, "Moved desks again this spring")
    third, _ = add(db, engine, tenant, "Settled in the new annex at last")
    with db.session() as s:
        assert waypoint_store.create_link(s, tenant, second["id"], first["id"], kind="supersedes", weight=1.0)
        assert waypoint_store.create_link(s, tenant, third["id"], second["id"], kind="supersedes", weight=1.0)
    outcome = query(db, retriever, tenant, "desk phone extension third floor", min_score=0)
    assert [c.id for c, _ in outcome.matches] == [third["id"]]  # the last answers for the chain
    assert set(outcome.matches[0][0].answers_for) == {first["id"], second["id"]}
    with db.session(tenant) as s:
        options = RetrievalOptions(include_superseded=True)
        shown = search(
            retriever, s, tenant, "desk phone extension third floor", filters=QueryFilters(min_score=0), options=options
        )
    by_id = {c.id: c for c, _ in shown.matches}
    assert [c.id for c, _ in shown.matches] == [third["id"], second["id"], first["id"]]
    assert by_id[third["id"]].inherited >= by_id[second["id"]].inherited > 0


def test_filters_by_sector_tags_and_time(db, engine, tenant, retriever):
    tagged, _ = add(db, engine, tenant, "Invoice 7781 paid by the client", tags=["billing", "2026"])
    add(db, engine, tenant, "Invoice 7782 still open with the client", tags=["billing"])
    outcome = query(db, retriever, tenant, "invoice client", tags=["billing", "2026"])
    assert [c.id for c, _ in outcome.matches] == [tagged["id"]]
    future = datetime.now(UTC) + timedelta(days=1)
    assert query(db, retriever, tenant, "invoice client", startTime=future).matches == []
    sector = tagged["primary_sector"]
    outcome = query(db, retriever, tenant, "invoice client", sector=sector)
    assert outcome.matches and all(sector in row["sectors"] for _, row in outcome.matches)


def test_recency_weight_lets_the_fresher_of_two_equal_memories_win(db, engine, tenant, retriever):
    old, _ = add(db, engine, tenant, "The team offsite is in Porto this spring")
    new, _ = add(db, engine, tenant, "The team offsite is in Lisbon this spring")
    with db.session() as s:  # equally relevant; the Porto memory was last seen long ago but matters more
        s.execute(
            text("UPDATE memories SET last_seen_at = now() - interval '60 days', salience = 0.9 WHERE id = :id"),
            {"id": old["id"]},
        )
        s.execute(text("UPDATE memories SET salience = 0.4 WHERE id = :id"), {"id": new["id"]})

    def first(recency_weight):
        with db.session() as s:
            outcome = search(
                retriever,
                s,
                tenant,
                "team offsite this spring",
                k=2,
                filters=QueryFilters(min_score=0),
                recency_weight=recency_weight,
            )
        return outcome.matches[0][1]["content"]

    assert first(0.0) == old["content"]  # relevance and importance: the salient one
    assert first(1.0) == new["content"]  # freshness weighs as much as relevance


def test_query_classification_narrows_the_dense_search_to_the_querys_sectors(db, engine, tenant, retriever):
    fact, _ = add(db, engine, tenant, "Quarterly revenue figures were uploaded to the finance share")
    assert "emotional" not in fact["sectors"]

    def run(classify: bool):
        with db.session() as s:
            return search(
                retriever,
                s,
                tenant,
                "the quarterly revenue figures make me feel so sad and angry",
                k=5,
                filters=QueryFilters(min_score=0),
                options=RetrievalOptions(lexical=False, classify=classify),
            )

    narrowed, everywhere = run(True), run(False)
    assert "emotional" in narrowed.query_sectors and len(narrowed.query_sectors) < 5
    assert fact["id"] not in [c.id for c, _ in narrowed.matches]  # its vectors are in no sector of the query's
    assert fact["id"] in [c.id for c, _ in everywhere.matches]  # the vector search of all sectors finds it
    assert everywhere.query_sectors == SECTORS


def test_min_score_gate_drops_weak_matches(db, engine, tenant, retriever):
    add(db, engine, tenant, "The cafeteria serves lasagna on Wednesdays")
    assert query(db, retriever, tenant, "lasagna wednesday", min_score=0.0).matches
    assert query(db, retriever, tenant, "lasagna wednesday", min_score=0.99).matches == []


def test_the_local_model_finds_a_paraphrase_with_no_shared_word(make_store, settings, tenant):
    from shared.embedding.local import LocalOnnxEmbedder

    _, db = make_store("local_model")  # a store of the local model's own
    local_settings = settings.model_copy(update={"embedding_provider": "local"})
    model = LocalOnnxEmbedder()
    local = MemoryEngine(local_settings, model)
    for content in (
        "My dog loves running in the park",
        "Quarterly revenue rose by four percent",
        "The printer on floor two is out of toner",
    ):
        add(db, local, tenant, content)
    outcome = query(db, Retriever(local_settings, model), tenant, "where does the canine like to play?")
    best, row = outcome.matches[0]
    assert row["content"] == "My dog loves running in the park"
    assert best.lexical_rank is None and best.dense_rank == 1  # found by meaning alone


def test_the_full_text_stage_on_its_own_session_changes_no_answer(db, engine, tenant, retriever):
    for content in (
        "The harbour ferry leaves at seven from pier four",
        "Pier four is closed for repairs until March",
        "I love the smell of the sea at the harbour",
        "Remember to renew the ferry pass before it expires",
    ):
        add(db, engine, tenant, content)
    now = datetime.now(UTC)  # the same moment for both: recency is part of the score
    with db.session() as s:
        alone = search(retriever, s, tenant, "harbour ferry pier", k=4, filters=QueryFilters(min_score=0), now=now)
    with db.session() as s:
        beside = search(
            retriever,
            s,
            tenant,
            "harbour ferry pier",
            k=4,
            filters=QueryFilters(min_score=0),
            now=now,
            side_session=db.session,
        )
    assert [(c.id, c.score, c.lexical_rank) for c, _ in beside.matches] == [
        (c.id, c.score, c.lexical_rank) for c, _ in alone.matches
    ]
    assert beside.matches[0][0].lexical_rank == 1
    assert "lexical_wait" in beside.timings_ms and "lexical_wait" not in alone.timings_ms
    for outcome in (alone, beside):
        stages = {k: v for k, v in outcome.timings_ms.items() if k != "total"}
        assert {"embed", "lexical", "dense", "fetch", "score", "payload"} <= set(stages)
        assert outcome.timings_ms["total"] > 0
    # one after the other, the stages add up to the total
    assert sum(v for k, v in alone.timings_ms.items() if k != "total") == pytest.approx(
        alone.timings_ms["total"], abs=0.01
    )
    # the model calls come back for the caller to log (the synthetic model has no cache: one call each time)
    assert [(c.status, c.item_count) for c in beside.embed_calls] == [("completed", 1)]


def test_a_failing_full_text_stage_fails_the_query_beside_it(db, engine, tenant, retriever):
    add(db, engine, tenant, "A memory to find")

    def broken_session():
        raise RuntimeError("no second connection")

    with db.session() as s, pytest.raises(RuntimeError, match="no second connection"):
        search(retriever, s, tenant, "memory", k=3, filters=QueryFilters(), side_session=broken_session)


def test_of_two_equal_matches_the_one_amid_other_matches_ranks_first(db, engine, retriever, tenant, settings):
    # Two memories with the same words for the query; the second follows a turn that matches it too.
    lone, _ = add(db, engine, tenant, "Orla: the glacier hike starts at dawn")
    asked, _ = add(db, engine, tenant, "Nils: when does the glacier hike start")
    with db.session() as s:
        answer = MemoryCreate(content="Nils: the glacier hike starts at noon")
        amid, _ = engine.add(s, tenant, answer, follows=asked["id"])
    alike, _ = add(db, engine, tenant, "Orla: glacier hike gear, crampons and rope")
    with db.session() as s:  # an association link lends nothing: it joins memories that say the same thing
        s.execute(
            text("INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.9)"),
            {"a": lone["id"], "b": alike["id"], "u": tenant},
        )
    options = RetrievalOptions(dense=False)  # full text alone: the two answers' own matches are equal

    def ask(eng):
        with db.session() as s:
            outcome = search(eng, s, tenant, "glacier hike starts", k=8, filters=QueryFilters(), options=options)
        return {c.id: c for c, _ in outcome.matches}, [c.id for c, _ in outcome.matches]

    by_id, order = ask(retriever)
    assert by_id[amid["id"]].components["lexical"] == pytest.approx(by_id[lone["id"]].components["lexical"])
    assert order.index(amid["id"]) < order.index(lone["id"])
    lent = by_id[amid["id"]]
    assert lent.support_from == asked["id"]
    question = by_id[asked["id"]].components  # its own relevance: the cosine the fetch measured, and its words
    alpha = settings.fusion_alpha
    own_of_asked = alpha * max(question["cosine"], 0) + (1 - alpha) * question["lexical"]
    assert lent.components["context"] == pytest.approx(settings.context_weight * own_of_asked, abs=1e-5)
    assert by_id[lone["id"]].waypoint_weight > 0  # it is linked, and to a match
    assert "context" not in by_id[lone["id"]].components  # but not in reading order
    off = Retriever(settings.model_copy(update={"context_weight": 0.0}), SyntheticEmbedder(dim=384))
    by_id, _ = ask(off)
    assert "context" not in by_id[amid["id"]].components
    assert by_id[amid["id"]].score < lent.score
