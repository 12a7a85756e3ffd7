"""A worker process's BLAS runs on one thread: `blas.one_thread` limits numpy's library, and the product it computes
is the same."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from workers import blas


def blas_threads() -> list[int]:
    """The thread count of each BLAS library loaded in this process."""
    return [pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"]


def test_one_thread_limits_numpys_blas_and_keeps_its_results():
    a = np.random.default_rng(0).standard_normal((540, 384)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((384, 128)).astype(np.float32)
    with threadpool_limits(limits=2, user_api="blas"):  # as a pool process starts on two cores (or more)
        before = a @ b
        assert blas_threads() and all(n >= 1 for n in blas_threads())
        blas.one_thread()
        assert blas_threads() == [1] * len(blas_threads())
        assert np.allclose(a @ b, before, atol=1e-4)
