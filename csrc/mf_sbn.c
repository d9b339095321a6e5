/* Vectorised per-child loops; see mf_sbn.h for the mathematics. */
#include <math.h>
#include <string.h>
#include "mf_sbn.h"
#include "mf_numerics.h"

/* Run-time dispatch: one default x86-64 (SSE2) body and one AVX2+FMA body, chosen by the
 * loader (GCC ifunc).  Disabled for -march=native builds (MFENGINE_NATIVE=1), which already
 * target the build machine, and on compilers or platforms without target_clones. */
#if defined(MF_TARGET_CLONES) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MF_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define MF_HAVE_CLONES 1
#else
#define MF_CLONES
#define MF_HAVE_CLONES 0
#endif

int mf_sbn_dispatch_enabled(void) { return MF_HAVE_CLONES; }

/* Terms per chunk of the running products behind sums of log(1 + e^{-|a|}): each factor lies in
 * [0.4, 3], so 512 of them stay far inside double range, and two logs per chunk replace one log
 * per term. */
#define MF_LOGPROD_CHUNK 512

/* The no-objective loop, specialised at each call site on whether the u cache is kept and
 * whether any child is missing (want_u and has_obs are constants there, so the compiler emits
 * four loops without the tests). */
static inline void children_grad(ptrdiff_t n, const double *restrict J, const double *restrict J2,
                                 const double *restrict m, const double *restrict s,
                                 const double *restrict xi, const double *restrict muc,
                                 const double *restrict obs, double dmu, double dvar, double tk,
                                 const int want_u, const int has_obs, double *restrict sig_out,
                                 double *restrict u_out, double *restrict out)
{
    double d1 = 0.0, d2 = 0.0;
#pragma omp simd reduction(+:d1, d2)
    for (ptrdiff_t c = 0; c < n; c++) {
        double w = 0.5 - xi[c];
        double sc = s[c] + J2[c] * dvar;
        double a = m[c] + J[c] * dmu + w * sc;
        double sig;
        if (want_u) {
            double u;
            mf_sig_u(a, &sig, &u);
            u_out[c] = u;
        } else {
            sig = mf_sigmoid(a);
        }
        double q = xi[c] * xi[c] + 2.0 * w * sig;
        double ap = J[c] + w * J2[c] * tk;
        double t1 = J[c] * (muc[c] - sig) - 0.5 * J2[c] * tk * q;
        double t2 = J2[c] * q - sig * (1.0 - sig) * ap * ap;
        sig_out[c] = sig;
        d1 += has_obs ? obs[c] * t1 : t1;
        d2 += has_obs ? obs[c] * t2 : t2;
    }
    out[0] = d1;
    out[1] = d2;
    out[2] = 0.0;
}

