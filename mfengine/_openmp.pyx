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
