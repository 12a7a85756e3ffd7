"""Raw embedding throughput of each provider: sentences/s batched, and latency for one sentence.

    python -m bench.embeddings [--n 2000]

Compare with `MNEMOFLOW_EMBEDDING_PROVIDER=local python -m bench.ingest --sizes 2000`: the ratio of the
end-to-end rate to the raw batched rate is the pipeline's overhead.

`in context` rows: the same sentences as a sequence, each embedded after the two before it (what a batch
with `sequence: true` or an add with `follows` costs), with its ratio to the provider's own rate.
"""

from __future__ import annotations

import argparse
import time

from bench.common import corpus, percentiles
from shared.config import Settings
from shared.embedding import SyntheticEmbedder
from shared.embedding.base import ContextualEmbeddingProvider, EmbeddingProvider, embed_texts
from shared.embedding.local import LocalOnnxEmbedder, ModelUnavailable
from shared.embedding.static import StaticEmbedder
from shared.memory.sequence import sequence_contexts


def measure(
    provider: EmbeddingProvider, texts: list[str], singles: int, contexts: list[str] | None = None
) -> tuple[float, dict[str, float]]:
    embed_texts(provider, texts[:64], contexts[:64] if contexts else None)  # warm-up
    started = time.perf_counter()
    embed_texts(provider, texts, contexts)
    batched = len(texts) / (time.perf_counter() - started)
    samples = []
    for i, text in enumerate(texts[:singles]):
        started = time.perf_counter()
        embed_texts(provider, [text], [contexts[i]] if contexts else None)
        samples.append((time.perf_counter() - started) * 1000)
    return batched, percentiles(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="sentences for the batched measurement")
    parser.add_argument("--singles", type=int, default=200, help="one-sentence calls for the latency figures")
    args = parser.parse_args()
    texts = corpus(args.n, seed=3)
    print(f"{'provider':<10} {'model':<28} {'dim':>4} {'batched/s':>10} {'single p50 ms':>14} {'single p95 ms':>14}")
    providers: list[EmbeddingProvider] = [SyntheticEmbedder(dim=384), LocalOnnxEmbedder()]
    static_path = Settings().resolved_static_model_path
    try:
        providers.append(StaticEmbedder(static_path))
    except ModelUnavailable:
        print(f"(static: no model at {static_path}; `make static-model` builds it)")
    contexts = sequence_contexts(texts, turns=2, chars=2000)
    for provider in providers:
        batched, single = measure(provider, texts, args.singles)
        print(
            f"{provider.name:<10} {provider.model:<28} {provider.dim:>4} {batched:>10,.0f} "
            f"{single['p50']:>14.2f} {single['p95']:>14.2f}",
            flush=True,
        )
        if isinstance(provider, ContextualEmbeddingProvider):
            in_context, single = measure(provider, texts, args.singles, contexts)
            print(
                f"{'  in context':<10} {'(after 2 turns)':<28} {provider.dim:>4} {in_context:>10,.0f} "
                f"{single['p50']:>14.2f} {single['p95']:>14.2f}   ratio to alone {in_context / batched:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
