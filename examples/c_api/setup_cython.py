"""Build gaussian_from_cython.pyx against the installed mfengine:

    python setup_cython.py build_ext --inplace
"""
import os

import mfengine
from Cython.Build import cythonize
from setuptools import Extension, setup

# Cython finds mfengine/solver.pxd on the include path (the directory that holds the
# installed package); the C compiler finds mf_status.h in mfengine.get_include().
site = os.path.dirname(os.path.dirname(mfengine.__file__))
setup(name="gaussian_from_cython",
      ext_modules=cythonize([Extension("gaussian_from_cython", ["gaussian_from_cython.pyx"],
                                       include_dirs=[mfengine.get_include()])],
                            include_path=[site]))
