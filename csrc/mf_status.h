/* The status codes every mfengine kernel returns (C entry points, Cython kernels, the public
 * solver API).  One enum for all families: a kernel returns one of these, never prints, and
 * writes nothing on MF_EBADARG. */
#ifndef MF_STATUS_H
#define MF_STATUS_H

enum {
    MF_OK = 0,              /* success */
    MF_NOT_CONVERGED = 1,   /* results written; some item reached its iteration budget */
    MF_EBADARG = -1,        /* a bad argument (size, pointer, value); nothing written */
    MF_ENOMEM = -2,         /* a scratch allocation failed */
    MF_EOVERFLOW = -3       /* a size or offset would overflow ptrdiff_t, or a result the double range */
};

#endif
