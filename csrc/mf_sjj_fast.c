/* The fast sigmoid path of the strict (SJJ) bound: one item's coordinate ascent from products
 * of per-edge factors (mf_sjj_fast_solve) and its share of the reported bound
 * (mf_sjj_fast_final); see mf_sjj.h for the state and the contract, and the module docstring
 * of mfengine/sbn/_sjj.pyx ("Fast path", "Large sparse nets") for the mathematics.
 *
 * Plain C so that GCC vectorises the per-edge loops and, with MF_TARGET_CLONES, compiles the
 * whole per-item solve twice (x86-64 and x86-64-v3, AVX2+FMA), chosen once at load time.
 * Everything but the two entry points is static inline and forced inline (SJJF_INLINE): each
 * entry point is one body per layout (stride 1 or records) and per clone, with no call inside
 * the per-edge loops. */
#include <math.h>
#include <stddef.h>
#include <string.h>
#include "mf_exp.h"
#include "mf_sjj.h"

#if defined(MF_TARGET_CLONES) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SJJF_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SJJF_CLONES
#endif
#define SJJF_INLINE static inline __attribute__((always_inline))
#define SJJF_T_MAX 700.0
#define SJJF_T_TOL 1e-12
#define SJJF_MAX_IT 100
/* Software prefetch of the next unit's scattered state (see sjjf_prefetch_*): only for nets
 * whose per-unit state (about 17 arrays of n doubles) outgrows the caches. */
#if defined(__GNUC__) || defined(__clang__)
#define SJJF_PREFETCH(p, rw) __builtin_prefetch((p), (rw), 3)
#else
#define SJJF_PREFETCH(p, rw) ((void) 0)
#endif
#define SJJF_PF_MIN_UNITS 16384
/* The record of a unit on large nets (MF_SJJ_REC, mf_sjj.h): mu, nu, pa, pb, xi, Z, isacc (and
 * a spare) in one cache line, so that a parent's or a child's state read at random costs one
 * miss, not 2-6 (one per array).  SJJF_U(a, i, ST): the unit-i entry of such an array. */
#define SJJF_U(a, i, ST) ((a)[(ptrdiff_t) (i) * (ST)])
/* The benchmarks' switch (mf_sjj_fast_set_prefetch).  A file-level flag rather than a field of
 * the state: read from the state, the same test changed GCC's register allocation of the
 * whole solve and cost 1% more instructions on the fast path (callgrind). */
static int sjjf_prefetch_on = 1;

int mf_sjj_fast_set_prefetch(int on)
{
    int old = sjjf_prefetch_on;
    sjjf_prefetch_on = on != 0;
    return old;
}

/* With records, the per-edge factors a = e^{-xi_c w}, b = a e^w are kept as one pair per edge
 * in parent order (ap[2 e], ap[2 e + 1]) for the xi pass, which reads them in order, and no
 * child-order copy: the mean pass takes a child edge's factors anew from the child's xi (in
 * its record, read anyway) and the child-order w and e^w (read in order), the same
 * expressions as when they were stored, so the same doubles: one exponential per child
 * instead of a cache miss (before: two copies scattered into child order by the xi pass,
 * two misses written per edge). */

/* e^y for |y| <= 708 from the vectorisable mf_exp_parts (within about 2 ulp). */
SJJF_INLINE double sjjf_exp(double y)
{
    double num, den;
    mf_exp_parts(-fabs(y), &num, &den);
    double top = y <= 0.0 ? num : den, bot = y <= 0.0 ? den : num;
    return top / bot;
}

SJJF_INLINE void sjjf_set_mean(double t, double *m, double *nu)
{
    double num, den, r;
    mf_exp_parts(-fabs(t), &num, &den);
    r = 1.0 / (den + num);
    if (t >= 0.0) { *m = den * r; *nu = num * r; }
    else { *m = num * r; *nu = den * r; }
}

/* The binary entropy of sigmoid(t) is ln u + |t| sigmoid(-|t|) with u = 1 + e^{-|t|}: returns
 * |t| sigmoid(-|t|) and u as *un / *ud (no logarithm). */
SJJF_INLINE double sjjf_entropy_t(double t, double *un, double *ud)
{
    double num, den, a = fabs(t);
    mf_exp_parts(-a, &num, &den);
    *un = den + num;
    *ud = den;
    return a * (num / (den + num));
}

