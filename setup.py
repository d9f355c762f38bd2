"""Builds the Cython extensions in mcts_ext/ (everything else lives in pyproject.toml).

Cython's safety checks are off for speed; set ALPHAZERO_CYTHON_DEBUG=1 before
installing to turn bounds, wraparound and initialisation checks back on (and
build without optimisation) when chasing a crash (CI's .ci/checked-build runs
the core's tests so). None checks stay off: the nogil loops read their own
object's fields, which a None check would need the GIL for.
"""

import os
import platform
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("ALPHAZERO_CYTHON_DEBUG", "") not in ("", "0")

directives = {
    "language_level": "3",
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": not DEBUG,
    "nonecheck": False,
    # Annotations document Python types; C types are declared the C way.
    "annotation_typing": False,
}

compile_args = ["-O0", "-g"] if DEBUG else ["-O3"]
if not DEBUG and platform.machine() in ("x86_64", "AMD64"):
    # Hardware popcount and count-trailing-zeros: every x86-64 CPU since 2009.
    compile_args.append(os.environ.get("ALPHAZERO_MARCH", "-march=x86-64-v2"))

extensions = [
    Extension(
        f"mcts_ext.{path.stem}",
        [str(path)],
        extra_compile_args=compile_args,
    )
    for path in sorted(Path("mcts_ext").glob("*.pyx"))
]

setup(ext_modules=cythonize(extensions, compiler_directives=directives))
