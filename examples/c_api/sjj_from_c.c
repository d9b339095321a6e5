/* Disease posteriors of a small noisy-OR diagnosis net, from C, through mfengine's strict-bound
 * solver (mfengine_sjj_solve).  No Python interpreter is started: the solver runs in plain C.
 *
 * Build and run (see the documentation's "C and Cython API" page):
 *     INC=$(python -c 'import mfengine; print(mfengine.get_include())')
 *     SO=$(python -c 'import mfengine.sbn._sjj as m; print(m.__file__)')
 *     LIBDIR=$(python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
 *     PYLIB=python$(python -c 'import sysconfig; print(sysconfig.get_config_var("LDVERSION"))')
 *     cc -O2 -I"$INC" sjj_from_c.c "$SO" -Wl,-rpath,"$(dirname "$SO")" \
 *        -L"$LIBDIR" -l"$PYLIB" -Wl,-rpath,"$LIBDIR" -lm -o sjj_from_c
 *     ./sjj_from_c
 *
 * The net: 3 diseases (units 0-2) and 4 findings (units 3-6).  A noisy-OR unit fires with
 * probability 1 - exp(-h_i - sum_j w_ij s_j); weights w = -log(1 - link), biases
 * h = -log(1 - prior) for a disease and -log(1 - leak) for a finding. */
#include <math.h>
#include <stdio.h>
#include "mfengine_solver.h"

int main(void) {
    enum { N_UNITS = 7, N_DISEASES = 3 };
    /* the parents of each unit in CSR form: par_ptr[i] .. par_ptr[i+1]-1 index par_idx */
    const ptrdiff_t par_ptr[N_UNITS + 1] = {0, 0, 0, 0, 2, 4, 6, 7};
    const ptrdiff_t par_idx[7] = {0, 2,  1, 2,  0, 1,  2};
    const double link[7] = {0.8, 0.3,  0.6, 0.5,  0.4, 0.4,  0.9};
    const double prior[N_DISEASES] = {0.02, 0.01, 0.005}, leak = 0.01;
    double weights[7], biases[N_UNITS];
    for (int e = 0; e < 7; e++) weights[e] = -log1p(-link[e]);
    for (int j = 0; j < N_DISEASES; j++) biases[j] = -log1p(-prior[j]);
    for (int i = N_DISEASES; i < N_UNITS; i++) biases[i] = -log1p(-leak);

    /* one case: findings 3 and 6 present, 4 absent, 5 not recorded (NaN: a free unit,
     * which the solver sums out since it has no clamped descendant); diseases free */
    const double clamp[N_UNITS] = {NAN, NAN, NAN, 1.0, 0.0, NAN, 1.0};
    double bound, mu[N_UNITS], xi[7];   /* noisy-OR: one q per edge */
    ptrdiff_t sweeps;
    signed char converged;
    int status = mfengine_sjj_solve(N_UNITS, 7, par_ptr, par_idx, weights, biases,
                                    1 /* noisy-OR */, 1 /* items */, clamp, NULL, NULL,
                                    1e-9, 0.0, 200, 1, &bound, mu, xi, &sweeps, &converged);
    if (status != MF_OK) {
        fprintf(stderr, "mfengine_sjj_solve: status %d\n", status);
        return 1;
    }
    printf("lower bound on ln P(findings) = %.6f (%td sweeps)\n", bound, sweeps);
    for (int j = 0; j < N_DISEASES; j++)
        printf("P(disease %d | findings) ~ %.4f\n", j, mu[j]);
    return 0;
}