SJJF_INLINE double sjjf_entropy(double m, double nu)
{
    double s = 0.0;
    if (m > 0.0) s -= m * log(m);
    if (nu > 0.0) s -= nu * log(nu);
    return s;
}

/* Unit i at xi = x with the current means: every factor FA = nu + m e^{-x w},
 * FB = nu + m e^{(1 - x) w} of its parents, S = e^A + e^B = e^{-x h} prod FA + e^{(1-x) h}
 * prod FB, and the derivative sums of A and B in x.  With fresh, the factors e^{-x w} are
 * taken anew (into ta, tb) and the derivative sums are left 0; otherwise the factors are
 * the cached ones of the unit's current xi.
 * Returns ln S; *o_pa, *o_pb are e^A / S and e^B / S, sums[0..4] the derivative sums
 * (sum w ra, sum w rb, sum w^2 ra (1 - ra), sum w^2 rb (1 - rb), sum w (rb - ra)) and *o_z
 * = h + sum w mu. */
SJJF_INLINE double sjjf_eval_impl(const mf_sjj_fast_state *s, ptrdiff_t i, double x, int fresh,
                                  double *o_pa, double *o_pb, double *sums, double *o_z,
                                  double *o_al, double *o_be, const int contig, const int ST)
{
    const ptrdiff_t p0 = s->par_ptr[i], k = s->par_ptr[i + 1] - p0;
    const double *restrict w = s->w + p0;
    const double *restrict ew = s->ew + p0;
    const ptrdiff_t *restrict pj = s->par_idx + p0;
    const ptrdiff_t j0 = contig ? s->pfirst[i] : 0;
    const double *restrict mu = s->mu + j0 * ST;
    const double *restrict nuv = s->nu + j0 * ST;
    double *restrict ta = s->ta;
    double *restrict tb = s->tb;
    ptrdiff_t e;
    double PA = 1.0, PB = 1.0, gA = 0.0, gB = 0.0, hA2 = 0.0, hB2 = 0.0, gD = 0.0, z = 0.0;
    if (fresh) {
        /* new factors: the products only (the derivative sums are not read before the next
         * evaluation at the same xi, which takes them anew) */
#pragma omp simd reduction(*:PA, PB) reduction(+:z)
        for (e = 0; e < k; e++) {
            const ptrdiff_t j = contig ? e : pj[e];
            double m = SJJF_U(mu, j, ST), nu = SJJF_U(nuv, j, ST), we = w[e];
            double a = sjjf_exp(-x * we), b = a * ew[e];
            ta[e] = a;
            tb[e] = b;
            PA *= nu + m * a;
            PB *= nu + m * b;
            z += we * m;
        }
    } else {
        ta = ST == 1 ? s->ap + p0 : s->ap + 2 * p0;
        tb = ST == 1 ? s->bp + p0 : s->ap + 2 * p0 + 1;
#pragma omp simd reduction(*:PA, PB) reduction(+:gA, gB, hA2, hB2, gD, z)
        for (e = 0; e < k; e++) {
            const ptrdiff_t j = contig ? e : pj[e];
            double m = SJJF_U(mu, j, ST), nu = SJJF_U(nuv, j, ST);
            double a = ST == 1 ? ta[e] : ta[2 * e], b = ST == 1 ? tb[e] : tb[2 * e];
            double we = w[e];
            double FA = nu + m * a, FB = nu + m * b;
            double inv = 1.0 / (FA * FB);
            double ra = m * a * FB * inv, rb = m * b * FA * inv;
            double ca = nu * FB * inv, cb = nu * FA * inv;      /* 1 - ra, 1 - rb */
            PA *= FA;
            PB *= FB;
            gA += we * ra;
            gB += we * rb;
            hA2 += (we * we) * (ra * ca);
            hB2 += (we * we) * (rb * cb);
            gD += we * (rb - ra);
            z += we * m;
        }
    }
    const double hi = s->h[i];
    double al = fresh ? exp(-x * hi) : s->al[i], be = fresh ? exp((1.0 - x) * hi) : s->be[i];
    double hA = al * PA, hB = be * PB, S = hA + hB;
    *o_al = al;
    *o_be = be;
    *o_pa = hA / S;
    *o_pb = hB / S;
    sums[0] = gA; sums[1] = gB; sums[2] = hA2; sums[3] = hB2; sums[4] = gD;
    *o_z = hi + z;
    return log(S);
}

