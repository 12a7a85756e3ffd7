"""Input limits a schema cannot express because they are settings (`Settings.limits`): each breach a clear 422."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.errors import InvalidInput


@dataclass(frozen=True)
class InputLimits:
    """How large one memory, its labels and one batch may be."""

    max_content_chars: int = 100_000
    # Tokens of the embedding model per memory and per query (`shared.embedding.cost`): the model's work grows
    # with tokens, not characters. 8,192 per memory is OpenAI's embedding input limit too; a query's 512 are two
    # MiniLM windows, which is more than its model reads of a question anyway.
    max_content_tokens: int = 8_192
    max_query_tokens: int = 512
    max_tags: int = 64
    max_tag_chars: int = 128
    max_metadata_bytes: int = 64 * 1024
    max_batch_items: int = 50_000

    def check_content(self, content: str, where: str = "content") -> None:
        if len(content) > self.max_content_chars:
            raise InvalidInput(
                f"{where} is {len(content):,} characters; the limit is {self.max_content_chars:,}. "
                "Split it into several memories."
            )

    def check_tokens(self, tokens: int, where: str = "content") -> None:
        """A memory's content against the token limit (counted by `shared.embedding.cost.token_counts`)."""
        if tokens > self.max_content_tokens:
            raise InvalidInput(
                f"{where} is {tokens:,} tokens of the embedding model; the limit is {self.max_content_tokens:,} "
                "(MNEMOFLOW_MAX_CONTENT_TOKENS). Split it into several memories, or send it as a document "
                "(POST /memory/ingest), which is cut into chunks."
            )

    def check_query_tokens(self, tokens: int, where: str = "query") -> None:
        if tokens > self.max_query_tokens:
            raise InvalidInput(
                f"{where} is {tokens:,} tokens of the embedding model; the limit is {self.max_query_tokens:,} "
                "(MNEMOFLOW_MAX_QUERY_TOKENS). Ask with the words that matter: a model reads a few hundred tokens "
                "of a question at most."
            )

    def check_labels(self, tags: Sequence[str], metadata: dict[str, Any], where: str) -> None:
        """The tag and metadata limits (also for requests that carry them without content, like ingestion)."""
        if len(tags) > self.max_tags:
            raise InvalidInput(f"{where}: {len(tags)} tags; at most {self.max_tags} are allowed")
        long_tags = [t for t in tags if len(t) > self.max_tag_chars]
        if long_tags:
            raise InvalidInput(f"{where}: tag {long_tags[0][:40]!r}… is longer than {self.max_tag_chars} characters")
        if len(json.dumps(metadata)) > self.max_metadata_bytes:
            raise InvalidInput(f"{where}: metadata is larger than {self.max_metadata_bytes:,} bytes of JSON")

    def check_item(self, content: str, tags: Sequence[str], metadata: dict[str, Any], where: str = "content") -> None:
        """One memory's content, tags and metadata."""
        self.check_content(content, where)
        self.check_labels(tags, metadata, where)

    def check_batch(self, items: int) -> None:
        if items > self.max_batch_items:
            raise InvalidInput(f"{items:,} items in one batch; the limit is {self.max_batch_items:,}. Split the batch.")
