"""Raw embedding throughput of each provider: sentences/s batched, and latency for one sentence.

    python -m bench.embeddings [--n 2000]

Compare with `MNEMOFLOW_EMBEDDING_PROVIDER=local python -m bench.ingest --sizes 2000`: the ratio of the
end-to-end rate to the raw batched rate is the pipeline's overhead.
"""

from __future__ import annotations

import argparse
import time

from bench.common import corpus, percentiles
from shared.config import Settings
from shared.embedding import SyntheticEmbedder
from shared.embedding.base import EmbeddingProvider
from shared.embedding.local import LocalOnnxEmbedder, ModelUnavailable
from shared.embedding.static import StaticEmbedder


def measure(provider: EmbeddingProvider, texts: list[str], singles: int) -> tuple[float, dict[str, float]]:
    provider.embed(texts[:64])  # warm-up
    started = time.perf_counter()
    provider.embed(texts)
    batched = len(texts) / (time.perf_counter() - started)
    samples = []
    for text in texts[:singles]:
        started = time.perf_counter()
        provider.embed([text])
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
    for provider in providers:
        batched, single = measure(provider, texts, args.singles)
        print(
            f"{provider.name:<10} {provider.model:<28} {provider.dim:>4} {batched:>10,.0f} "
            f"{single['p50']:>14.2f} {single['p95']:>14.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
