"""Kernel: importance-sampled ln P(clamped units) for DAG belief nets (sigmoid or noisy-OR).

Called only from ``mfengine.sbn._solve.importance`` (through ``log_likelihood`` of the
models), which validates every input; the entry points still check every size and index they
read and return ``MF_EBADARG`` (``mf_status.h``) instead of trusting their caller.

For item p (a net ``net_of[p]`` and a row ``clamp[p]`` holding the clamped units' values and
NaN at the free ones) the proposal is the defensive mixture

    r(s) = (1 - a) prod_{free i} Bern(s_i; q_i) + a prod_{free i} P(s_i | parents)

of the factorised mean-field posterior q (means clipped to [eps, 1 - eps]) and the prior
(ancestral sampling of the free units with the clamped ones held at their values; Hesterberg's
defensive importance sampling).  Each weight P(s, v) / r(s) is at most 1 / a, so its variance
is finite whatever q is.  One draw costs O(n_units + edges from units that are on): unit
states are decided in topological order and each unit that turns on adds its weights to its
children's inputs.

Per item, with log-weights l_k (k < K): the estimate is ln((1/K) sum_k e^{l_k}), its standard
error by the delta method sd(w) / (sqrt(K) mean(w)), and the effective sample size
(sum w)^2 / sum w^2.  Where every weight is 0 (a noisy-OR pattern of probability 0) the
estimate is -inf, the standard error +inf and the ESS 0.

With ``pred``, ``estimate`` also gives every free unit's self-normalised estimate of
P(unit = 1 | clamped units), sum_k w_k x_k / sum_k w_k, and with ``pred_se`` its delta-method
standard error sqrt(sum_k w_k^2 (x_k - m)^2) / sum_k w_k, both accumulated in one pass with
the weights rescaled to the running largest log-weight.

``ais`` runs annealed importance sampling instead (Neal 2001): chains start from the
factorised q (clipped means; no defensive component, since every chain's weight is a product
of T ratios of neighbouring distributions f_b = q^(1 - b) P(., v)^b, b = (t / T)^2) and take
one Gibbs sweep over the needed free units at each intermediate temperature.  Each needed
unit's term ln P(s_c | parents) is cached, so a unit's update costs one log-probability per
child.  The estimate, its standard error and the ESS are computed from the chains' final
log-weights as above.

Random numbers: each item has its own stream, a splitmix64 sequence started from a hash of
(seed, item_offset + p), so the answer does not depend on the number of threads nor on how
the items are split between calls.
"""
import numpy as np

from cython.parallel cimport prange, parallel
from libc.math cimport log, log1p, exp, expm1, sqrt, INFINITY, NAN
from libc.stdlib cimport malloc, free
from libc.stdint cimport uint64_t
from mfengine._typedefs cimport intp_t, uint8_t, int8_t
from mfengine.sbn._dag cimport (Dag, check_dag, check_items, MF_OK, MF_EBADARG, MF_ENOMEM)

cdef extern from "mf_numerics.h" nogil:
    double mf_log1pexp(double x)
    double mf_sigmoid(double x)
    double mf_logaddexp(double a, double b)
    double mf_log1mexp(double x)
    double mf_se_with_resolution(double se, double m, double K)


cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    """splitmix64's finaliser (a bijection of 64-bit words)."""
    z = (z ^ (z >> 30)) * <uint64_t> 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * <uint64_t> 0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline double uniform(uint64_t *state) noexcept nogil:
    """The next double of a splitmix64 stream, uniform on [0, 1) (53 bits)."""
    state[0] += <uint64_t> 0x9E3779B97F4A7C15ULL
    return <double> (mix64(state[0]) >> 11) * (1.0 / 9007199254740992.0)


cdef inline double log_f(double z, bint on, bint noisy_or) noexcept nogil:
    """ln P(unit = on | input z): sigmoid, or noisy-OR f(z) = 1 - e^{-z} (z >= 0)."""
    if noisy_or:
        return mf_log1mexp(z) if on else -z
    return -mf_log1pexp(-z) if on else -mf_log1pexp(z)


