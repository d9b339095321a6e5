/* Private to the context-HMM kernels (csrc/mf_hmm_*.c): what the files share.  Callers outside
 * the family use mf_hmm.h.
 *
 * The pieces, one idea per file:
 *   mf_hmm_common.c      argument checks, the effective lag, single-site terms and couplings,
 *                        the emission part of a reported bound without cancellation
 *   mf_hmm_fb.c          forward-backward and Viterbi on a chain with per-site potentials
 *   mf_hmm_link.c        the link bound (Gaussian link variables), a start of structured MF
 *   mf_hmm_naive.c       fully factorised mean field
 *   mf_hmm_chain.c       the exact mean-field objective of a chain: its messages, conditional
 *                        matrices, and the full-matrix path (objective and sweep)
 *   mf_hmm_rows.c        row recursions over a chain: the low-rank path (objective and sweep),
 *                        the careful evaluation of the reported bound
 *   mf_hmm_ascent.c      coordinate ascent on a chain's objective (sweeps and extrapolation)
 *   mf_hmm_structured.c  structured mean field: the best ascent from several starts, M-step
 *                        statistics
 *   mf_hmm_exact.c       exact likelihood over the augmented state
 *   mf_hmm_work.c        scratch sizes (mf_hmm_work_size), from every method's layout
 *
 * Internal functions work on a model that has been through mf_hmm__prepare (lag < T, or no
 * context) and return the statuses of mf_status.h or the two internal outcomes below; the
 * exported functions turn those into a -inf / NaN value (mf_hmm__publish). */
#ifndef MF_HMM_INTERNAL_H
#define MF_HMM_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mf_hmm.h"

#if defined(__GNUC__)
#define MF_HMM_INTERNAL __attribute__((visibility("hidden")))
#else
#define MF_HMM_INTERNAL
#endif

#define HALF_LOG_2PI 0.91893853320467274178

/* Run-time dispatch of the hot loops (as csrc/mf_sbn.c): an AVX2+FMA body and the default
 * x86-64 one, chosen by the loader; off for -march=native builds and other compilers. */
#if defined(MF_TARGET_CLONES) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MF_HMM_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define MF_HMM_CLONES
#endif

/* Internal outcomes, never returned by an exported function: a sequence of probability zero,
 * a NaN or infinite value in the arithmetic.  The exported functions write -inf / NaN instead. */
#define HMM_IMPOSSIBLE 100
#define HMM_NONFINITE 101

static inline double sq(double x) { return x * x; }

/* Missing values: a NaN entry of X is a missing observation, and every term of ln p(x | s) that
 * involves it is left out (the output covariance is the identity, so the observed coordinates
 * of an output are Gaussian on their own, and a row of NaN drops the whole emission). */
static inline int seen(const double *X, ptrdiff_t D, ptrdiff_t t, ptrdiff_t d)
{
    return !isnan(X[t * D + d]);
}

/* Row codes: ROW_MISSING every coordinate NaN, ROW_FULL none, ROW_PARTIAL some. */
enum { ROW_MISSING = 0, ROW_FULL = 1, ROW_PARTIAL = 2 };

static inline unsigned char row_code(const double *X, ptrdiff_t D, ptrdiff_t t)
{
    ptrdiff_t d, k = 0;
    for (d = 0; d < D; d++) k += seen(X, D, t, d);
    return k == D ? ROW_FULL : (k == 0 ? ROW_MISSING : ROW_PARTIAL);
}

/* The value an exported function writes for an internal outcome, and the status it returns. */
static inline int mf_hmm__publish(int status, double *value)
{
    if (status == HMM_IMPOSSIBLE) {
        *value = -INFINITY;
        return MF_OK;
    }
    if (status == HMM_NONFINITE) {
        *value = NAN;
        return MF_OK;
    }
    return status;
}

/* ----------------------------------------------------------------------------------------- */
/* Sizes: every scratch block is laid out by a function that runs twice, once to measure (base
 * NULL) with checked arithmetic, once to carve the block it measured.                           */

#define MF_HMM_ALIGN 16

typedef struct {
    char *base;       /* NULL while measuring */
    ptrdiff_t used;   /* bytes laid out so far */
    int bad;          /* a size overflowed */
} arena_t;

