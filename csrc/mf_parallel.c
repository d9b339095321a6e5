#include "mf_parallel.h"
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
