/* Importance-sampled ln p(x) for layered nonlinear Gaussian belief networks, one pattern at a
 * time; see mf_nlgbn.h for the contract.  Plain C, no Python, no allocation. */
#include <math.h>
#include <stdint.h>
#include "mf_nlgbn.h"
#include "mf_numerics.h"

#define NET_CHECKED 0x4e4c47
#define LOG_2PI 1.83787706640934548356

typedef struct {
    uint64_t s[4];
    int have;
    double spare;
} rng_t;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* uniform in (0, 1) */
static inline double uniform(rng_t *r) { return ((next_u64(r) >> 11) + 0.5) * 0x1.0p-53; }

static double normal(rng_t *r)
{
    if (r->have) {
        r->have = 0;
        return r->spare;
    }
    double u = uniform(r), v = uniform(r);
    double rad = sqrt(-2.0 * log(u)), ang = 6.28318530717958647692 * v;
    r->spare = rad * sin(ang);
    r->have = 1;
    return rad * cos(ang);
}

static void rng_seed(rng_t *r, uint64_t seed, uint64_t index)
{
    uint64_t x = seed;
    uint64_t a = splitmix64(&x);
    x = a ^ (index * 0xd1b54a32d192ed03ULL + 0x8bb84b93962eacc9ULL);
    for (int k = 0; k < 4; k++)
        r->s[k] = splitmix64(&x);
    r->have = 0;
    r->spare = 0.0;
}

static inline double unit_out(int type, double x)
{
    switch (type) {
    case MF_NLGBN_BINARY: return x >= 0.0 ? 1.0 : 0.0;
    case MF_NLGBN_RECTIFIED: return x > 0.0 ? x : 0.0;
    case MF_NLGBN_SIGMOIDAL: return mf_nlgbn_Phi(x);
    default: return x;
    }
}

ptrdiff_t mf_nlgbn_is_scratch(const mf_nlgbn_net *net)
{
    return net == NULL ? 0 : 8 * net->n_units + 1;
}

static inline double logaddexp(double a, double b)
{
    if (a < b) { double t = a; a = b; b = t; }
    if (b == -INFINITY) return a;
    return a + log1p(exp(b - a));
}