SJJF_INLINE double sjjf_eval(const mf_sjj_fast_state *s, ptrdiff_t i, double x, int fresh,
                             double *o_pa, double *o_pb, double *sums, double *o_z, double *ab,
                             const int ST)
{
    if (s->pfirst[i] >= 0)
        return sjjf_eval_impl(s, i, x, fresh, o_pa, o_pb, sums, o_z, ab, ab + 1, 1, ST);
    return sjjf_eval_impl(s, i, x, fresh, o_pa, o_pb, sums, o_z, ab, ab + 1, 0, ST);
}

/* Store unit i's evaluation as its state (and, if fresh, its factors into ap, bp). */
SJJF_INLINE void sjjf_store(mf_sjj_fast_state *s, ptrdiff_t i, double x, int fresh, double lnS,
                            double pa, double pb, const double *sums, double z,
                            const double *ab, const int ST)
{
    s->al[i] = ab[0];
    s->be[i] = ab[1];
    if (fresh && ST != 1) {
        const ptrdiff_t p0 = s->par_ptr[i], k = s->par_ptr[i + 1] - p0;
        double *restrict d = s->ap + 2 * p0;
        for (ptrdiff_t e = 0; e < k; e++) {
            d[2 * e] = s->ta[e];
            d[2 * e + 1] = s->tb[e];
        }
    } else if (fresh) {
        const ptrdiff_t p0 = s->par_ptr[i], k = s->par_ptr[i + 1] - p0;
        memcpy(s->ap + p0, s->ta, k * sizeof(double));
        memcpy(s->bp + p0, s->tb, k * sizeof(double));
        const ptrdiff_t *restrict pos = s->pos + p0;
        for (ptrdiff_t e = 0; e < k; e++) {
            s->aq[pos[e]] = s->ta[e];
            s->bq[pos[e]] = s->tb[e];
        }
    }
    SJJF_U(s->xi, i, ST) = x;
    s->lnS[i] = lnS;
    SJJF_U(s->isacc, i, ST) = 1.0;
    SJJF_U(s->pa, i, ST) = pa;
    SJJF_U(s->pb, i, ST) = pb;
    SJJF_U(s->Z, i, ST) = z;
    s->gA[i] = sums[0]; s->gB[i] = sums[1]; s->hA2[i] = sums[2]; s->hB2[i] = sums[3];
    s->gD[i] = sums[4];
}

/* One safeguarded Newton step on unit i's xi from the derivative sums of its last evaluation
 * (taken before the last mean pass: slightly stale, which only affects the step; the step is
 * kept only if phi = ln S + x Z fell at the current means), then every cache of unit i anew. */
SJJF_INLINE void sjjf_xi_step(mf_sjj_fast_state *s, ptrdiff_t i, double gtol, const int ST)
{
    double x = SJJF_U(s->xi, i, ST), hi = s->h[i];
    double sums[5], npa, npb, z, lnS, xn = x, lo, hi_, phi_old, pa, pb, Z, ab[2], nab[2];
    double lnS0 = sjjf_eval(s, i, x, 0, &pa, &pb, sums, &Z, ab, ST);
    double d1 = pa * (-hi - sums[0]) + pb * (-hi - sums[1]) + Z;
    double d2 = pa * sums[2] + pb * sums[3] + pa * pb * sums[4] * sums[4];
    if (s->par_ptr[i + 1] > s->par_ptr[i] && fabs(d1) > gtol) {
        if (d1 < 0.0) { lo = x; hi_ = 1.0; } else { lo = 0.0; hi_ = x; }
        xn = d2 > 0.0 ? x - d1 / d2 : -1.0;
        if (!(lo < xn && xn < hi_)) xn = 0.5 * (lo + hi_);
        if (!(xn >= 0.0 && xn <= 1.0)) xn = x;
    }
    if (xn != x) {
        phi_old = lnS0 + x * Z;
        lnS = sjjf_eval(s, i, xn, 1, &npa, &npb, sums, &z, nab, ST);
        if (lnS + xn * z <= phi_old) {
            sjjf_store(s, i, xn, 1, lnS, npa, npb, sums, z, nab, ST);
            return;
        }
        sjjf_eval(s, i, x, 0, &pa, &pb, sums, &Z, ab, ST);
    }
    sjjf_store(s, i, x, 0, lnS0, pa, pb, sums, Z, ab, ST);
}

