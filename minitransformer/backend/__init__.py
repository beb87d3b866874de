"""Which array library does the math: NumPy on the CPU, CuPy on a GPU.

This package is the only place that imports numpy or cupy by name for
the math on arrays of a device. Everything else asks for the *namespace* of its input arrays
(``namespace(x)``) and calls the array-API functions on it (``xp.exp``, ``xp.matmul``, ...),
so the same model code runs on every backend. (Host-side bookkeeping on NumPy arrays, such
as gradcheck's finite differences, uses NumPy itself.)

- ``devices.py``  device names ("cpu", "cuda:N", "strict:NAME"), ``device_of``, importing
  CuPy / array-api-strict on first use, ``cuda_available``, ``synchronize``.
- ``namespaces.py`` the array namespace of each library (``xp``); the fast tier hears of
  CuPy's first use here and may hand back a leaner namespace for it.
- ``arrays.py``   dtype helpers, creation and moves (``asarray``, ``to_numpy``,
  ``to_device``), the dtype/data checks of ``mt.tensor``, ``scatter_add``.
- ``random.py``   ``Generator`` (seeded, counter-based dropout draws on the device),
  ``manual_seed``, ``default_generator``.
- ``special.py``  ``erf`` (for GELU): CuPy's own on a GPU, FDLIBM's in array-API calls
  elsewhere.
- ``host.py``     the machine NumPy runs on: one reader per fact (CPU, BLAS and its threads)
  and process-wide tuning (``tune_host``, which only the CLI calls); ``matmul`` and
  ``tensordot``, NumPy's products with the per-product thread policy, which
  ``namespaces.py`` serves as NumPy's ``xp.matmul`` and ``xp.tensordot``.

Beyond the standard, the library needs four things the array API does not have; they live
here: a random generator that lives on the device, scatter-add (for the embedding
gradient), conversion to NumPy, and the error function erf (for GELU). Machine facts and
process tuning (BLAS threads, malloc) are in ``host.py``, which imports nothing of the
package; this file does not import it (``namespaces.py`` does), and tuning is never done on
import.
"""

from .arrays import (
    DTYPES,
    all_finite,
    asarray,
    check_dtype,
    dtype_name,
    host_array_with_default_dtype,
    host_numbers,
    is_float_dtype,
    move,
    numeric_data,
    resolve_dtype,
    scatter_add,
    to_device,
    to_numpy,
)
from .devices import (
    cuda_available,
    device_of,
    device_of_array_device,
    get_default_device,
    library_of,
    make_current,
    native_device,
    normalize_device,
    set_default_device,
    synchronize,
)
from .namespaces import (
    Array,
    common_namespace,
    is_array,
    namespace,
    namespace_for_device,
    on_first_use,
    reset_cupy_namespace,
)
from .random import Generator, counter_bits, counter_uniform, default_generator, manual_seed
from .special import erf

__all__ = [
    "DTYPES",
    "Array",
    "Generator",
    "asarray",
    "check_dtype",
    "common_namespace",
    "counter_bits",
    "counter_uniform",
    "reset_cupy_namespace",
    "cuda_available",
    "default_generator",
    "device_of",
    "device_of_array_device",
    "dtype_name",
    "is_float_dtype",
    "erf",
    "get_default_device",
    "host_array_with_default_dtype",
    "host_numbers",
    "is_array",
    "library_of",
    "make_current",
    "move",
    "manual_seed",
    "namespace",
    "on_first_use",
    "namespace_for_device",
    "numeric_data",
    "native_device",
    "normalize_device",
    "resolve_dtype",
    "all_finite",
    "scatter_add",
    "set_default_device",
    "synchronize",
    "to_device",
    "to_numpy",
]
