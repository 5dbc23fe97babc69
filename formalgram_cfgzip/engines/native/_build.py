"""How to build the native engine's C kernel (for ``setup.py``; imports nothing of the package).

``setup.py`` should load this file by its path -- importing ``formalgram_cfgzip`` during the
build would import numpy and the rest of the package first -- and add the result of
:func:`native_extensions` to its extension modules, next to the mask-expansion kernel and only
in the compiled build (``FORMALGRAM_NO_MYPYC`` unset), e.g.::

    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "native_build", "formalgram_cfgzip/engines/native/_build.py"
    )
    native_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native_build)
    extensions += native_build.native_extensions()

The pure-Python build leaves it out; the engine then runs its Python kernel
(:class:`formalgram_cfgzip.engines.native.gss.PyState`), with identical masks.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

SOURCE = "formalgram_cfgzip/engines/native/_cnative.c"
MODULE = "formalgram_cfgzip.engines.native._cnative"
HEADER = "formalgram_cfgzip/_cgrow.h"  # included by the source (growable arrays)
API_HEADER = "formalgram_cfgzip/_cexpand_api.h"  # included by the source (the expansion kernel's C entry)


def native_extensions(extra_compile_args: list[str] | None = None) -> list[Any]:
    """The native engine's C extension (plain C99 and the CPython API only).

    Parameters
    ----------
    extra_compile_args : list of str or None
        Compiler flags; ``None`` gives ``-O3`` (nothing on MSVC).

    Returns
    -------
    list of setuptools.Extension
        One extension, ``formalgram_cfgzip.engines.native._cnative``.

    Examples
    --------
    >>> [e.name for e in native_extensions()]
    ['formalgram_cfgzip.engines.native._cnative']
    """
    if extra_compile_args is None:
        extra_compile_args = [] if sys.platform == "win32" else ["-O3"]
    extension = importlib.import_module("setuptools").Extension  # setuptools: a build-time dependency only
    return [
        extension(MODULE, [SOURCE], depends=[HEADER, API_HEADER], extra_compile_args=list(extra_compile_args))
    ]
