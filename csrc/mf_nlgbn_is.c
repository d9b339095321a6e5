/* Importance-sampled ln p(x) for layered nonlinear Gaussian belief networks, one pattern at a
 * time; see mf_nlgbn.h for the contract.  Plain C, no Python, no allocation. */
#include <math.h>
#include <stdint.h>
#include "mf_nlgbn.h"

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
    return net == NULL ? 0 : 3 * net->n_units + 1;
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
                        double *stderr_out, double *ess, double *scratch)
{
    if (net == NULL || net->checked != NET_CHECKED || x == NULL || mu == NULL || logvar == NULL
        || estimate == NULL || stderr_out == NULL || ess == NULL || scratch == NULL
        || n_samples < 2)
        return MF_EBADARG;
    ptrdiff_t U = net->n_units, H = net->n_hidden, L = net->n_layers, nv = net->n_visible;
    for (ptrdiff_t i = 0; i < H; i++)
        if (!isfinite(mu[i]) || !isfinite(logvar[i]) || logvar[i] > 600.0 || logvar[i] < -600.0)
            return MF_EBADARG;
    double *h = scratch, *f = scratch + U, *sig = scratch + 2 * U;
    double sum_logsig = 0.0;
    for (ptrdiff_t i = 0; i < H; i++) {
        sig[i] = exp(0.5 * logvar[i]);
        sum_logsig += 0.5 * logvar[i];
    }
    const double la_q = log(MF_NLGBN_IS_AQ), la_w = log(MF_NLGBN_IS_AW), la_p = log(MF_NLGBN_IS_AP);
    const double lwide = log(MF_NLGBN_IS_WIDE), wide2 = MF_NLGBN_IS_WIDE * MF_NLGBN_IS_WIDE;
    const double cq = -sum_logsig - 0.5 * (double)H * LOG_2PI;
    const double cw = cq - (double)H * lwide;
    const double c_cut1 = MF_NLGBN_IS_AQ, c_cut2 = MF_NLGBN_IS_AQ + MF_NLGBN_IS_AW;
    rng_t rng;
    rng_seed(&rng, (uint64_t)seed, (uint64_t)index);
    double lmax = -INFINITY, S1 = 0.0, S2 = 0.0;
    int bad = 0;
    for (ptrdiff_t k = 0; k < n_samples; k++) {
        double u = uniform(&rng);
        int comp = u < c_cut1 ? 0 : (u < c_cut2 ? 1 : 2);
        double lp = 0.0, lprior = 0.0, d2 = 0.0;
        if (comp != 2) {
            double scale = comp == 0 ? 1.0 : MF_NLGBN_IS_WIDE;
            for (ptrdiff_t i = 0; i < H; i++) {
                double z = normal(&rng) * scale;
                h[i] = mu[i] + sig[i] * z;
                d2 += z * z;
            }
        }
        /* the prior's log density layer by layer (drawing from it for comp 2), then the
         * observed visible units' log likelihood */
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
                double p = net->prec[i];
                if (l == L - 1) {
                    if (miss != NULL && miss[c])
                        continue;
                    double d = x[c] - f[i];
                    lp += -0.5 * p * d * d + 0.5 * (log(p) - LOG_2PI);
                } else {
                    if (comp == 2)
                        h[i] = f[i] + normal(&rng) / sqrt(p);
                    double d = h[i] - f[i];
                    lprior += -0.5 * p * d * d + 0.5 * (log(p) - LOG_2PI);
                }
            }
        }
        (void)nv;
        lp += lprior;            /* log p(h) + log p(x_obs | h) */
        if (comp == 2) {
            d2 = 0.0;
            for (ptrdiff_t i = 0; i < H; i++) {
                double z = (h[i] - mu[i]) / sig[i];
                d2 += z * z;
            }
        }
        double lq = la_q + cq - 0.5 * d2;
        double lw_ = la_w + cw - 0.5 * d2 / wide2;
        double lr = logaddexp(logaddexp(lq, lw_), la_p + lprior);
        double lwt = lp - lr;
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
            }
            lmax = lwt;
        }
        double w = exp(lwt - lmax);
        S1 += w;
        S2 += w * w;
    }
    if (bad || !(S1 > 0.0)) {
        *estimate = NAN;
        *stderr_out = NAN;
        *ess = NAN;
        return MF_EOVERFLOW;
    }
    double K = (double)n_samples, mean = S1 / K;
    double var = (S2 / K - mean * mean) * K / (K - 1.0);
    if (var < 0.0) var = 0.0;
    *estimate = lmax + log(mean);
    *stderr_out = sqrt(var / K) / mean;
    *ess = S1 * S1 / S2;
    return MF_OK;
}