cdef void prepare(const Dag *g, const double *clamp, const double *q, double eps,
                  uint8_t *needed, double *lq1, double *lq0) noexcept nogil:
    """``needed``: clamped units and free units with a clamped descendant.  A free unit
    without one sums out of P(v) exactly (its factors sum to 1 whatever its parents): it is
    neither drawn nor counted, and stays off.  ``lq1``, ``lq0``: ln q and ln(1 - q) of the
    free units' means clipped to [eps, 1 - eps]."""
    cdef Py_ssize_t n = g.n, i, e
    cdef double c, qi
    for i in range(n - 1, -1, -1):
        c = clamp[i]
        needed[i] = c == c
        if not needed[i]:
            for e in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
                if needed[g.ch_idx[e]]:
                    needed[i] = 1
                    break
    for i in range(n):
        c = clamp[i]
        if not (c == c):
            qi = q[i]
            if qi < eps:
                qi = eps
            if qi > 1.0 - eps:
                qi = 1.0 - eps
            lq1[i] = log(qi)
            lq0[i] = log1p(-qi)


cdef inline double log_ratio(double a, double b) noexcept nogil:
    """a - b for log-probabilities, 0 when both are -inf (the same impossible term)."""
    if a == b:
        return 0.0
    return a - b


cdef void ais_item(const Dag *g, const double *w, const double *h, const double *clamp,
                   const double *q, Py_ssize_t M, Py_ssize_t T, double eps, uint64_t seed,
                   bint noisy_or, double *work, double *est, double *se,
                   double *ess) noexcept nogil:
    """Annealed importance sampling (Neal 2001) of ln P(clamped units): M independent chains
    from the factorised q (clipped means) to the posterior through f_b = q^(1 - b) P(., v)^b,
    b = (t / T)^2 for t = 0..T, one Gibbs sweep over the needed free units at each
    intermediate b.  Each needed unit's current term ln P(s_c | parents) is cached, so a
    unit's Gibbs update costs one log-probability per child."""
    cdef Py_ssize_t n = g.n, i, k, e, t, ch, e0
    cdef double *z = work
    cdef double *lq1 = work + n
    cdef double *lq0 = work + 2 * n
    cdef double *term = work + 3 * n      # ln P(s_c | parents) of every needed unit, current
    cdef double *alt = work + 4 * n       # the children's terms with unit i flipped
    cdef double *lw = work + 5 * n
    cdef uint8_t *needed = <uint8_t *> (work + 5 * n + M)
    cdef uint8_t *s = needed + n
    cdef double c, lp, lq, b, b_prev, dq, dp, wv, delta, own1, own0, a_
    cdef bint on, alive
    cdef uint64_t state = mix64(seed)
    prepare(g, clamp, q, eps, needed, lq1, lq0)
    for k in range(M):
        for i in range(n):
            z[i] = h[i]
        lp = 0.0
        lq = 0.0
        for i in range(n):
            c = clamp[i]
            if c == c:
                on = c > 0.5
            elif not needed[i]:
                s[i] = 0
                continue
            else:
                on = uniform(&state) < exp(lq1[i])
                lq = lq + (lq1[i] if on else lq0[i])
            term[i] = log_f(z[i], on, noisy_or)
            lp = lp + term[i]
            s[i] = on
            if on:
                for e in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
                    z[g.ch_idx[e]] += w[g.ch_w[e]]
        lw[k] = 0.0
        alive = lp > -INFINITY
        b_prev = 0.0
        for t in range(1, T + 1):
            if not alive:
                break
            b = (<double> t / T) * (<double> t / T)
            lw[k] = lw[k] + (b - b_prev) * (lp - lq)
            b_prev = b
            if t == T:
                break
            for i in range(n):
                c = clamp[i]
                if c == c or not needed[i]:
                    continue
                # dp: ln P(., v) with unit i on minus with it off, the others as they are
                own1 = log_f(z[i], True, noisy_or)
                own0 = log_f(z[i], False, noisy_or)
                dp = log_ratio(own1, own0)
                e0 = g.ch_ptr[i]
                for e in range(e0, g.ch_ptr[i + 1]):
                    ch = g.ch_idx[e]
                    wv = w[g.ch_w[e]]
                    if wv == 0.0 or not needed[ch]:
                        continue
                    if s[i]:
                        a_ = log_f(z[ch] - wv, s[ch], noisy_or)
                        dp = dp + log_ratio(term[ch], a_)
                    else:
                        a_ = log_f(z[ch] + wv, s[ch], noisy_or)
                        dp = dp + log_ratio(a_, term[ch])
                    alt[e - e0] = a_
                dq = lq1[i] - lq0[i]
                delta = (1.0 - b) * dq + b * dp
                on = uniform(&state) < mf_sigmoid(delta)
                if on != s[i]:
                    if on:
                        lp = lp + dp
                        lq = lq + dq
                        term[i] = own1
                    else:
                        lp = lp - dp
                        lq = lq - dq
                        term[i] = own0
                    s[i] = on
                    for e in range(e0, g.ch_ptr[i + 1]):
                        ch = g.ch_idx[e]
                        wv = w[g.ch_w[e]]
                        z[ch] += wv if on else -wv
                        if wv != 0.0 and needed[ch]:
                            term[ch] = alt[e - e0]
        if not alive:
            lw[k] = -INFINITY
    summarise(lw, M, est, se, ess)


