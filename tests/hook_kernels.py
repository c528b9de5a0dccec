"""A Triton kernel to autotune in tests/test_hooks.py: Triton compiles ``@triton.jit`` functions from their source
file, so the kernel lives in a module. It is never launched (no GPU): the Autotuner is built and pruned only."""

from __future__ import annotations

import triton
import triton.language as tl

TILES = [(bm, bn) for bm in (32, 64, 128, 256) for bn in (32, 64, 128, 256)]


def autotuned_matmul(perf_model, top_k: int):
    """A GEMM kernel under ``triton.autotune`` with one config per tile of :data:`TILES`, pruned by ``perf_model``."""
    configs = [
        triton.Config(
            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64}, num_warps=8 if bm * bn >= 128 * 128 else 4, num_stages=3
        )
        for bm, bn in TILES
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K"], prune_configs_by={"perf_model": perf_model, "top_k": top_k})
    @triton.jit
    def matmul_kernel(
        a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        pid = tl.program_id(0)
        offs = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=offs < M), mask=offs < M)

    return matmul_kernel
