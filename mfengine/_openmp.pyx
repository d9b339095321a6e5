# Build facts about OpenMP, queried at run time.
cdef extern from *:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define MF_OPENMP 1
    static int mf_omp_max_threads(void) { return omp_get_max_threads(); }
    #else
    #define MF_OPENMP 0
    static int mf_omp_max_threads(void) { return 1; }
    #endif
    """
    int MF_OPENMP
    int mf_omp_max_threads()

cdef extern from *:
    """
    #include <stdlib.h>
    #include <time.h>
    /* Each of nt threads sums products over its own buffer of n doubles (n a power of two),
     * iters / nt times: the same total work on any thread count.  Wall seconds, or -1 when a
     * buffer could not be allocated. */
    static double mf_core_probe(int nt, long n, long iters)
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
    """
    double mf_core_probe(int nt, long n, long iters) nogil


cdef extern from "mf_sbn.h":
    int mf_sbn_dispatch_enabled()


def openmp_enabled():
    """True when the extensions were compiled with OpenMP."""
    return bool(MF_OPENMP)


def max_threads():
    """OpenMP's default thread count (1 without OpenMP)."""
    return int(mf_omp_max_threads())


def dispatch_enabled():
    """True when the hot loops carry run-time ISA dispatch (an AVX2+FMA and a baseline body)."""
    return bool(mf_sbn_dispatch_enabled())


def core_probe(int n_threads, long kib=512, long iters=3000):
    """Wall seconds for ``n_threads`` threads to share a fixed amount of cache-bound work (each
    sums products over its own buffer of ``kib`` KiB, ``iters / n_threads`` times): the
    machine's own scaling, for benchmarks to print beside their thread comparisons.  On a VM
    whose two virtual cores the host sometimes runs on one physical core, the ratio of one
    thread's time to two threads' swings between about 1.3 and 2.0 for this code alone."""
    cdef long n = 1
    if n_threads < 1 or kib < 1 or iters < 1:
        raise ValueError("n_threads, kib and iters must be positive")
    while n * 8 < kib * 1024:
        n *= 2
    cdef double t
    with nogil:
        t = mf_core_probe(n_threads, n, iters)
    if t < 0:
        raise MemoryError(f"core_probe: could not allocate {kib} KiB per thread")
    return t