/* a * b into *out when both are >= 0 and the product fits a ptrdiff_t. */
static inline int mul_ok(ptrdiff_t a, ptrdiff_t b, ptrdiff_t *out)
{
    if (a < 0 || b < 0) return 0;
    if (a != 0 && b > PTRDIFF_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Room for c1 * c2 items of `elem` bytes. */
static inline void *take(arena_t *a, ptrdiff_t c1, ptrdiff_t c2, ptrdiff_t elem)
{
    ptrdiff_t count, bytes;
    void *p;
    if (a->bad || !mul_ok(c1, c2, &count) || !mul_ok(count, elem, &bytes)
        || bytes > PTRDIFF_MAX - MF_HMM_ALIGN || a->used > PTRDIFF_MAX - MF_HMM_ALIGN - bytes
        || (uint64_t)(a->used + bytes + MF_HMM_ALIGN) > (uint64_t)SIZE_MAX) {
        a->bad = 1;
        return NULL;
    }
    bytes = (bytes + MF_HMM_ALIGN - 1) / MF_HMM_ALIGN * MF_HMM_ALIGN;
    p = a->base ? (void *)(a->base + a->used) : NULL;
    a->used += bytes;
    return p;
}

/* Allocates the block that a measuring pass laid out, and rewinds for the carving pass. */
static inline int arena_alloc(arena_t *a)
{
    if (a->bad) return MF_EOVERFLOW;
    a->base = (char *)malloc(a->used > 0 ? (size_t)a->used : 1);
    if (!a->base) return MF_ENOMEM;
    a->used = 0;
    return MF_OK;
}

static inline int check_sweeps(ptrdiff_t max_sweeps, double tol, const double *history,
                               ptrdiff_t hist_len)
{
    if (max_sweeps < 0 || !(tol >= 0.0) || !history || hist_len < 1) return MF_EBADARG;
    return MF_OK;
}

static inline void put_history(double *history, ptrdiff_t hist_len, ptrdiff_t k, double v)
{
    if (k >= 0 && k < hist_len) history[k] = v;
}

/* ----------------------------------------------------------------------------------------- */
/* The model as the kernels see it (mf_hmm_common.c)                                          */

/* Checks m and T, and gives the model as the kernels see it: when lag >= T no output has a
 * context state inside the sequence, so the contexts are switched off and lag set to T (a
 * context "at distance T" touches nothing); t + lag is then never formed with a lag >= T.
 * Also checks that T * n, T * D and n * n * D fit with room to spare, so that the index
 * arithmetic of the kernels (at most a few times these) cannot overflow. */
MF_HMM_INTERNAL int mf_hmm__prepare(const mf_hmm_model *m, ptrdiff_t T, mf_hmm_model *e);

static inline const double *table(const mf_hmm_model *m, int k)
{
    return k == 0 ? m->U : (k == 1 ? m->V : m->W);
}

/* e[t, i]: every term of ln p(x | s) that involves s_t alone; returns the constant part
 * sum_t (-D_t/2 ln 2 pi - |x_t|^2 / 2), D_t and |x_t| over the observed coordinates of x_t. */
MF_HMM_INTERNAL double mf_hmm__site_terms(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                                          double *e);
/* e[t, i] = ln p(x_t | own mean of state i) up to terms free of i: the site terms without
 * the contexts (the first-order posterior of the model with its context means left out). */
MF_HMM_INTERNAL void mf_hmm__own_terms(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                                       double *e);

typedef struct {
    int ta, tb;          /* tables of the two ends (0 = U, 1 = V, 2 = W) */
    ptrdiff_t sa, sb;    /* times of the two ends */
    ptrdiff_t out;       /* the output whose mean holds both terms */
} pair_t;

/* Couplings -a(s_sa) . b(s_sb) of ln p(x | s): one per output and pair of its mean's terms;
 * at most 3 T of them. */
MF_HMM_INTERNAL ptrdiff_t mf_hmm__build_pairs(const mf_hmm_model *m, ptrdiff_t T, pair_t *p);

/* constcol[k * D + d] = 1 when column d of table k takes one value over all states. */
MF_HMM_INTERNAL void mf_hmm__const_columns(const mf_hmm_model *m, int *constcol);

static inline double dot_gamma(const double *g, const double *tab, ptrdiff_t n, ptrdiff_t D,
                               ptrdiff_t d)
{
    double s = 0.0;
    ptrdiff_t i;
    for (i = 0; i < n; i++) s += g[i] * tab[i * D + d];
    return s;
}

static inline double var_gamma(const double *g, const double *tab, ptrdiff_t n, ptrdiff_t D,
                               ptrdiff_t d, double mean)
{
    double s = 0.0;
    ptrdiff_t i;
    for (i = 0; i < n; i++) s += g[i] * sq(tab[i * D + d] - mean);
    return s;
}

/* The reported bound, evaluated without cancellation (mf_hmm_common.c).  The sweeps work with
 * the expanded form of ln p(x | s) -- site terms x.a - |a|^2/2 and couplings -a.b -- whose
 * pieces grow as the square of the distance between the data and the state means and cancel
 * in the sum: beyond a spread of about 1e4 the rounding of that form (eps * spread^2 per
 * output) can lift the value above the exact ln P(x).  The bound a kernel reports is therefore
 * recomputed from
 *   E_Q[ln p(x_t | s)] = sum over observed d of -1/2 [(x_td - E m_td)^2 + Var m_td] - ln(2 pi)/2,
 * m_t = U[s_t] + V[s_{t+lag}] + W[s_{t-lag}], each variance and covariance summed over centred
 * values, so that every term is of the size of the answer.
 *
 * bar (3, T, D): bar[k][t, d] = sum_i gamma_t(i) table_k[i, d] (tables absent from the model
 * left untouched). */
MF_HMM_INTERNAL void mf_hmm__bar_means(const mf_hmm_model *m, ptrdiff_t T, const double *gam,
                                       double *bar);
/* sum_t E_Q[ln p(x_t | s)] from the marginals gam (T, n), bar, and cov (T, D) (or NULL for a
 * product Q): the summed covariances of the three terms of m_td, each counted once. */
MF_HMM_INTERNAL double mf_hmm__emission(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                                        const double *gam, const double *bar,
                                        const double *cov);

/* ----------------------------------------------------------------------------------------- */
/* Forward-backward (mf_hmm_fb.c)                                                             */

MF_HMM_INTERNAL int mf_hmm__fb(ptrdiff_t T, ptrdiff_t n, const double *startprob,
                               const double *transmat, const double *logpot, double *gamma,
                               double *xi_sum, double *work, double *logz);

/* ----------------------------------------------------------------------------------------- */
/* Link bound (mf_hmm_link.c) and naive mean field (mf_hmm_naive.c)                           */

typedef struct {
    double *e, *h, *work, *lam2, *abar, *bbar;
    double *mom;   /* (T, 3, D, 2) mean and variance of each table's column under gamma_t */
    pair_t *pairs;
    int *cc;
} link_bufs;

MF_HMM_INTERNAL void mf_hmm__link_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T,
                                         link_bufs *b);
MF_HMM_INTERNAL int mf_hmm__link(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                                 ptrdiff_t max_sweeps, double tol, const double *init,
                                 double *gamma, double *history, ptrdiff_t hist_len,
                                 ptrdiff_t *n_sweeps, double *bound, double *logpot);

typedef struct {
    double *e, *work, *means, *pot, *cpl, *logsp, *logA;
} naive_bufs;

MF_HMM_INTERNAL void mf_hmm__naive_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T,
                                          naive_bufs *b);
