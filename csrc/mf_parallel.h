/* An OpenMP loop in plain C, for entry points that may be called from C programs with no
 * Python interpreter at all (Cython's own parallel blocks check for the GIL there). */
#ifndef MF_PARALLEL_H
#define MF_PARALLEL_H

#include <stddef.h>

typedef void (*mf_body_fn)(void *ctx, ptrdiff_t i, int thread);

/* body(ctx, i, thread) for i in [0, n), dynamically scheduled over n_threads threads;
 * thread is in [0, n_threads).  Without OpenMP the loop runs on thread 0. */
void mf_parallel_for(ptrdiff_t n, int n_threads, mf_body_fn body, void *ctx);

#endif
