/* The build's OpenMP facts and a cache-bound probe of how the machine's cores scale (the
 * benchmarks print it beside their thread comparisons). */
#define _POSIX_C_SOURCE 199309L   /* clock_gettime under -std=c99 */
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mf_openmp.h"

int mf_openmp_enabled(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

int mf_omp_max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

double mf_core_probe(int nt, long n, long iters)
{
    struct timespec t0, t1;
    int failed = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
#ifdef _OPENMP
    #pragma omp parallel num_threads(nt) reduction(|:failed)
#endif
    {
        double *b = (double *)malloc((size_t)n * sizeof(double)), s = 0.0;
        long k, r, mask = n - 1;
        if (b == NULL) {
            failed = 1;
        } else {
            for (k = 0; k < n; k++)
                b[k] = (double)k * 1e-9;
            for (r = 0; r < iters / nt; r++)
                for (k = 0; k < n; k++)
                    s += b[k] * b[(k * 7) & mask];
            /* keep the sum: a store the compiler cannot drop */
            b[0] = s;
            failed |= b[0] != b[0];
            free(b);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return failed ? -1.0 : (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}