/* Move mu_k to a local maximum of the bound uphill from where it is (as update_mu of the
 * careful path, from the cached products: no exponential per child); 1 if it moved. */
SJJF_INLINE int sjjf_update_mu_impl(mf_sjj_fast_state *s, ptrdiff_t k, double gtol,
                                    const int contig, const int ST)
{
    const ptrdiff_t q0 = s->ch_ptr[k], nc = s->ch_ptr[k + 1] - q0;
    const ptrdiff_t *restrict cc = s->ch_idx + q0;
    const double *restrict aq = s->aq + q0;
    const double *restrict bq = s->bq + q0;
    const double *restrict ewq = s->ewq + q0;
    double *restrict Aq = s->Aq;
    double *restrict Bq = s->Bq;
#define SJJF_AQ(q) (ST == 1 ? aq[q] : Aq[q])
#define SJJF_BQ(q) (ST == 1 ? bq[q] : Bq[q])
    const double *restrict wq = s->wq + q0;
    const ptrdiff_t c0i = contig ? s->cfirst[k] : 0;
    double *restrict pa = s->pa + c0i * ST;
    double *restrict pb = s->pb + c0i * ST;
    double *restrict Ph = s->Ph;
    double *restrict Rh = s->Rh;
    double *restrict iA = s->iA;
    double *restrict iB = s->iB;
    double *restrict Iv = s->Iv;
    const double *restrict mu = s->mu + c0i * ST;
    const double *restrict xi = s->xi + c0i * ST;
    const double mk = SJJF_U(s->mu, k, ST), nk = SJJF_U(s->nu, k, ST), t0 = s->t[k];
    double c0 = SJJF_U(s->Z, k, ST), G = 0.0, pd = 1.0;
    ptrdiff_t q, it;
#pragma omp simd reduction(+:c0, G) reduction(*:pd)
    for (q = 0; q < nc; q++) {
        const ptrdiff_t c = contig ? q : cc[q];
        double a, b;
        if (ST == 1) {
            a = aq[q];
            b = bq[q];
        } else {
            a = sjjf_exp(-SJJF_U(xi, c, ST) * wq[q]);
            b = a * ewq[q];
            Aq[q] = a;
            Bq[q] = b;
        }
        double FA = nk + mk * a, FB = nk + mk * b;
        double inv = 1.0 / (FA * FB), ia = FB * inv, ib = FA * inv;
        double pac = SJJF_U(pa, c, ST), pbc = SJJF_U(pb, c, ST);
        double P = pac * ia + pbc * ib;
        double R = pac * a * ia + pbc * b * ib;
        Ph[q] = P;
        Rh[q] = R;
        iA[q] = ia;
        iB[q] = ib;
        c0 += (SJJF_U(mu, c, ST) - SJJF_U(xi, c, ST)) * wq[q];
        G += R - P;           /* (R - P) / (nk P + mk R), that denominator being 1 */
        pd *= nk * P + mk * R;
    }
    double F0 = -t0 + c0 - G, lo, hi, g, tn, mun = mk, nun = nk, F, dF, sn, pn = 1.0;
    int need_lo = 0, need_hi = 0, evaluated = 0;
    if (!(fabs(F0) > gtol))
        return 0;
    /* The stationary point sought lies between t0 and g1 = c0 - sum (R - P) / R (F0 > 0;
     * F(t) <= g1 - t) or between g0 = c0 - sum (R - P) / P and t0 (F0 < 0); the first trial,
     * the gradient step t0 + F0, lies there too, so that end is only computed (one division
     * per child) if the trial falls short. */
    if (F0 > 0.0) { lo = t0; hi = SJJF_T_MAX; need_hi = 1; }
    else { lo = -SJJF_T_MAX; hi = t0; need_lo = 1; }
    tn = t0 + F0;
    tn = tn > SJJF_T_MAX ? SJJF_T_MAX : (tn < -SJJF_T_MAX ? -SJJF_T_MAX : tn);
    if (!(tn != t0))
        return 0;
    for (it = 0; it < SJJF_MAX_IT; it++) {
        sjjf_set_mean(tn, &mun, &nun);
        F = -tn + c0;
        dF = 0.0;
        pn = 1.0;
#pragma omp simd reduction(-:F) reduction(+:dF) reduction(*:pn)
        for (q = 0; q < nc; q++) {
            double den = nun * Ph[q] + mun * Rh[q], inv = 1.0 / den;
            double dq = (Rh[q] - Ph[q]) * inv;
            Iv[q] = inv;
            F -= dq;
            dF += dq * dq;
            pn *= den;
        }
        evaluated = 1;
        if (fabs(F) <= gtol) break;
        if (F > 0.0) lo = tn; else hi = tn;
        if (F > 0.0 && need_hi) {
            g = c0;
#pragma omp simd reduction(-:g)
            for (q = 0; q < nc; q++) g -= (Rh[q] - Ph[q]) / Rh[q];
            hi = g < SJJF_T_MAX ? g : SJJF_T_MAX;
            need_hi = 0;
        } else if (F < 0.0 && need_lo) {
            g = c0;
#pragma omp simd reduction(-:g)
            for (q = 0; q < nc; q++) g -= (Rh[q] - Ph[q]) / Ph[q];
            lo = g > -SJJF_T_MAX ? g : -SJJF_T_MAX;
            need_lo = 0;
        }
        if (!(hi - lo > SJJF_T_TOL)) break;
        dF = -1.0 + mun * nun * dF;
        sn = dF < 0.0 ? tn - F / dF : lo - 1.0;
        if (!(lo < sn && sn < hi) || sn == tn) sn = 0.5 * (lo + hi);
        tn = sn;
        evaluated = 0;
    }
    if (!evaluated) {
        sjjf_set_mean(tn, &mun, &nun);
        pn = 1.0;
#pragma omp simd reduction(*:pn)
        for (q = 0; q < nc; q++) {
            double den = nun * Ph[q] + mun * Rh[q];
            Iv[q] = 1.0 / den;
            pn *= den;
        }
    }
    /* keep the move only if the exact 1-D objective rose (pd: the product at the old mean) */
    double dmu = (mk + mun > 1.0) ? (nk - nun) : (mun - mk);
    double un_n, ud_n, un_o, ud_o;
    double lin = sjjf_entropy_t(tn, &un_n, &ud_n) - sjjf_entropy_t(t0, &un_o, &ud_o);
    double gain = lin + dmu * c0 - log((pn * un_o * ud_n) / (pd * ud_o * un_n));
    if (!(gain > 0.0))
        return 0;
    SJJF_U(s->mu, k, ST) = mun;
    SJJF_U(s->nu, k, ST) = nun;
    s->t[k] = tn;
    double *restrict Z = s->Z + c0i * ST;
    double *restrict isacc = s->isacc + c0i * ST;
#pragma omp simd
    for (q = 0; q < nc; q++) {
        const ptrdiff_t c = contig ? q : cc[q];
        double ir = (nk * Ph[q] + mk * Rh[q]) * Iv[q];
        SJJF_U(pa, c, ST) *= (nun + mun * SJJF_AQ(q)) * iA[q] * ir;
        SJJF_U(pb, c, ST) *= (nun + mun * SJJF_BQ(q)) * iB[q] * ir;
        SJJF_U(isacc, c, ST) *= ir;
        SJJF_U(Z, c, ST) += wq[q] * dmu;
    }
    return 1;
#undef SJJF_AQ
#undef SJJF_BQ
}

