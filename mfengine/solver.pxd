# mfengine.solver: the mean-field solvers of every family, for Cython and C callers.
#
#     from mfengine.solver cimport mf_sjj_solve, mf_hmm_structured_infer, MF_OK
#
# Cython: cimport any function below; compile with include_dirs=[mfengine.get_include()] (the
# status codes are the enum of the installed header mf_status.h) and the installed package on
# Cython's include path.  C: the installed header mfengine_solver.h (same directory) declares
# every function under a linkable name, mf_ -> mfengine_ (mfengine_sjj_solve, ...), in its
# family's compiled module (mfengine/sbn/_gaussian*.so, _sjj*.so, _plefka*.so,
# mfengine/hmm/_chain*.so, mfengine/nlgbn/_estep*.so): link that file and libpython.  None needs
# a running interpreter (the threads run in plain C); in a process that runs Python they may be
# called with or without the GIL.  A C program that embeds Python can also take them from their
# module's Cython capsule (__pyx_capi__) with the header's mfengine_capi_import(module, name)
# (defined when Python.h is included first) and its function-pointer types
# (mfengine_plefka_solve_fn, ...).  This text is also mfengine.solver's docstring.
#
# Every function is noexcept nogil, takes raw pointers and sizes (Py_ssize_t is ptrdiff_t;
# arrays row-major, allocated by the caller), writes only through its output pointers, and
# returns a status code:
#   MF_OK (0) success; MF_NOT_CONVERGED (1) results written, some item stopped at its budget;
#   MF_EBADARG (-1) a bad argument, nothing written; MF_ENOMEM (-2) a scratch allocation
#   failed; MF_EOVERFLOW (-3) a size computed from the sizes would overflow ptrdiff_t (what
#   these two leave written is said per family).
# n_threads is clamped to [1, 256] (OpenMP over items); results do not depend on it.  No
# function can check that a buffer holds the number of entries stated.
#
# 1. Layered sigmoid belief net, Gaussian approximation (module mfengine.sbn._gaussian).
# Every argument is checked before anything is read beyond `sizes`; MF_EBADARG means one of:
# n_layers < 2; sizes NULL or some sizes[l] < 1; n_patterns < 0; weights or biases NULL, or an
# entry that is NaN, infinite or of magnitude above 1e50; an output or data pointer NULL while
# n_patterns > 0 (missing may always be NULL); an observed entry of V other than 0.0 and 1.0; a
# mean or xi that must lie in [0, 1] and does not; tol not positive and finite; inner_tol NaN
# or infinite; max_sweeps < 1.  MF_ENOMEM, MF_EOVERFLOW: nothing written.
# L = n_layers layers, top first, the last one visible; sizes[l] units in layer l;
# U = sum(sizes) units, n_visible = sizes[L-1].
#   weights  the L-1 matrices concatenated: block l is (sizes[l+1], sizes[l]), row-major,
#            entry [i, j] the weight from unit j of layer l to unit i of layer l+1
#            (mfengine.SigmoidBeliefNet.weights_[l].ravel()); finite, |w| <= 1e50.
#   biases   (U,) layers concatenated top first; finite, |h| <= 1e50.
#   V        (n_patterns, n_visible) row-major, every observed entry 0.0 or 1.0.
#   missing  NULL, or (n_patterns, n_visible) bytes: nonzero = missing (left out of the bound).
#   mu, xi   (n_patterns, U) row-major, layers concatenated top first.
# mf_sbn_gaussian_infer(n_layers, sizes, weights, biases, n_patterns, V, missing, tol,
#   inner_tol, max_sweeps, n_threads, mu, xi, bound, n_sweeps, converged): Saul & Jordan's
#   Gaussian-approximated mean field (as mfengine.infer).
#   mu: on entry the hidden entries hold the starting means in [0, 1] (0.5 for a cold start);
#       on exit every entry: hidden means, visible data (xi at a missing entry).
#   xi: out.  bound (n_patterns,): out, the bound on ln P(v) in nats.  n_sweeps (n_patterns,):
#   out.  converged (n_patterns,): out, 1 if the bound changed by less than tol in the last
#   sweep.  inner_tol <= 0 selects mfengine.infer's defaults (and its shortcuts).
# mf_sbn_gaussian_gradient(n_layers, sizes, weights, biases, n_patterns, V, missing, mu, xi,
#   grad_weights, grad_biases): the gradient of the bound summed over patterns at (mu, xi)
#   (the output of mf_sbn_gaussian_infer), as mfengine.SigmoidBeliefNet.gradient:
#   grad_weights in the layout of weights, grad_biases (U,).  mu's hidden entries and its
#   visible entries at missing positions, and every xi, in [0, 1] (mu's observed visible
#   entries are not read: V's are used).  Deterministic, one thread.
#
# 2. DAG belief nets in CSR form (modules mfengine.sbn._sjj, mfengine.sbn._plefka).
# n_units units in topological order; par_ptr (n_units + 1) runs from 0 to nnz without
# decreasing; unit i's parents are par_idx[par_ptr[i] .. par_ptr[i+1]-1], strictly increasing,
# each below i; weights (nnz) the weight of each edge in that order
# (mfengine.sbn.dag.DagStructure.pack); biases (n_units,); activation 0 sigmoid, 1 noisy-OR.
# clamp (n_items, n_units): 0.0 or 1.0 for a clamped unit, NaN for a free one (hidden, or a
# missing visible unit).  Means (n_items, n_units) hold the clamped values at clamped units;
# starting means init NULL (0.5) or (n_items, n_units), entries at clamped units not read.
# converged is signed char, 1 / 0.  MF_EBADARG for all three: n_units, nnz or n_items < 0;
# par_ptr NULL; par_idx or weights NULL while nnz > 0; biases NULL while n_units > 0;
# par_ptr[0] != 0, par_ptr[n_units] != nnz, or par_ptr decreasing; a parent not in [0, i) for
# its unit i, or a unit's parents not strictly increasing; a weight or bias NaN or infinite;
# activation not 0 or 1; clamp NULL (with items and units) or an entry other than 0.0, 1.0 and
# NaN; an output NULL while it has entries; a free starting mean outside [0, 1] or NaN.
# mf_sjj_solve(n_units, nnz, par_ptr, par_idx, weights, biases, activation, n_items, clamp,
#   init_mu, init_xi, tol, inner_tol, max_sweeps, n_threads, bound, mu, xi, n_sweeps,
#   converged): Saul, Jaakkola & Jordan's strict lower bound on ln P(clamped units), maximised
#   over each item's means and variational parameters, as mfengine.sbn.sjj.solve.  init_xi
#   NULL (the defaults) or: sigmoid (n_items, n_units) in [0, 1]; noisy-OR (n_items, nnz)
#   finite and >= 0, the q of each edge (normalised per unit; an all-zero row starts uniform).
#   An item stops when a sweep changes its bound by less than tol (or 1e-13 of its size);
#   inner_tol is each 1-D solve's tolerance, 0 selecting mfengine.infer's rule
#   min(1e-3, max(1e-13, 0.1 sqrt(tol))); max_sweeps 0 gives the bound at the start.  Out:
#   bound (n_items,) in nats, a true lower bound for any finite weights; mu; xi (the shape of
#   init_xi); n_sweeps; converged.  Free units with no clamped descendant sum out exactly and
#   are left out of the solve and the bound; their means are predictive ones from their
#   parents' means (sigmoid: sigmoid(h_i + sum_j W_ij mu_j); noisy-OR: 1 - e^{-h_i} prod_j
#   (1 - mu_j + mu_j e^{-W_ij})), their xi not meaningful.  MF_EBADARG also: noisy-OR
#   with a negative weight or a bias <= 0; the sum of |weights| and |biases| above 2^1020;
#   tol or inner_tol negative, NaN or infinite; max_sweeps < 0 or = PTRDIFF_MAX; an init_xi
#   entry outside its range.  MF_ENOMEM: mu and xi may hold the start, the rest undefined;
#   MF_EOVERFLOW: nothing written.
# mf_plefka_solve(n_units, nnz, par_ptr, par_idx, weights, biases, activation, order, n_items,
#   clamp, init, tol, max_iter, n_threads, G, u, n_iter, converged): the stationary point in
#   the free means of Bhattacharyya & Keerthi's Plefka expansion G (order 11, 12 or 22), as
#   mfengine.sbn.plefka.solve with its defaults (line search, quasi-Newton steps, orders 11
#   and 12 finished by coordinate descent).  Out: G (n_items,) in nats (-G approximates
#   ln P(clamped units)); u; n_iter; converged.  Free units with no clamped descendant are
#   left out of G (it is the one of the net with them deleted) and get the predictive means
#   of mf_sjj_solve.  MF_NOT_CONVERGED also for an item without a
#   stationary point inside |logit u| <= 700 or with G = +inf; MF_EOVERFLOW: results written,
#   some item's G not finite even from the G11 start (G = NaN there), or nothing written when
#   n_items * n_units * 8 overflows; MF_ENOMEM: outputs undefined.
# mf_plefka_gradient(n_units, nnz, par_ptr, par_idx, weights, biases, activation, order,
#   n_items, clamp, u, G, grad_weights, grad_biases): G per item at the means u, and dG/dw
#   (nnz,) and dG/dh (n_units,) summed over the items (at mf_plefka_solve's solution the total
#   derivatives used for learning; mfengine.sbn.plefka.gradient summed), one thread; the
#   entries of u at units with no clamped descendant must lie in [0, 1] like every free
#   unit's but do not change the result (those units carry no term).
#   MF_EOVERFLOW: G or a gradient not finite.  MF_EBADARG also, both Plefka functions:
#   noisy-OR with a negative weight or bias; the sum of |weights| and |biases| above 2^1023;
#   order not 11, 12 or 22; (solve) tol not positive and finite, max_iter < 0; (gradient) a
#   free entry of u outside [0, 1] or NaN, or an item with G = +inf (a noisy-OR unit with
#   mean > 0 whose input is exactly 0: no gradient; G written).
#
# 3. Context-sensitive HMM, Saul & Jordan 1996 (module mfengine.hmm._chain).
# mf_hmm_fb_infer(T, n, startprob, transmat, logpot, gamma, xi_sum, logz): forward-backward
#   for the chain Q(s) ~ startprob[s_0] prod transmat[s_t, s_t+1] prod exp(logpot[t, s_t]),
#   as mfengine.hmm._chain.forward_backward.  Out: gamma (T, n) the marginals; xi_sum (n, n;
#   may be NULL) the summed pairwise marginals of neighbours; *logz the log normaliser (-inf
#   when every path has probability zero).  MF_EBADARG: T < 1; n < 1; a NULL pointer other
#   than xi_sum; startprob or a row of transmat not a probability vector (entries finite and
#   >= 0, sum within 1e-8 of 1); a logpot entry NaN or above 1e300 (-inf is allowed: a
#   forbidden state).  MF_EOVERFLOW (n > 2^20), MF_ENOMEM: nothing written.
# mf_hmm_structured_infer(n, D, lag, context, startprob, transmat, U, V, W, n_seq, lengths, X,
#   max_sweeps, tol, n_threads, gamma, logpot, bound, n_sweeps, converged) and
# mf_hmm_naive_infer(the same without logpot): structured / fully factorised mean field on
#   n_seq sequences, as ContextHMM.infer(method="structured" / "naive").  n states, D output
#   dimensions, lag >= 1, context 1 (right), 2 (left) or 3 (both); startprob (n,), transmat
#   (n, n) probability vectors as above; U, V, W (n, D) the own-state, right- and left-context
#   means (V read only with right context, W only with left; otherwise either may be NULL);
#   lengths (n_seq,); X (sum(lengths), D) the sequences concatenated, NaN a missing value
#   (marginalised).  The Python API first centres the model: it subtracts from U, V and W the
#   mean of each one's rows, and from each row x_t of X the sum of those means over the tables
#   whose term x_t's mean has (U always; V when t + lag, W when t - lag lies in the sequence).
#   Every residual x_t - m_t is unchanged, so the bound is one in any coordinates, but the
#   structured solver's starts depend on them: do the same to get its numbers, and to keep
#   data far from the origin accurate.
#   A sequence stops when a sweep raises its bound by at most tol * its length.  Out: gamma
#   (sum(lengths), n) the marginals of Q; logpot (sum(lengths), n) the chain's potentials
#   (structured only); bound (n_seq,) the bound on ln P(x) in nats (-inf: probability zero;
#   NaN: the arithmetic left the double range); n_sweeps; converged.  n_seq = 0 is a valid
#   call that writes nothing.  MF_EBADARG: n, D or lag < 1; context not in 1..3; a NULL model
#   pointer (V, W as above); startprob or a transmat row not a probability vector; a mean NaN,
#   infinite or above 1e100 in magnitude; n_seq < 0; max_sweeps < 0; tol NaN, negative or
#   infinite; with n_seq > 0: lengths, X or an output NULL, a length < 1, an entry of X
#   infinite.  MF_EOVERFLOW: n > 2^20, n * D > 2^40 or sum(lengths) * max(n, D) > 2^62, or
#   a scratch size; after MF_ENOMEM or MF_EOVERFLOW some sequences' outputs may be written.
# mf_hmm_structured_infer_starts(mf_hmm_structured_infer's arguments with `unsigned starts`
#   after n_threads): the structured solver from the starts in the mask starts, as
#   ContextHMM(starts=...): a nonzero combination of MF_HMM_START_LINK (1),
#   MF_HMM_START_NAIVE_LINK (2), MF_HMM_START_FIRST_ORDER (4) and MF_HMM_START_OWN_MEANS (8)
#   (in C: MFENGINE_HMM_START_*; mf_hmm_structured_infer is MF_HMM_ALL_STARTS, 15).  Several
#   are screened as by mf_hmm_structured_infer, one alone runs straight to tol; when the
#   naive-link start alone has no finite naive solution (zeros in the transitions), the link
#   start stands in for it; a sequence with no context coupling (length <= lag) runs its one
#   ascent whatever the mask.  MF_EBADARG also for a mask of 0 or with any other bit set.
# mf_hmm_infer_diag(method, starts, n, D, lag, context, startprob, transmat, U, V, W,
#   variances, n_seq, lengths, X, max_sweeps, tol, n_threads, gamma, logpot, bound, n_sweeps,
#   converged): either solver above with a diagonal output covariance, x_t ~ N(U[s_t] +
#   V[s_t+lag] + W[s_t-lag], diag(variances)) (equal variances: a spherical one).  method
#   MF_HMM_METHOD_STRUCTURED (0) or MF_HMM_METHOD_NAIVE (1) (in C: MFENGINE_HMM_METHOD_*);
#   starts the mask of mf_hmm_structured_infer_starts (read by the structured method only);
#   variances (D,) one per output dimension, shared by the states, or NULL for unit covariance
#   (then the numbers of mf_hmm_structured_infer_starts / mf_hmm_naive_infer, bit for bit);
#   logpot written by the structured method only (may be NULL for the naive one); the other
#   arguments and the outputs as above.  It whitens: with sigma_d = sqrt(variances[d]) the
#   unit-covariance solver runs on U, V, W and X divided column-wise by sigma (exact: N(x; m,
#   sigma^2) = N(x / sigma; m / sigma, 1) / sigma), so gamma and logpot are those of the
#   whitened problem and bound is its bound less the sum of ln sigma_d over the observed entries
#   (t, d) of each sequence.  The tables are copied once a call, each sequence's rows into a
#   scratch of its thread's.  MF_EBADARG also: a method other than 0 and 1; variances with an
#   entry NaN, infinite, zero or negative; a mean over sigma_d above 1e100 in magnitude; an
#   entry of X over sigma_d infinite.
#
# 4. Nonlinear Gaussian belief net, Frey & Hinton 1999 (module mfengine.nlgbn._estep).
# mf_nlgbn_infer(n_layers, sizes, types, weights, biases, variances, n_patterns, X, missing,
#   tol, max_sweeps, warm_start, n_threads, mu, logvar, bound, n_sweeps, converged): the
#   E-step, as NLGBN.infer: for every pattern, coordinate ascent on the bound F over each hidden
#   unit's mean and log-variance until a sweep gains less than tol nats or max_sweeps sweeps.
#   L, sizes, U and weights (NLGBN.weights_[l].ravel()) as in section 1; H = U - sizes[L-1]
#   hidden units, nv = sizes[L-1].  types (U,) signed char: 0 linear, 1 binary (step),
#   2 rectified, 3 sigmoidal (Phi), every visible unit 0; biases, variances (U,) (psi^2, not
#   its root); X (n_patterns, nv) the visible values; missing NULL or (n_patterns, nv) bytes,
#   nonzero = missing (X not read there; marginalised).  mu, logvar (n_patterns, H), layers
#   concatenated top first: out; with warm_start != 0 also the starting point (else the solve
#   starts at the prior means and log psi^2).  Out: bound (n_patterns,) F in nats (at most ln p
#   of the observed entries); n_sweeps; converged (unsigned char, 1 / 0).  MF_EBADARG:
#   n_layers < 2; sizes NULL or some sizes[l] < 1; types, weights, biases or variances NULL; a
#   type outside 0..3 or a visible unit not linear; a weight or bias NaN or infinite; a
#   variance NaN, infinite, below DBL_MIN or whose reciprocal overflows; a sum over children of
#   weight^2 / variance that overflows; n_patterns < 0; tol not positive and finite;
#   max_sweeps < 1; with n_patterns > 0: X, mu, logvar, bound, n_sweeps or converged NULL; an
#   observed entry of X NaN or infinite; with warm_start, a mu or logvar entry NaN or
#   infinite; a prior mean (cold start) that overflows.  MF_ENOMEM: outputs undefined.
#   MF_EOVERFLOW: a size computed from sizes would overflow (nothing written), or after the
#   solve some pattern's bound is not finite (NaN there, the rest written).
from mfengine.sbn._gaussian cimport (
    MF_OK, MF_NOT_CONVERGED, MF_EBADARG, MF_ENOMEM, MF_EOVERFLOW,
    mf_sbn_gaussian_infer, mf_sbn_gaussian_gradient,
)
from mfengine.sbn._sjj cimport mf_sjj_solve
from mfengine.sbn._plefka cimport mf_plefka_solve, mf_plefka_gradient
from mfengine.hmm._chain cimport (
    mf_hmm_fb_infer, mf_hmm_structured_infer, mf_hmm_structured_infer_starts, mf_hmm_naive_infer,
    mf_hmm_infer_diag, MF_HMM_START_LINK, MF_HMM_START_NAIVE_LINK, MF_HMM_START_FIRST_ORDER,
    MF_HMM_START_OWN_MEANS, MF_HMM_ALL_STARTS, MF_HMM_METHOD_STRUCTURED, MF_HMM_METHOD_NAIVE,
)
from mfengine.nlgbn._estep cimport mf_nlgbn_infer