MF_CLONES
void mf_sbn_children_eval(ptrdiff_t n, const double *restrict J, const double *restrict J2,
                          const double *restrict m, const double *restrict s,
                          const double *restrict xi, const double *restrict muc,
                          const double *restrict obs, double dmu, double dvar, double tk,
                          int want_f, int want_u, double *restrict sig_out,
                          double *restrict u_out, double *restrict out)
{
    double d1 = 0.0, d2 = 0.0, fsum = 0.0;
    if (!want_f) {
        if (want_u && obs)
            children_grad(n, J, J2, m, s, xi, muc, obs, dmu, dvar, tk, 1, 1, sig_out, u_out, out);
        else if (want_u)
            children_grad(n, J, J2, m, s, xi, muc, obs, dmu, dvar, tk, 1, 0, sig_out, u_out, out);
        else if (obs)
            children_grad(n, J, J2, m, s, xi, muc, obs, dmu, dvar, tk, 0, 1, sig_out, u_out, out);
        else
            children_grad(n, J, J2, m, s, xi, muc, obs, dmu, dvar, tk, 0, 0, sig_out, u_out, out);
        return;
    }
    for (ptrdiff_t c0 = 0; c0 < n; c0 += MF_LOGPROD_CHUNK) {
        ptrdiff_t c1 = c0 + MF_LOGPROD_CHUNK < n ? c0 + MF_LOGPROD_CHUNK : n;
        double prod = 1.0;
#pragma omp simd reduction(+:d1, d2, fsum) reduction(*:prod)
        for (ptrdiff_t c = c0; c < c1; c++) {
            double w = 0.5 - xi[c];
            double mc = m[c] + J[c] * dmu;
            double sc = s[c] + J2[c] * dvar;
            double a = mc + w * sc;
            double sig, u;
            mf_sig_u(a, &sig, &u);
            double q = xi[c] * xi[c] + 2.0 * w * sig;
            double ap = J[c] + w * J2[c] * tk;
            sig_out[c] = sig;
            u_out[c] = u;
            d1 += obs[c] * (J[c] * (muc[c] - sig) - 0.5 * J2[c] * tk * q);
            d2 += obs[c] * (J2[c] * q - sig * (1.0 - sig) * ap * ap);
            /* log(1 + e^a) = max(a, 0) + log u; the log of the product of the u is taken
             * once per chunk below (a missing child contributes a factor 1). */
            fsum += obs[c] * (muc[c] * mc - 0.5 * xi[c] * xi[c] * sc - (a > 0.0 ? a : 0.0));
            prod *= 1.0 + obs[c] * (u - 1.0);
        }
        fsum -= log(prod);
    }
    out[0] = d1;
    out[1] = d2;
    out[2] = fsum;
}

MF_CLONES
void mf_sbn_children_cached(ptrdiff_t n, const double *restrict J, const double *restrict J2,
                            const double *restrict xi, const double *restrict sig,
                            const double *restrict muc, const double *restrict obs, double tk,
                            double *restrict out)
{
    double d1 = 0.0, d2 = 0.0, curv = 0.0;
#pragma omp simd reduction(+:d1, d2, curv)
    for (ptrdiff_t c = 0; c < n; c++) {
        double w = 0.5 - xi[c];
        double q = xi[c] * xi[c] + 2.0 * w * sig[c];
        double ap = J[c] + w * J2[c] * tk;
        double x2 = xi[c] * xi[c], y2 = (1.0 - xi[c]) * (1.0 - xi[c]);
        d1 += obs[c] * (J[c] * (muc[c] - sig[c]) - 0.5 * J2[c] * tk * q);
        d2 += obs[c] * (J2[c] * q - sig[c] * (1.0 - sig[c]) * ap * ap);
        curv += obs[c] * J2[c] * (x2 > y2 ? x2 : y2);
    }
    out[0] = d1;
    out[1] = d2;
    out[2] = curv;
}

MF_CLONES
double mf_sbn_children_value(ptrdiff_t n, const double *restrict m, const double *restrict s,
                             const double *restrict xi, const double *restrict u,
                             const double *restrict muc, const double *restrict obs)
{
    double fsum = 0.0;
    for (ptrdiff_t c0 = 0; c0 < n; c0 += MF_LOGPROD_CHUNK) {
        ptrdiff_t c1 = c0 + MF_LOGPROD_CHUNK < n ? c0 + MF_LOGPROD_CHUNK : n;
        double prod = 1.0;
#pragma omp simd reduction(+:fsum) reduction(*:prod)
        for (ptrdiff_t c = c0; c < c1; c++) {
            double a = m[c] + (0.5 - xi[c]) * s[c];
            fsum += obs[c] * (muc[c] * m[c] - 0.5 * xi[c] * xi[c] * s[c] - (a > 0.0 ? a : 0.0));
            prod *= 1.0 + obs[c] * (u[c] - 1.0);
        }
        fsum -= log(prod);
    }
    return fsum;
}

MF_CLONES
void mf_sbn_sig_u_all(ptrdiff_t n, const double *restrict m, const double *restrict s,
                      const double *restrict xi, double *restrict sig, double *restrict u)
{
#pragma omp simd
    for (ptrdiff_t i = 0; i < n; i++) {
        double sg, uu;
        mf_sig_u(m[i] + (0.5 - xi[i]) * s[i], &sg, &uu);
        sig[i] = sg;
        u[i] = uu;
    }
}

