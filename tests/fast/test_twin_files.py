"""Each twin is one path away from its reference: a twin of ``ops/layernorm.py`` lives in
``fast/<library>/layernorm.py`` (the Linear layer's, of ``ops/matmul.py``, in ``linear.py``),
its module docstring names the reference's file, and the reference's docstring names it on
its one "Twins:" line."""

from __future__ import annotations

import importlib
import sys

import pytest

from minitransformer.fast import cupy as cupy_twins
from minitransformer.fast import numpy as numpy_twins

FILE_OF = {"matmul": "linear"}  # the reference's module -> the twin's file, where they differ


def _pairs():
    for library, table in (("numpy", numpy_twins.TWINS), ("cupy", cupy_twins.TWINS)):
        for ref, twin in table.items():
            name = f"{library}-{twin.__module__}.{twin.__name__}"
            yield pytest.param(library, ref, twin, id=name)


@pytest.mark.parametrize("library, ref, twin", list(_pairs()))
def test_a_twin_and_its_reference_name_each_other(library, ref, twin):
    package, name = twin.__module__.rsplit(".", 1)
    ref_package, ref_name = ref.__module__.rsplit(".", 1)
    assert package == f"minitransformer.fast.{library}"
    assert name == FILE_OF.get(ref_name, ref_name), (twin, ref)
    ref_file = f"{ref_package.rsplit('.', 1)[1]}/{ref_name}.py"  # ops/layernorm.py
    twin_doc = sys.modules[twin.__module__].__doc__
    assert ref_file in twin_doc, f"{twin.__module__}'s docstring does not name {ref_file}"
    ref_doc = importlib.import_module(ref.__module__).__doc__
    lines = [line for line in ref_doc.splitlines() if line.startswith("Twins:")]
    assert len(lines) == 1, f"{ref_file}: one 'Twins:' line, found {len(lines)}"
    assert f"fast/{library}/{name}.py" in lines[0], (ref_file, lines[0])
