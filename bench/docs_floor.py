"""One process's share of `bench.ingest_docs`' document floor, run as `python -m bench.docs_floor URL FORMAT FILE...`:
prints the seconds it took. Its imports are inside the function: the sandbox's children import this module (their
parent's main), so it must be light to import.
"""

from __future__ import annotations

import sys

USER = "bench"


def floor_share(database_url: str, fmt: str, paths: list[str]) -> float:
    """One process's share of the document floor: its files sniffed and parsed in the worker's sandbox (small ones in
    the worker's groups), chunked and classified in process, embedded by the stack's model, and their rows
    (documents, memories, vectors) written by one COPY per table; seconds from the first file to the commit."""
    import hashlib
    import os
    import time
    import uuid
    from dataclasses import replace
    from pathlib import Path

    import psycopg
    from pgvector.psycopg import register_vector

    from bench.common import bench_settings, copy_prepared, plain_dsn
    from shared.api.memories import MemoryCreate
    from shared.embedding.factory import create_embedder
    from shared.ingest import Extracted, Kind, chunk_elements, extract_group, sniff
    from shared.ingest.sandbox import limits_for, warm_up
    from shared.memory.engine import MemoryEngine

    settings = bench_settings(database_url)
    engine = MemoryEngine(settings, create_embedder(settings))
    rules = settings.ingest
    user = f"{USER}-{fmt}-floor"
    # before the clock, as the worker's are before its documents: the sandbox's forkserver and a first parse, the
    # model's and the classifier's first calls
    warm_up()
    limits = limits_for(rules, Kind.DOCUMENT)
    extract_group([(paths[0], sniff(Path(paths[0])))], limits=limits, max_chars=rules.max_chars)
    engine.prepare([MemoryCreate(content="The first call of the day.")], user)
    started = time.perf_counter()
    small = [p for p in paths if os.path.getsize(p) <= rules.group_max_kb * 1024]
    groups = [small[i : i + rules.group_documents] for i in range(0, len(small), rules.group_documents)]
    groups += [[p] for p in paths if p not in small]
    documents: list[tuple[uuid.UUID, str, str]] = []
    items: list[tuple[uuid.UUID, int, str]] = []
    for group in groups:
        extracted = extract_group([(p, sniff(Path(p))) for p in group], limits=limits, max_chars=rules.max_chars)
        for path, outcome in zip(group, extracted, strict=True):
            if not isinstance(outcome, Extracted):
                continue
            document_id = uuid.uuid4()
            documents.append((document_id, Path(path).name, hashlib.sha256(Path(path).read_bytes()).hexdigest()))
            chunks = chunk_elements(
                outcome.elements,
                chunk_size=rules.chunk_size,
                chunk_overlap=rules.chunk_overlap,
                document_metadata=outcome.metadata,
                max_chunks=rules.max_chunks,
                max_chars=rules.max_chars,
            )
            items += [(document_id, chunk.index, chunk.text) for chunk in chunks]
    prepared, _ = engine.prepare([MemoryCreate(content=text) for _, _, text in items], user)  # classify, embed
    placed = [replace(m, document_id=d, chunk_index=i) for m, (d, i, _) in zip(prepared, items, strict=True)]
    with psycopg.connect(plain_dsn(database_url)) as conn:
        register_vector(conn)
        with (
            conn.cursor() as cur,
            cur.copy(
                "COPY documents (id, user_id, source_type, filename, content_hash, status) "
                "FROM STDIN WITH (FORMAT BINARY)"
            ) as copy,
        ):
            copy.set_types(["uuid", "text", "text", "text", "text", "text"])
            for document_id, name, digest in documents:
                copy.write_row((document_id, user, "upload", name, digest, "done"))
        copy_prepared(conn, placed, indexed=False)
        conn.commit()
    return time.perf_counter() - started


if __name__ == "__main__":
    print(floor_share(sys.argv[1], sys.argv[2], sys.argv[3:]))