MF_CLONES
double mf_sbn_layer_bound(ptrdiff_t n, const double *restrict mu, const double *restrict t,
                          const double *restrict m, const double *restrict s,
                          const double *restrict xi, const double *restrict obs)
{
    double total = 0.0;
    for (ptrdiff_t i0 = 0; i0 < n; i0 += MF_LOGPROD_CHUNK) {
        ptrdiff_t i1 = i0 + MF_LOGPROD_CHUNK < n ? i0 + MF_LOGPROD_CHUNK : n;
        double lin = 0.0, pn = 1.0, pd = 1.0;
        if (t != NULL) {
            /* hidden units: all observed, plus the entropy log(1 + e^t) - mu t */
#pragma omp simd reduction(+:lin) reduction(*:pn, pd)
            for (ptrdiff_t i = i0; i < i1; i++) {
                double a = m[i] + (0.5 - xi[i]) * s[i];
                double na, da, nt, dt;
                mf_exp_parts(-fabs(a), &na, &da);
                mf_exp_parts(-fabs(t[i]), &nt, &dt);
                lin += mu[i] * m[i] - 0.5 * xi[i] * xi[i] * s[i] - (a > 0.0 ? a : 0.0)
                       + (t[i] > 0.0 ? t[i] : 0.0) - mu[i] * t[i];
                /* -log(1 + e^{-|a|}) + log(1 + e^{-|t|}) = -log[(da + na) dt / (da (dt + nt))] */
                pn *= (da + na) * dt;
                pd *= da * (dt + nt);
            }
        } else {
#pragma omp simd reduction(+:lin) reduction(*:pn, pd)
            for (ptrdiff_t i = i0; i < i1; i++) {
                double o = obs == NULL ? 1.0 : obs[i];
                double a = m[i] + (0.5 - xi[i]) * s[i];
                double na, da;
                mf_exp_parts(-fabs(a), &na, &da);
                lin += o * (mu[i] * m[i] - 0.5 * xi[i] * xi[i] * s[i] - (a > 0.0 ? a : 0.0));
                pn *= da + o * na;
                pd *= da;
            }
        }
        total += lin - (log(pn) - log(pd));
    }
    return total;
}

MF_CLONES
void mf_sbn_children_commit(ptrdiff_t n, const double *restrict J, const double *restrict J2,
                            double dmu, double dvar, double *restrict m, double *restrict s,
                            double *restrict sig, double *restrict u,
                            const double *restrict sig_new, const double *restrict u_new,
                            int want_u)
{
#pragma omp simd
    for (ptrdiff_t c = 0; c < n; c++) {
        m[c] += J[c] * dmu;
        s[c] += J2[c] * dvar;
        sig[c] = sig_new[c];
    }
    if (want_u)
        memcpy(u, u_new, (size_t)n * sizeof *u);
}

MF_CLONES
void mf_sbn_children_commit_taylor(ptrdiff_t n, const double *restrict J,
                                   const double *restrict J2, const double *restrict xi,
                                   double dmu, double dvar, double *restrict m,
                                   double *restrict s, double *restrict sig,
                                   double *restrict u)
{
#pragma omp simd
    for (ptrdiff_t c = 0; c < n; c++) {
        double da = J[c] * dmu + (0.5 - xi[c]) * J2[c] * dvar;
        double sg = sig[c];
        double d1 = sg * (1.0 - sg);
        m[c] += J[c] * dmu;
        s[c] += J2[c] * dvar;
        sig[c] = sg + d1 * da * (1.0 + 0.5 * (1.0 - 2.0 * sg) * da);
    }
    if (u != NULL) {
        /* 1 + e^{-|a|} = 1 / max(sig, 1 - sig) exactly */
#pragma omp simd
        for (ptrdiff_t c = 0; c < n; c++) {
            double sg = sig[c];
            u[c] = 1.0 / (sg > 0.5 ? sg : 1.0 - sg);
        }
    }
}
