#include "mf_parallel.h"
#ifdef _OPENMP
#include <omp.h>
#endif

void mf_parallel_for(ptrdiff_t n, int n_threads, mf_body_fn body, void *ctx)
{
    if (n_threads < 1)
        n_threads = 1;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4) num_threads(n_threads)
    for (ptrdiff_t i = 0; i < n; i++)
        body(ctx, i, omp_get_thread_num());
#else
    for (ptrdiff_t i = 0; i < n; i++)
        body(ctx, i, 0);
#endif
}
