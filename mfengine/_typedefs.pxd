# Fixed-width types used by every kernel.
from libc.stdint cimport uint8_t, int8_t, int32_t, int64_t
ctypedef double float64_t
ctypedef Py_ssize_t intp_t
