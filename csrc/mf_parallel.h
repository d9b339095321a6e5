/* An OpenMP loop in plain C, for entry points that may be called from C programs with no
 * Python interpreter at all (Cython's own parallel blocks check for the GIL there), and the
 * clamping of a caller's thread count that every kernel applies before using it. */
#ifndef MF_PARALLEL_H
#define MF_PARALLEL_H

#include <stddef.h>

/* No kernel starts more threads than this, whatever it is asked for. */
#define MF_MAX_THREADS 256

typedef void (*mf_body_fn)(void *ctx, ptrdiff_t i, int thread);

/* A thread count that is safe to pass to OpenMP and to size per-thread scratch with:
 * n_threads clamped to [1, min(n_items, MF_MAX_THREADS)] (1 when n_items < 1). */
int mf_clamp_threads(ptrdiff_t n_threads, ptrdiff_t n_items);

/* body(ctx, i, thread) for i in [0, n), dynamically scheduled over n_threads threads
 * (clamped by mf_clamp_threads); thread is in [0, n_threads).  Without OpenMP the loop runs
 * on thread 0. */
void mf_parallel_for(ptrdiff_t n, int n_threads, mf_body_fn body, void *ctx);

/* Asks the system to back the whole pages inside [p, p + n_bytes) with ordinary pages rather
 * than transparent huge pages, before anything is written there (Linux: madvise with
 * MADV_NOHUGEPAGE; elsewhere, or for less than 4 MB, nothing).  For large outputs the threads
 * fill once: faulting them in as huge pages, compacted at fault time where the system is set
 * so, can cost more than the solve that writes them.  Advice only: failure is ignored. */
void mf_small_pages(void *p, size_t n_bytes);

#endif
