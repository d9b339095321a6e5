/* The fast sigmoid path of the strict (SJJ) mean-field bound for DAG belief nets: the state
 * of one item and the two entry points that mfengine/sbn/_sjj_fast.pxi calls.  Plain C, no
 * Python; the code is csrc/mf_sjj_fast.c and the mathematics the module docstring of
 * mfengine/sbn/_sjj.pyx ("Fast path", "Large sparse nets").
 *
 * The caller (solve_item_sig) carves every array below from one thread's scratch, fills the
 * net's caches (child-order weights, e^w), initialises the means and xi, and reads the solved
 * means and xi back from the same arrays; nothing here allocates, and nothing reads beyond
 * the sizes in the state (n units, par_ptr[n] edges, the largest fan-in and fan-out).  Every
 * net handed to it has |h_i| + sum |W| over each unit's in-edges and sum |W| over its
 * out-edges at most FAST_SCALE = 256 (net_is_fast), so that no product below leaves the
 * double range. */
#ifndef MF_SJJ_H
#define MF_SJJ_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The record of a unit on large nets (stride MF_SJJ_REC doubles, 64-byte aligned): mu, nu, pa,
 * pb, xi, Z, the S-ratio isacc, and a spare, in that order, so that a parent's or a child's
 * state read at random costs one cache miss instead of one per array. */
#define MF_SJJ_REC 8

typedef struct {
    ptrdiff_t n;
    const ptrdiff_t *par_ptr, *par_idx, *ch_ptr, *ch_idx, *ch_w, *pos;
    const ptrdiff_t *pfirst, *cfirst;  /* per unit: first parent / child if they are a run
                                          of consecutive units, else -1 */
    const double *w, *h;          /* this item's net: weights (parent order), biases */
    const double *wq, *ew;        /* the net's weights in child order, e^w in parent order */
    const double *ewq;            /* e^w in child order (records mode) */
    double *Aq, *Bq;              /* one unit's children's factors (records mode; max fan-out) */
    const unsigned char *free_;
    const unsigned char *skip;    /* barren units (NULL: none): no xi step, no mean update, no
                                     term of the bound; the factors of their in-edges are 1 */
    double *mu, *nu, *t, *xi;
    double *Z, *pa, *pb, *lnS, *isacc, *gA, *gB, *hA2, *hB2, *gD;   /* per unit */
    ptrdiff_t stride;             /* of mu, nu, xi, pa, pb, Z, isacc: 1, or MF_SJJ_REC when
                                     they are interleaved in one 64-byte record per unit */
    double *al, *be;              /* per unit: e^{-xi h}, e^{(1 - xi) h} at its xi */
    double *ap, *bp;              /* per edge, parent order: e^{-xi_c w}, e^{(1 - xi_c) w} */
    double *aq, *bq;              /* the same in child order (pos[e]: edge e's place there) */
    double *ta, *tb;              /* one unit's trial factors (max fan-in) */
    double *Ph, *Rh, *iA, *iB, *Iv;   /* one unit's per-child terms (max fan-out) */
} mf_sjj_fast_state;

/* Coordinate ascent for one sigmoid item on the fast path: each sweep one safeguarded Newton
 * step on every unit's xi, then every free mean to a local maximum of the bound along its
 * coordinate (forward on even sweeps, backward on odd ones); it stops when a sweep changes the
 * bound from the caches by less than tol + rel_floor |bound|, or after max_sweeps.  The means
 * and xi are in s (initialised; per-unit arrays of stride 1, or records of stride MF_SJJ_REC);
 * hist (or NULL) receives the bound before the first sweep and after each.  gtol: the
 * tolerance of the 1-D solves.  Returns 1 if it converged, the sweeps in *sweeps_out. */
int mf_sjj_fast_solve(mf_sjj_fast_state *s, double *hist, double tol, double gtol,
                      ptrdiff_t max_sweeps, double rel_floor, ptrdiff_t *sweeps_out);

/* The fast path's share of the reported bound at the means and xi in s (stride 1): the terms
 * (and entropies) of every unit with a free parent, in product form, into *total, their
 * rounding allowance into *err; units whose parents are all clamped are marked in careful[]
 * (n entries) for the careful evaluation; the units marked in skip[] (NULL: none) are left
 * out. */
void mf_sjj_fast_final(const mf_sjj_fast_state *s, const unsigned char *skip,
                       unsigned char *careful, double *total, double *err);

/* Whether mf_sjj_fast_solve prefetches the next unit's scattered state on nets of 16384 units
 * and more (on by default; off only for the benchmarks' same-run comparisons, the answers do
 * not depend on it).  Returns the previous setting.  Not thread-safe: set it between solves. */
int mf_sjj_fast_set_prefetch(int on);

#ifdef __cplusplus
}
#endif

#endif
