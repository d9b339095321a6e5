# Build facts about OpenMP, queried at run time.
cdef extern from "mf_openmp.h" nogil:
    int mf_openmp_enabled()
    int mf_omp_max_threads()
    double mf_core_probe(int nt, long n, long iters)


cdef extern from "mf_sbn.h":
    int mf_sbn_dispatch_enabled()


def openmp_enabled():
    """True when the extensions were compiled with OpenMP."""
    return bool(mf_openmp_enabled())


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
