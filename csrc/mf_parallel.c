#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise's MADV_NOHUGEPAGE under a strict -std */
#endif
#include "mf_parallel.h"
#include <stdint.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

int mf_clamp_threads(ptrdiff_t n_threads, ptrdiff_t n_items)
{
    ptrdiff_t hi = n_items < MF_MAX_THREADS ? n_items : MF_MAX_THREADS;
    if (hi < 1)
        hi = 1;
    if (n_threads < 1)
        return 1;
    return (int)(n_threads < hi ? n_threads : hi);
}

void mf_parallel_for(ptrdiff_t n, int n_threads, mf_body_fn body, void *ctx)
{
    n_threads = mf_clamp_threads(n_threads, n);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (ptrdiff_t i = 0; i < n; i++)
        body(ctx, i, omp_get_thread_num());
#else
    for (ptrdiff_t i = 0; i < n; i++)
        body(ctx, i, 0);
#endif
}

void mf_small_pages(void *p, size_t n_bytes)
{
#if defined(__linux__) && defined(MADV_NOHUGEPAGE)
    const uintptr_t page = 4096;
    uintptr_t lo, hi;
    if (p == NULL || n_bytes < ((size_t)4 << 20))
        return;
    lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    hi = ((uintptr_t)p + n_bytes) & ~(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, (size_t)(hi - lo), MADV_NOHUGEPAGE);
#else
    (void)p;
    (void)n_bytes;
#endif
}
