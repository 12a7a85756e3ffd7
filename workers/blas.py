"""One BLAS thread for each worker process.

A worker runs about as many pool processes as the machine has cores, and numpy's products of matrices in them (the
writer filing fresh codes under their anchors, the merge training the anchors) would each start a thread per core.
OpenBLAS's threads then spin, waiting for the next product, for a while after each one: filing a chunk's codes
every 50 ms cost 2 s of CPU for 15 ms of products, and a 100,000-memory burst ran at 3,680 memories/s against 4,460
without it (docs/experiments.md, "Fresh codes filed by their writer"). With one thread the products run on the
process's own core, and no thread waits.
"""

from __future__ import annotations

from threadpoolctl import threadpool_limits


def one_thread() -> None:
    """Limit every BLAS library loaded in this process (numpy's OpenBLAS) to one thread, for the process's life."""
    threadpool_limits(limits=1, user_api="blas")