SJJF_INLINE int sjjf_update_mu(mf_sjj_fast_state *s, ptrdiff_t k, double gtol, const int ST)
{
    if (s->cfirst[k] >= 0)
        return sjjf_update_mu_impl(s, k, gtol, 1, ST);
    return sjjf_update_mu_impl(s, k, gtol, 0, ST);
}

/* The bound from the caches, O(n_units). */
SJJF_INLINE double sjjf_bound(const mf_sjj_fast_state *s, const int ST)
{
    /* the logarithms of the S-ratios and of the entropies' u as one product (its binary
     * exponent kept apart) */
    double total = 0.0, prod = 1.0, un, ud;
    int ex = 0, e;
    for (ptrdiff_t i = 0; i < s->n; i++) {
        if (s->skip != NULL && s->skip[i])
            continue;
        total += (SJJF_U(s->mu, i, ST) - SJJF_U(s->xi, i, ST)) * SJJF_U(s->Z, i, ST) - s->lnS[i];
        prod *= SJJF_U(s->isacc, i, ST);
        if (s->free_[i]) {
            total += sjjf_entropy_t(s->t[i], &un, &ud);
            prod *= un / ud;
        }
        prod = frexp(prod, &e);
        ex += e;
    }
    return total + (log(prod) + ex * 0.69314718055994530942);
}