MF_HMM_INTERNAL int mf_hmm__naive(const mf_hmm_model *m, ptrdiff_t T, const double *X,
                                  ptrdiff_t max_sweeps, double tol, double *q, double *history,
                                  ptrdiff_t hist_len, ptrdiff_t *n_sweeps, double *bound);

/* ----------------------------------------------------------------------------------------- */
/* The exact objective of a chain (mf_hmm_chain.c, mf_hmm_rows.c), coordinate ascent on it    */
/* (mf_hmm_ascent.c)                                                                          */

typedef struct {
    const mf_hmm_model *m;      /* prepared: lag < T, or no context */
    ptrdiff_t T, n, lag, kmax;  /* kmax: longest coupling distance (0 without couplings) */
    ptrdiff_t nk;               /* products of conditional matrices kept: min(2 lag, T - 1) */
    int has1, has2;             /* couplings at distance lag / 2 lag in the model */
    double cst;
    double *e;                  /* (T, n) single-site terms */
    const double *X;            /* (T, D) the data (NaN: missing) */
    unsigned char *rc;          /* (T) row codes (ROW_MISSING / ROW_FULL / ROW_PARTIAL) */
    double *K1, *K2;            /* (n, n) coupling energies, row = state at the earlier end */
    double *KUV, *KWU;          /* (n, n) the two parts of K1 (U at l, V at l+lag; W at l, U at
                                 * l+lag), for outputs l or l+lag missing */
    double *kb;                 /* (n, n) a coupling matrix of partly observed outputs */
    double *alpha, *beta, *phi; /* (T, n) filtered forward, scaled backward, exp(h - max) */
    double *gam;                /* (T, n) marginals */
    double *tl;                 /* (T, n) E[couplings whose earlier end is t | s_t] */
    double *cr;                 /* (T, n) right-hand conditional sums of a sweep */
    double *ML, *MR;            /* (nk, n, n) products of conditional matrices */
    double *tmp, *tmp2;         /* (n, n) */
    double *At;                 /* (n, n) the transitions transposed, At[j, i] = A[i, j] */
    double *Lnx;                /* (n, n) L_{t+1}, left by a sweep's step at t for the next */
    double *v;                  /* (5 n) */
    double *sq;                 /* (3, T, n) the ascent's extrapolation: h0, h1, the new point */
    /* the low-rank path (mf_hmm_rows.c): on when lr */
    int lr;
    ptrdiff_t bV, bU, aU, aW;   /* largest distances of the right (V, U) and left (U, W) rows */
    ptrdiff_t offRV, offRU, wR, rowR, offLU, offLW, wL, rowL;   /* row layouts (n, w), doubles */
    ptrdiff_t blk, nck;         /* block length of the right rows, checkpoints */
    double *mkr;                /* (T, D) at row T - 1 - t: 1 where x_t is observed, 0 where
                                 * missing (time reversed: see lr_cross) */
    ptrdiff_t *nmiss;           /* (T + 1) rows before t not fully observed */
    double *ck, *bk, *rr, *ll;  /* checkpoints (nck rows), block (blk rows), 2 right rows, 3 left */
    /* the careful evaluation of the reported bound (mf_hmm__xchain_careful) */
    double *bar, *cov;          /* (3, T, D) means under Q, (T, D) covariances */
    ptrdiff_t cV, cU, offCV, offCU, wC;   /* its rows' largest distances (-1: none) and layout */
    double *cnd;                /* (2, n, wC) two rows (mf_hmm_rows.c, careful_row) */
} xchain_t;

