/* The build's OpenMP facts and a machine probe, for mfengine._openmp (plain C, no Python). */
#ifndef MF_OPENMP_H
#define MF_OPENMP_H

/* 1 when the extensions were compiled with OpenMP, else 0. */
int mf_openmp_enabled(void);

/* OpenMP's default thread count (1 without OpenMP). */
int mf_omp_max_threads(void);

/* Each of nt threads sums products over its own buffer of n doubles (n a power of two),
 * iters / nt times: the same total work on any thread count.  Wall seconds, or -1 when a
 * buffer could not be allocated. */
double mf_core_probe(int nt, long n, long iters);

#endif