cdef void estimate_item(const Dag *g, const double *w, const double *h, const double *clamp,
                        const double *q, Py_ssize_t K, double mix, double eps, uint64_t seed,
                        bint noisy_or, double *work, double *est, double *se,
                        double *ess, double *pred, double *pse, bint rb) noexcept nogil:
    """One item's estimate; with ``pred`` (else NULL) also the self-normalised importance
    estimate of P(s_j = 1 | clamped units) of every free unit j: of E[s_j] for a needed unit,
    of E[P(s_j = 1 | parents)] (Rao-Blackwellised) for a barren one, whose draws then come
    from the prior (their factors cancel in the weight).  With ``pse`` too (else NULL; only
    with ``pred``), each estimate's delta-method standard error
    sqrt(sum_k w_k^2 (x_k - m)^2) / sum_k w_k, m the estimate (before its clip to 1), with the
    estimate's resolution (K + 16) u |m| (mf_se_with_resolution) added in quadrature.

    The sums behind ``pse`` are kept beside the estimates' own, which they leave untouched:
    S2 = sum t_k^2 and per unit A = sum t_k^2 (x_k - m) and Q = sum t_k^2 (x_k - m)^2,
    centred on the running estimate m (so Q is never a small difference of large sums) and
    moved exactly when m moves by d: Q -= 2 d A - d^2 S2, A -= d S2.  The t_k are the weights
    rescaled to the largest log-weight so far, like the estimates' sums, so a rescale
    multiplies S2, A and Q by the square of the estimates' factor.

    With ``rb`` (only with ``pred``), a needed free unit's value in a draw is its conditional
    P(s_j = 1 | the draw's other units, clamped units) = sigmoid(ln P(s_j = 1, rest) -
    ln P(s_j = 0, rest)) (Rao-Blackwellised: its own factor and its needed children's, as in
    ``ais_item``'s Gibbs step) instead of s_j itself; the estimates stay consistent, and
    where the draws sit on a few states, their neighbours one flip away count too."""
    cdef Py_ssize_t n = g.n, i, k, e, j
    cdef double *z = work
    cdef double *lq1 = work + n          # ln q_i and ln(1 - q_i) of the clipped means
    cdef double *lq0 = work + 2 * n
    cdef double *lw = work + 3 * n
    cdef double *pv = work + 3 * n + K   # this draw's value of each free unit (pred)
    cdef double *acc = work + 4 * n + K  # A of every free unit (pse; Q is kept in pse)
    cdef double c, qi, lp, lprior, lmf, l, u, pon, m_run = -INFINITY, s_run = 0.0, scale, t
    cdef double s2_run = 0.0, inv_old, inv_new, m_old, m_new, d, r, t2
    cdef double la = log(mix) if mix > 0.0 else -INFINITY
    cdef double l1a = log1p(-mix) if mix < 1.0 else -INFINITY
    cdef bint prior, on
    cdef uint64_t state = mix64(seed)
    cdef double *rbv = work + 5 * n + K  # each needed free unit's conditional (rb)
    cdef uint8_t *needed = <uint8_t *> (work + 6 * n + K)
    cdef Py_ssize_t ch
    cdef double wv, zc, own1, own0, dp
    cdef bint son, cs
    prepare(g, clamp, q, eps, needed, lq1, lq0)
    if pred != NULL:
        for i in range(n):
            pred[i] = 0.0
    if pse != NULL:
        for i in range(n):
            pse[i] = 0.0
            acc[i] = 0.0
    for k in range(K):
        prior = uniform(&state) < mix
        for i in range(n):
            z[i] = h[i]
        lp = 0.0
        lprior = 0.0
        lmf = 0.0
        for i in range(n):
            c = clamp[i]
            if c == c:
                on = c > 0.5
                lp = lp + log_f(z[i], on, noisy_or)
            elif not needed[i]:
                if pred == NULL:
                    continue
                pon = -expm1(-z[i]) if noisy_or else mf_sigmoid(z[i])
                pv[i] = pon
                on = uniform(&state) < pon
            else:
                u = uniform(&state)
                if prior:
                    if noisy_or:
                        pon = -expm1(-z[i])
                    else:
                        pon = mf_sigmoid(z[i])
                    on = u < pon
                else:
                    on = u < exp(lq1[i])
                l = log_f(z[i], on, noisy_or)
                lp = lp + l
                lprior = lprior + l
                lmf = lmf + (lq1[i] if on else lq0[i])
                pv[i] = 1.0 if on else 0.0
            if on:
                for e in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
                    z[g.ch_idx[e]] += w[g.ch_w[e]]
        lw[k] = lp - mf_logaddexp(l1a + lmf, la + lprior)
        # a draw whose weight, rescaled to the largest so far, underflows to 0 adds nothing
        # (t = 0 below): its conditionals are not computed, and the sums are the same bits
        if rb and pred != NULL and lw[k] > -INFINITY and lw[k] - m_run > -746.0:
            for i in range(n):
                c = clamp[i]
                if c == c or not needed[i]:
                    continue
                son = pv[i] > 0.5
                own1 = log_f(z[i], True, noisy_or)
                own0 = log_f(z[i], False, noisy_or)
                dp = log_ratio(own1, own0)
                for e in range(g.ch_ptr[i], g.ch_ptr[i + 1]):
                    ch = g.ch_idx[e]
                    wv = w[g.ch_w[e]]
                    if wv == 0.0 or not needed[ch]:
                        continue
                    c = clamp[ch]
                    cs = (c > 0.5) if c == c else (pv[ch] > 0.5)
                    # the child's term with unit i on, and with it off
                    zc = z[ch] if son else z[ch] + wv
                    own1 = log_f(zc, cs, noisy_or)
                    zc = z[ch] - wv if son else z[ch]
                    if noisy_or and zc < 0.0:
                        zc = 0.0                  # rounding of a sum that held wv
                    dp = dp + log_ratio(own1, log_f(zc, cs, noisy_or))
                rbv[i] = mf_sigmoid(dp) if dp == dp else pv[i]
            for i in range(n):
                c = clamp[i]
                if not (c == c) and needed[i]:
                    pv[i] = rbv[i]
        if pred != NULL and lw[k] > -INFINITY:
            # running weighted sums, rescaled to the largest log-weight so far
            if lw[k] > m_run:
                scale = exp(m_run - lw[k])
                for i in range(n):
                    pred[i] = pred[i] * scale
                s_run = s_run * scale
                if pse != NULL:
                    scale = scale * scale
                    s2_run = s2_run * scale
                    for i in range(n):
                        acc[i] = acc[i] * scale
                        pse[i] = pse[i] * scale
                m_run = lw[k]
            t = exp(lw[k] - m_run)
            if pse == NULL:
                s_run = s_run + t
                for i in range(n):
                    c = clamp[i]
                    if not (c == c):
                        pred[i] = pred[i] + t * pv[i]
            else:
                # the same sums as above, and the standard errors' beside them
                inv_old = 1.0 / s_run if s_run > 0.0 else 0.0
                s_run = s_run + t
                inv_new = 1.0 / s_run
                t2 = t * t
                for i in range(n):
                    c = clamp[i]
                    if not (c == c):
                        m_old = pred[i] * inv_old
                        pred[i] = pred[i] + t * pv[i]
                        m_new = pred[i] * inv_new
                        d = m_new - m_old
                        # re-centre the earlier draws' sums on the new estimate (exact; a
                        # no-op at the first draw, where S2 = A = Q = 0)
                        pse[i] = pse[i] - d * (2.0 * acc[i] - d * s2_run)
                        acc[i] = acc[i] - d * s2_run
                        r = pv[i] - m_new
                        pse[i] = pse[i] + t2 * r * r
                        acc[i] = acc[i] + t2 * r
                s2_run = s2_run + t2
    if pred != NULL:
        for i in range(n):
            c = clamp[i]
            if c == c:
                pred[i] = c
                if pse != NULL:
                    pse[i] = 0.0
            elif s_run > 0.0:
                pred[i] = pred[i] / s_run
                if pred[i] > 1.0:
                    pred[i] = 1.0
                if pse != NULL:
                    # Q >= 0 in exact arithmetic; rounding in the re-centring may leave -0;
                    # the estimate's own resolution joins the sampling error
                    pse[i] = mf_se_with_resolution(
                        sqrt(pse[i]) / s_run if pse[i] > 0.0 else 0.0, pred[i], <double> K)
            else:
                pred[i] = NAN
                if pse != NULL:
                    pse[i] = NAN
    summarise(lw, K, est, se, ess)