/* Which path the chain objective and sweep take: 0 by cost (the default), 1 the low-rank
 * path whenever it applies, 2 never, 3 the low-rank path with its right rows in blocks even
 * when all would fit.  Only tests change it (a process-wide switch). */
extern int mf_hmm__lowrank_mode;

/* Sizes and the buffers of an xchain_t for the prepared model m (x->m .. x->nk set here). */
MF_HMM_INTERNAL void mf_hmm__xchain_layout(arena_t *a, xchain_t *x, const mf_hmm_model *m,
                                           ptrdiff_t T);
/* Fills the carved buffers: site terms and coupling energies. */
MF_HMM_INTERNAL void mf_hmm__xchain_setup(xchain_t *x, const double *X);
/* The coupling energies between s_l and s_{l+lag} (K1) / s_{l+2 lag} (K2) with the missing
 * coordinates of their outputs left out; NULL when there is no such coupling at l (or every
 * coordinate it involves is missing).  A partly observed output's matrix is written to x->kb,
 * valid until the next call. */
MF_HMM_INTERNAL const double *mf_hmm__k1(xchain_t *x, ptrdiff_t l);
MF_HMM_INTERNAL const double *mf_hmm__k2(xchain_t *x, ptrdiff_t l);
/* F(h); fills gam, tl (and the messages) for a sweep that follows; xi_sum, pair1, pair2 may be
 * NULL (pair1 and pair2 stay zero in a model without context couplings).  pmask, when not NULL,
 * (3, D, n, n) receives per output coordinate d the sums over l of Q(s_l, s_{l+lag}) where the
 * output l is observed in d (U-V), where the output l+lag is (W-U), and of Q(s_l, s_{l+2 lag})
 * where the output l+lag is (W-V): the M-step's statistics with missing values. */
MF_HMM_INTERNAL int mf_hmm__xchain_objective(xchain_t *x, const double *h, double *xi_sum,
                                             double *pair1, double *pair2, double *pmask,
                                             double *value);
/* F(h) evaluated without cancellation (see mf_hmm__emission): the value a kernel reports.
 * Overwrites the messages, gam and cr (used as scratch). */
MF_HMM_INTERNAL int mf_hmm__xchain_careful(xchain_t *x, const double *h, double *value);