/* Unit i's term (mu_i - xi_i) Z_i - ln(e^A + e^B) from scratch in product form, and in *o_M
 * the magnitude sum M' of its rounding allowance (see fast_bound_at in _sjj_fast.pxi). */
SJJF_INLINE double sjjf_final_unit_impl(const mf_sjj_fast_state *s, ptrdiff_t i, double *o_M,
                                        const int contig)
{
    const ptrdiff_t p0 = s->par_ptr[i], k = s->par_ptr[i + 1] - p0;
    const double *restrict w = s->w + p0;
    const double *restrict ew = s->ew + p0;
    const ptrdiff_t *restrict pj = s->par_idx + p0;
    const ptrdiff_t j0 = contig ? s->pfirst[i] : 0;
    const double *restrict mu = s->mu + j0;
    const double *restrict nuv = s->nu + j0;
    const double x = s->xi[i];
    double PA = 1.0, PB = 1.0, z = 0.0, sw = 0.0;
#pragma omp simd reduction(*:PA, PB) reduction(+:z, sw)
    for (ptrdiff_t e = 0; e < k; e++) {
        const ptrdiff_t j = contig ? e : pj[e];
        double m = mu[j], nu = nuv[j];
        double a = sjjf_exp(-x * w[e]), b = a * ew[e];
        PA *= nu + m * a;
        PB *= nu + m * b;
        z += w[e] * m;
        sw += fabs(w[e]);
    }
    const double hi = s->h[i];
    z += hi;
    double term = (s->mu[i] - x) * z - log(exp(-x * hi) * PA + exp((1.0 - x) * hi) * PB);
    *o_M = fabs(hi) + fabs(z) + fabs(term) + 1.0 + 4.0 * sw + (double) k;
    return term;
}

/* The fast path's share of the reported bound (mf_sjj.h; the allowance is derived in
 * fast_bound_at, mfengine/sbn/_sjj_fast.pxi). */
SJJF_CLONES
void mf_sjj_fast_final(const mf_sjj_fast_state *s, const unsigned char *skip,
                       unsigned char *careful, double *total, double *err)
{
    const double eps = 2.220446049250313e-16;
    double tot = 0.0, er = 0.0, M, H;
    for (ptrdiff_t i = 0; i < s->n; i++) {
        ptrdiff_t p0 = s->par_ptr[i], p1 = s->par_ptr[i + 1], e, nfree = 0;
        if (skip != NULL && skip[i]) {          /* a barren unit: summed out */
            careful[i] = 0;
            continue;
        }
        for (e = p0; e < p1; e++) {
            ptrdiff_t j = s->par_idx[e];
            nfree += s->mu[j] != 0.0 && s->nu[j] != 0.0;
        }
        careful[i] = nfree == 0;
        if (nfree == 0)
            continue;
        tot += s->pfirst[i] >= 0 ? sjjf_final_unit_impl(s, i, &M, 1)
                                 : sjjf_final_unit_impl(s, i, &M, 0);
        if (s->free_[i]) {
            H = sjjf_entropy(s->mu[i], s->nu[i]);
            tot += H;
            er += 4.0 * eps * H;
        }
        er += (double) (p1 - p0 + 8) * eps * M;
    }
    *total = tot;
    *err = er;
}

/* Prefetch what unit i's xi step reads and writes at scattered places: its parents' mu and
 * nu, and the child-order places of its edges' factors (aq, bq); with records, the parents'
 * records only.  Nothing for a unit whose parents are a run of consecutive units (read in
 * order, the hardware prefetches them). */
SJJF_INLINE void sjjf_prefetch_parents(const mf_sjj_fast_state *s, ptrdiff_t i, const int ST)
{
    if (s->pfirst[i] >= 0)
        return;
    for (ptrdiff_t e = s->par_ptr[i]; e < s->par_ptr[i + 1]; e++) {
        const ptrdiff_t j = s->par_idx[e], q = ST == 1 ? s->pos[e] : 0;
        SJJF_PREFETCH(s->mu + j * ST, 0);
        if (ST == 1) {
            SJJF_PREFETCH(s->nu + j, 0);
            SJJF_PREFETCH(s->aq + q, 1);
            SJJF_PREFETCH(s->bq + q, 1);
        }
    }
}

/* Prefetch what unit k's mean update reads and writes at its children: pa, pb, mu, xi, Z
 * and the S-ratio (with records: the child's record). */