cdef void summarise(const double *lw, Py_ssize_t K, double *est, double *se,
                    double *ess) noexcept nogil:
    """ln of the mean of e^{lw}, its delta-method standard error and the ESS."""
    cdef Py_ssize_t k
    cdef double m, s1, s2, mean, var, t
    m = -INFINITY
    for k in range(K):
        if lw[k] > m:
            m = lw[k]
    if not (m > -INFINITY):
        est[0] = -INFINITY
        se[0] = INFINITY
        ess[0] = 0.0
        return
    s1 = 0.0
    s2 = 0.0
    for k in range(K):
        t = exp(lw[k] - m)
        s1 = s1 + t
        s2 = s2 + t * t
    mean = s1 / K
    var = (s2 / K - mean * mean) * K / (K - 1.0)
    if var < 0.0:
        var = 0.0
    est[0] = m + log(mean)
    se[0] = sqrt(var / K) / mean
    ess[0] = s1 * s1 / s2


def estimate(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
             const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
             const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
             const double[:, ::1] q, Py_ssize_t n_samples, double mix, double eps,
             uint64_t seed, uint64_t item_offset, double[::1] est, double[::1] se,
             double[::1] ess, int8_t[::1] status, bint noisy_or=False, int n_threads=1,
             double[:, ::1] pred=None, double[:, ::1] pred_se=None,
             bint rao_blackwell=False):
    """Estimate ln P(clamped units) of every item into ``est`` (with ``se``, ``ess``).

    ``q`` (n_items, n_units): the proposal means of the free units (read only where ``clamp``
    is NaN).  ``mix`` in [0, 1] is the prior's share of the proposal (0: no defensive
    component, 1: the prior alone); ``eps`` in [0, 0.5] clips the means.  Returns MF_OK, or
    MF_EBADARG (nothing written) when a size, an index or an option is out of range;
    ``status[p]`` is MF_ENOMEM for an item whose thread could not allocate its scratch
    space.  ``pred`` (n_items, n_units), optional: each free unit's estimated
    P(unit = 1 | clamped units) (clamped units: their value; NaN where every weight is 0).
    ``pred_se`` (n_items, n_units), optional and only with ``pred``: the delta-method standard
    error of each of those self-normalised estimates, sqrt(sum w^2 (x - m)^2) / sum w (0 at a
    clamped unit, NaN where every weight is 0); asking for it leaves ``pred`` and the other
    outputs bit for bit as they are without it.  ``rao_blackwell`` (only with ``pred``): a
    needed free unit's value in each draw is its conditional given the draw's other units
    (see ``estimate_item``); the draws and ln P estimates are unchanged.
    """
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    if check_items(&g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n_items = clamp.shape[0], p, n = g.n, nnz = par_idx.shape[0]
    if (q.shape[0] != n_items or q.shape[1] != n or est.shape[0] != n_items
            or se.shape[0] != n_items or ess.shape[0] != n_items
            or status.shape[0] != n_items or n_threads < 1 or n_samples < 2
            or n_samples > (1 << 40) or not (0.0 <= mix <= 1.0) or not (0.0 <= eps <= 0.5)):
        return MF_EBADARG
    cdef bint want_pred = pred is not None
    cdef bint want_se = pred_se is not None
    if want_pred and (pred.shape[0] != n_items or pred.shape[1] != n):
        return MF_EBADARG
    if want_se and (not want_pred or pred_se.shape[0] != n_items or pred_se.shape[1] != n):
        return MF_EBADARG
    if rao_blackwell and not want_pred:
        return MF_EBADARG
    cdef size_t nbytes = (6 * <size_t> n + <size_t> n_samples) * sizeof(double) + <size_t> n + 16
    cdef double *work = NULL
    cdef double dummy_w = 0.0
    with nogil, parallel(num_threads=n_threads):
        work = <double *> malloc(nbytes)
        for p in prange(n_items, schedule="dynamic", chunksize=1):
            if work == NULL:
                status[p] = MF_ENOMEM
                continue
            status[p] = MF_OK
            estimate_item(&g, &w[net_of[p], 0] if nnz else &dummy_w, &h[net_of[p], 0],
                          &clamp[p, 0], &q[p, 0], n_samples, mix, eps,
                          seed ^ mix64(item_offset + <uint64_t> p + 1), noisy_or, work,
                          &est[p], &se[p], &ess[p], &pred[p, 0] if want_pred else NULL,
                          &pred_se[p, 0] if want_se else NULL, rao_blackwell)
        free(work)
    return MF_OK


def ais(const intp_t[::1] par_ptr, const intp_t[::1] par_idx, const intp_t[::1] ch_ptr,
        const intp_t[::1] ch_idx, const intp_t[::1] ch_w, const double[:, ::1] w,
        const double[:, ::1] h, const intp_t[::1] net_of, const double[:, ::1] clamp,
        const double[:, ::1] q, Py_ssize_t n_chains, Py_ssize_t n_steps, double eps,
        uint64_t seed, uint64_t item_offset, double[::1] est, double[::1] se, double[::1] ess,
        int8_t[::1] status, bint noisy_or=False, int n_threads=1):
    """Annealed importance sampling of ln P(clamped units) of every item (see ``ais_item``):
    ``n_chains`` chains of ``n_steps`` temperatures each.  Arguments as ``estimate``; returns
    MF_OK or MF_EBADARG (nothing written)."""
    cdef Dag g
    if check_dag(par_ptr, par_idx, ch_ptr, ch_idx, ch_w, &g) != MF_OK:
        return MF_EBADARG
    if check_items(&g, w, h, net_of, clamp) != MF_OK:
        return MF_EBADARG
    cdef Py_ssize_t n_items = clamp.shape[0], p, n = g.n, nnz = par_idx.shape[0]
    if (q.shape[0] != n_items or q.shape[1] != n or est.shape[0] != n_items
            or se.shape[0] != n_items or ess.shape[0] != n_items
            or status.shape[0] != n_items or n_threads < 1 or n_chains < 2
            or n_chains > (1 << 40) or n_steps < 1 or not (0.0 < eps <= 0.5)):
        return MF_EBADARG
    cdef size_t nbytes = (5 * <size_t> n + <size_t> n_chains) * sizeof(double) + 2 * <size_t> n + 16
    cdef double *work = NULL
    cdef double dummy_w = 0.0
    with nogil, parallel(num_threads=n_threads):
        work = <double *> malloc(nbytes)
        for p in prange(n_items, schedule="dynamic", chunksize=1):
            if work == NULL:
                status[p] = MF_ENOMEM
                continue
            status[p] = MF_OK
            ais_item(&g, &w[net_of[p], 0] if nnz else &dummy_w, &h[net_of[p], 0],
                     &clamp[p, 0], &q[p, 0], n_chains, n_steps, eps,
                     seed ^ mix64(item_offset + <uint64_t> p + 1), noisy_or, work,
                     &est[p], &se[p], &ess[p])
        free(work)
    return MF_OK