/* What the chain's three files share.  Whether a coupling at distance lag (c1_at) or 2 lag
 * (c2_at) has its earlier end at l: inline, as the loops over t ask at every step. */
static inline int c1_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has1 && l >= 0 && l < x->T && x->lag < x->T - l;
}

static inline int c2_at(const xchain_t *x, ptrdiff_t l)
{
    return x->has2 && l >= 0 && l < x->T && x->lag < x->T - l && x->lag < x->T - l - x->lag;
}

/* The chain's messages for the potentials h, and ln Z (have_forward: the forward ones are
 * those of h already); R_t into R; one step of a sweep's right-hand conditional sums, given
 * R_t; the end of a sweep's step at t (mf_hmm_chain.c, each described there). */
MF_HMM_INTERNAL int mf_hmm__xchain_messages(xchain_t *x, const double *h, int have_forward,
                                            double *logz);
MF_HMM_INTERNAL void mf_hmm__rmat(const xchain_t *x, ptrdiff_t t, double *R);
MF_HMM_INTERNAL void mf_hmm__cr_step(xchain_t *x, const double *h, ptrdiff_t t, const double *R);
MF_HMM_INTERNAL int mf_hmm__set_site(xchain_t *x, ptrdiff_t t, const double *term,
                                     const double *khi, double *h, double *cl, double *lz);
/* One sweep of the full-matrix path (mf_hmm_chain.c), after mf_hmm__xchain_objective(h). */
MF_HMM_INTERNAL int mf_hmm__xchain_sweep(xchain_t *x, double *h);
/* The low-rank path (mf_hmm_rows.c): its buffers (x->lr = 1 when it is taken) and their
 * fixed part; F(h) without the pairwise marginals (fwd_logz: NULL, or ln Z when the forward
 * messages are those of h, left by a low-rank sweep); one sweep, after its objective. */
MF_HMM_INTERNAL void mf_hmm__lr_layout(arena_t *a, xchain_t *x);
MF_HMM_INTERNAL void mf_hmm__lr_setup(xchain_t *x);
MF_HMM_INTERNAL int mf_hmm__lr_objective(xchain_t *x, const double *h, const double *fwd_logz,
                                         double *xi_sum, double *value);
MF_HMM_INTERNAL int mf_hmm__lr_sweep(xchain_t *x, double *h, double *lz);
/* Coordinate ascent from h (in place), extrapolated every third sweep (see mf_hmm_ascent);
 * history[0..*n_sweeps] (within hist_len).  MF_OK when a sweep raised F by at most tol * T (or
 * there is nothing to optimise), MF_NOT_CONVERGED when the budget ran out first. */
MF_HMM_INTERNAL int mf_hmm__xchain_ascent(xchain_t *x, ptrdiff_t max_sweeps, double tol,
                                          double *h, double *history, ptrdiff_t hist_len,
                                          ptrdiff_t *n_sweeps, double *value);

/* ----------------------------------------------------------------------------------------- */
/* Structured mean field (mf_hmm_structured.c) and the exact likelihood (mf_hmm_exact.c)      */

/* The structured solver's starts (mf_hmm_structured.c): the link solutions from the
 * first-order posterior and from the naive marginals, the first-order posterior, and the
 * first-order posterior of the model without its context means. */
#define MF_HMM_N_STARTS 4

typedef struct {
    double *hbest, *h, *hist, *q, *pairs, *pmask;
} structured_bufs;

MF_HMM_INTERNAL void mf_hmm__structured_layout(arena_t *a, xchain_t *x, const mf_hmm_model *m,
                                               ptrdiff_t T, ptrdiff_t hist_len,
                                               structured_bufs *b);

typedef struct {
    double *alpha, *anew, *le, *mean;
    ptrdiff_t *start, *fill, *outs, *kt, *pw, *dig;
} exact_bufs;

/* Window width on a prepared model: 1 + lag per context, at most T. */
MF_HMM_INTERNAL ptrdiff_t mf_hmm__exact_width(const mf_hmm_model *m, ptrdiff_t T);
/* n^width, or -1 on overflow. */
MF_HMM_INTERNAL ptrdiff_t mf_hmm__exact_states_of(const mf_hmm_model *e, ptrdiff_t T);
MF_HMM_INTERNAL void mf_hmm__exact_layout(arena_t *a, const mf_hmm_model *m, ptrdiff_t T,
                                          ptrdiff_t N, ptrdiff_t w, exact_bufs *b);

#endif