int mf_nlgbn_is_pattern(const mf_nlgbn_net *net, const double *x, const unsigned char *miss,
                        const double *mu, const double *logvar, ptrdiff_t n_samples,
                        unsigned long long seed, unsigned long long index, double *estimate,
                        double *stderr_out, double *ess, double *mean, double *mean_se,
                        double *sd, double *scratch)
{
    if (net == NULL || net->checked != NET_CHECKED || x == NULL || mu == NULL || logvar == NULL
        || estimate == NULL || stderr_out == NULL || ess == NULL || scratch == NULL
        || n_samples < 2 || (mean != NULL && (mean_se == NULL || sd == NULL)))
        return MF_EBADARG;
    ptrdiff_t U = net->n_units, H = net->n_hidden, L = net->n_layers;
    for (ptrdiff_t i = 0; i < H; i++)
        if (!isfinite(mu[i]) || !isfinite(logvar[i]) || logvar[i] > 600.0 || logvar[i] < -600.0)
            return MF_EBADARG;
    double *h = scratch, *f = scratch + U, *sig = scratch + 2 * U;
    /* the marginals' weighted sums, of d = (value - centre): sum w d, sum w d^2, sum w^2 d,
     * sum w^2 d^2 per unit, on the scale of the running largest weight like S1 and S2 */
    double *ctr = scratch + 3 * U, *Sd = scratch + 4 * U, *Sdd = scratch + 5 * U;
    double *Qd = scratch + 6 * U, *Qdd = scratch + 7 * U;
    const int want = mean != NULL;
    if (want) {
        for (ptrdiff_t i = 0; i < U; i++) {
            ctr[i] = i < H ? mu[i] : 0.0;
            Sd[i] = Sdd[i] = Qd[i] = Qdd[i] = 0.0;
        }
    }
    double sum_logsig = 0.0;
    for (ptrdiff_t i = 0; i < H; i++) {
        sig[i] = exp(0.5 * logvar[i]);
        sum_logsig += 0.5 * logvar[i];
    }
    /* r(h) = a_p p(h) + (1 - a_p) prod_i [b_q q_i + b_w q'_i + b_p p(h_i | pa_i)], drawn top-down */
    const double a_p = MF_NLGBN_IS_AP, la_p = log(a_p), la_r = log1p(-a_p);
    const double lb_q = log(MF_NLGBN_IS_BQ), lb_w = log(MF_NLGBN_IS_BW), lb_p = log(MF_NLGBN_IS_BP);
    const double cut_q = MF_NLGBN_IS_BQ, cut_w = MF_NLGBN_IS_BQ + MF_NLGBN_IS_BW;
    const double lwide = log(MF_NLGBN_IS_WIDE), wide2 = MF_NLGBN_IS_WIDE * MF_NLGBN_IS_WIDE;
    (void)sum_logsig;
    rng_t rng;
    rng_seed(&rng, (uint64_t)seed, (uint64_t)index);
    double lmax = -INFINITY, S1 = 0.0, S2 = 0.0;
    int bad = 0;
    for (ptrdiff_t k = 0; k < n_samples; k++) {
        int full_prior = uniform(&rng) < a_p;
        double llik = 0.0, lprior = 0.0, lmix = 0.0;
        for (ptrdiff_t l = 0; l < L; l++) {
            ptrdiff_t off = net->offset[l], nl = net->sizes[l];
            for (ptrdiff_t c = 0; c < nl; c++)
                f[off + c] = net->bias[off + c];          /* f holds net inputs for layer l */
            if (l > 0) {
                ptrdiff_t poff = net->offset[l - 1], P = net->sizes[l - 1];
                const double *W = net->WT + net->woff[l - 1];
                for (ptrdiff_t j = 0; j < P; j++) {
                    double out = unit_out(net->types[poff + j], h[poff + j]);
                    const double *row = W + j * nl;
                    for (ptrdiff_t c = 0; c < nl; c++)
                        f[off + c] += row[c] * out;
                }
            }
            for (ptrdiff_t c = 0; c < nl; c++) {
                ptrdiff_t i = off + c;
                double p = net->prec[i], lnorm = 0.5 * (log(p) - LOG_2PI);
                if (l == L - 1) {
                    if (miss != NULL && miss[c]) {
                        if (want && k == 0)
                            ctr[i] = f[i];        /* a missing entry's centre: a first draw */
                        continue;
                    }
                    double d = x[c] - f[i];
                    llik += -0.5 * p * d * d + lnorm;
                    continue;
                }
                if (full_prior) {
                    h[i] = f[i] + normal(&rng) / sqrt(p);
                } else {
                    double u = uniform(&rng);
                    if (u < cut_q)
                        h[i] = mu[i] + sig[i] * normal(&rng);
                    else if (u < cut_w)
                        h[i] = mu[i] + MF_NLGBN_IS_WIDE * sig[i] * normal(&rng);
                    else
                        h[i] = f[i] + normal(&rng) / sqrt(p);
                }
                double d = h[i] - f[i], lpi = -0.5 * p * d * d + lnorm;
                lprior += lpi;
                double z = (h[i] - mu[i]) / sig[i];
                double lqi = -0.5 * z * z - 0.5 * logvar[i] - 0.5 * LOG_2PI;
                double lwi = -0.5 * z * z / wide2 - lwide - 0.5 * logvar[i] - 0.5 * LOG_2PI;
                lmix += logaddexp(logaddexp(lb_q + lqi, lb_w + lwi), lb_p + lpi);
            }
        }
        double lr = logaddexp(la_p + lprior, la_r + lmix);
        double lwt = lprior + llik - lr;
        if (!isfinite(lwt)) {
            if (lwt == -INFINITY)
                continue;            /* a weight that underflows to 0 */
            bad = 1;
            break;
        }
        if (lwt > lmax) {
            if (lmax > -INFINITY) {
                double r = exp(lmax - lwt);
                S1 *= r;
                S2 *= r * r;
                if (want)
                    for (ptrdiff_t i = 0; i < U; i++) {
                        Sd[i] *= r;
                        Sdd[i] *= r;
                        Qd[i] *= r * r;
                        Qdd[i] *= r * r;
                    }
            }
            lmax = lwt;
        }
        double w = exp(lwt - lmax);
        S1 += w;
        S2 += w * w;
        if (want) {
            /* a hidden unit's value is its draw; a missing entry's is its conditional mean
             * given the draw, b + W f(h) (Rao-Blackwellised); an observed entry is the data */
            for (ptrdiff_t i = 0; i < U; i++) {
                if (i >= H && (miss == NULL || !miss[i - H]))
                    continue;
                double d = (i < H ? h[i] : f[i]) - ctr[i], wd = w * d;
                Sd[i] += wd;
                Sdd[i] += wd * d;
                Qd[i] += w * wd;
                Qdd[i] += w * wd * d;
            }
        }
    }
    if (bad || !(S1 > 0.0)) {
        *estimate = NAN;
        *stderr_out = NAN;
        *ess = NAN;
        if (want)
            for (ptrdiff_t i = 0; i < U; i++)
                mean[i] = mean_se[i] = sd[i] = NAN;
        return MF_EOVERFLOW;
    }
    double K = (double)n_samples, wbar = S1 / K;
    double var = (S2 / K - wbar * wbar) * K / (K - 1.0);
    if (var < 0.0) var = 0.0;
    *estimate = lmax + log(wbar);
    *stderr_out = sqrt(var / K) / wbar;
    *ess = S1 * S1 / S2;
    if (want) {
        for (ptrdiff_t i = 0; i < U; i++) {
            if (i >= H && (miss == NULL || !miss[i - H])) {
                mean[i] = x[i - H];
                mean_se[i] = sd[i] = 0.0;
                continue;
            }
            double dm = Sd[i] / S1, v = Sdd[i] / S1 - dm * dm;
            double q = (Qdd[i] - 2.0 * dm * Qd[i] + dm * dm * S2) / (S1 * S1);
            if (i >= H)
                v += 1.0 / net->prec[i];          /* the entry's noise given its parents */
            mean[i] = ctr[i] + dm;
            mean_se[i] = mf_se_with_resolution(sqrt(q > 0.0 ? q : 0.0), mean[i], K);
            sd[i] = sqrt(v > 0.0 ? v : 0.0);
        }
    }
    return MF_OK;
}