SJJF_INLINE void sjjf_prefetch_children(const mf_sjj_fast_state *s, ptrdiff_t k, const int ST)
{
    if (s->cfirst[k] >= 0 || !s->free_[k])
        return;
    for (ptrdiff_t q = s->ch_ptr[k]; q < s->ch_ptr[k + 1]; q++) {
        const ptrdiff_t c = s->ch_idx[q];
        SJJF_PREFETCH(s->pa + c * ST, 1);
        if (ST == 1) {
            SJJF_PREFETCH(s->pb + c, 1);
            SJJF_PREFETCH(s->mu + c, 0);
            SJJF_PREFETCH(s->xi + c, 0);
            SJJF_PREFETCH(s->Z + c, 1);
            SJJF_PREFETCH(s->isacc + c, 1);
        }
    }
}

/* mf_sjj_fast_solve for one layout of the per-unit state (ST: its stride). */
SJJF_INLINE int sjjf_solve_impl(mf_sjj_fast_state *s, double *hist, double tol, double gtol,
                                ptrdiff_t max_sweeps, double rel_floor, ptrdiff_t *sweeps_out,
                                const int ST)
{
    ptrdiff_t n = s->n, i, k, sweep = 0;
    double sums[5], pa, pb, z, lnS, bnd, prev, ab[2];
    int converged = 0;
    for (i = 0; i < n; i++) {
        lnS = sjjf_eval(s, i, SJJF_U(s->xi, i, ST), 1, &pa, &pb, sums, &z, ab, ST);
        sjjf_store(s, i, SJJF_U(s->xi, i, ST), 1, lnS, pa, pb, sums, z, ab, ST);
    }
    if (s->skip != NULL) {
        /* a barren unit is cut off: the factors of its in-edges are 1, so that its parents'
         * mean updates see R = P (no pull) from it; in records mode the mean pass takes them
         * anew from the child-order wq and e^w, which are 0 and 1 on those edges */
        for (i = 0; i < n; i++) {
            if (!s->skip[i])
                continue;
            for (ptrdiff_t e = s->par_ptr[i]; e < s->par_ptr[i + 1]; e++) {
                if (ST == 1) {
                    s->ap[e] = s->bp[e] = 1.0;
                    s->aq[s->pos[e]] = s->bq[s->pos[e]] = 1.0;
                } else {
                    s->ap[2 * e] = s->ap[2 * e + 1] = 1.0;
                }
            }
        }
    }
    prev = sjjf_bound(s, ST);
    if (hist != NULL) hist[0] = prev;
    const int pf = sjjf_prefetch_on && n >= SJJF_PF_MIN_UNITS;
    while (sweep < max_sweeps) {
        for (i = 0; i < n; i++) {
            if (pf && i + 1 < n)
                sjjf_prefetch_parents(s, i + 1, ST);
            if (s->skip == NULL || !s->skip[i])
                sjjf_xi_step(s, i, gtol, ST);
        }
        for (i = 0; i < n; i++) {
            k = sweep % 2 == 0 ? i : n - 1 - i;
            if (pf && i + 1 < n)
                sjjf_prefetch_children(s, sweep % 2 == 0 ? i + 1 : n - 2 - i, ST);
            if (s->free_[k] && (s->skip == NULL || !s->skip[k]))
                sjjf_update_mu(s, k, gtol, ST);
        }
        sweep++;
        bnd = sjjf_bound(s, ST);
        if (hist != NULL) hist[sweep] = bnd;
        if (fabs(bnd - prev) < tol + rel_floor * fabs(bnd)) {
            converged = 1;
            break;
        }
        prev = bnd;
    }
    *sweeps_out = sweep;
    return converged;
}

/* Coordinate ascent for one item on the fast path (mf_sjj.h): one body for each layout of the
 * per-unit state, arrays of stride 1 or records of stride MF_SJJ_REC. */
SJJF_CLONES
int mf_sjj_fast_solve(mf_sjj_fast_state *s, double *hist, double tol, double gtol,
                      ptrdiff_t max_sweeps, double rel_floor, ptrdiff_t *sweeps_out)
{
    if (s->stride == MF_SJJ_REC)
        return sjjf_solve_impl(s, hist, tol, gtol, max_sweeps, rel_floor, sweeps_out, MF_SJJ_REC);
    return sjjf_solve_impl(s, hist, tol, gtol, max_sweeps, rel_floor, sweeps_out, 1);
}
