"""The exercise checks see habits, not only values (issue 46, item 2), for every check with a
reference solution (the CASES of tests/test_lesson_exercises.py):

- inputs unchanged: the solution made to write into one of its arguments after computing
  the right result (one element of an array changed, or of a list or dict; for a
  ``Function`` class in forward or in backward, ``grad`` included) fails with the hint of
  ``_exercise``'s guard (lessons/checks/_inputs.py), for every argument that holds an array,
  a list or a dict. The checks whose answer takes none are listed by name in ``NO_ARRAYS``
  with the reason, so a new check is not skipped silently; the exemptions of
  ``_exercise(name, writes=...)`` are listed in ``WRITES``;
- library calls watched: where the exercise's text in its notebook says "in NumPy", "NumPy
  only", "by hand", "yourself" or the like, the solution plus one call into the library
  (``mt.functional.relu``) fails with the library-call hint (``_without_library``);
- analytic derivatives: where the exercise asks for a derivative (01.2, 04.1, 04.3, 21.1), an
  answer by central differences in float64, at every step h of a grid that holds the best
  one, fails with a hint naming the analytic derivative, and the solution passes.
"""

from __future__ import annotations

import functools
import json
import re
import types

import numpy as np
import pytest
from lesson_notebooks import LESSONS, central_difference, checks
from test_lesson_exercises import CASES, solutions

import minitransformer as mt
from minitransformer.function import Function

# checks whose answer never receives an array, a list or a dict (so nothing it could write
# into), with the reason
NO_ARRAYS = {
    "01_1": "the answer is a class (Value) whose methods take Values, not arrays",
    "01_3": "best_eps_float32() takes no argument",
    "03_2": "best_margin(eps, V) takes numbers",
    "04_2": "max_gain(eps) takes a number",
    "05_3": "local_causal_mask(T, w) takes whole numbers",
    "06_1": "a parameter count from whole numbers",
    "07_1": "takes whole numbers",
    "09_1": "decay_step(frac, d_model, warmup) takes numbers",
    "09_2": "takes a number",
    "11_1": "takes sizes and rates (numbers)",
    "11_2": "takes sizes (whole numbers)",
    "12_1": "takes two whole numbers",
    "12_2": "takes two whole numbers",
    "13_1": "dropout_variance(x, p) takes numbers",
    "13_3": "my_variant() takes no argument",
    "14_3": "takes numbers",
    "16_1": "halves_table(max_len, d_model) takes whole numbers",
    "17_3": "takes whole numbers",
    "19_2": "takes a loss function (the check's) and numbers",
    "20_1": "takes whole numbers and a flag",
    "20_3": "takes numbers",
    "21_3": "takes whole numbers",
}
WRITES = {"14_2": (0,)}  # the answer fills the ranks' buffers in place: what it is asked to do
# checks of lessons this file's author does not own that lack a library guard (issue 46 #2)
MISSING_LIBRARY_GUARD: dict[str, str] = {}


def _spoil(value, depth: int = 0) -> bool:
    """Change ``value`` in place where it can be changed: one element of a NumPy array (a
    Tensor's data), else one item of a list or dict, looking inside containers first;
    whether something changed."""
    if isinstance(value, mt.Tensor):
        value = value.data
    if isinstance(value, np.ndarray):
        if not (value.size and value.flags.writeable and value.dtype.kind in "biuf"):
            return False
        v = value.flat[0]
        value.flat[0] = (not v) if value.dtype.kind == "b" else (0 if v != 0 else 1)
        return True
    if depth > 6 or not isinstance(value, list | tuple | dict):
        return False
    keys = list(value) if isinstance(value, dict) else range(len(value))
    if any(_spoil(value[k], depth + 1) for k in keys):
        return True
    if isinstance(value, tuple):
        return False
    if keys:  # an item that cannot be changed in place (a number, a string): replaced
        k = next(iter(keys))
        value[k] = 0 if value[k] != 0 else 1
    elif isinstance(value, list):
        value.append(0)
    else:
        value["a key the answer added"] = 0
    return True


def _has_target(value, depth: int = 0) -> bool:
    """Whether ``value`` holds something ``_spoil`` can change (an array, a list, a dict)."""
    if isinstance(value, mt.Tensor | np.ndarray | list | dict):
        return True
    return isinstance(value, tuple) and depth < 6 and any(_has_target(v, depth + 1) for v in value)


def _instrumented(answer, after):
    """``answer`` that calls ``after(where, key, value)`` on each argument once it has
    computed its result (where: "call", or "forward"/"backward" of a Function class)."""

    def visit(where, args, kwargs, skip=0):
        for i, a in enumerate(args):
            if i >= skip:
                after(where, i, a)
        for k, v in kwargs.items():
            after(where, k, v)

    if isinstance(answer, type) and issubclass(answer, Function):

        class Instrumented(answer):
            @staticmethod
            def forward(ctx, *args, **kwargs):
                out = answer.forward(ctx, *args, **kwargs)
                visit("forward", (ctx, *args), kwargs, skip=1)
                return out

            @staticmethod
            def backward(ctx, *args, **kwargs):
                out = answer.backward(ctx, *args, **kwargs)
                visit("backward", (ctx, *args), kwargs, skip=1)
                return out

        Instrumented.__name__ = Instrumented.__qualname__ = answer.__name__
        return Instrumented

    @functools.wraps(answer)
    def call(*args, **kwargs):
        out = answer(*args, **kwargs)
        visit("call", args, kwargs)
        return out

    return call


def _watchable(answer) -> bool:
    plain = (types.FunctionType, types.MethodType, functools.partial)
    return isinstance(answer, plain) or (isinstance(answer, type) and issubclass(answer, Function))


def _array_arguments(name: str) -> set:
    """The (where, key) of every argument that held an array in some call of the check's
    calls into the solution (the solution must pass)."""
    check, solution, _, _ = CASES[name]
    answer, seen = solution(), set()
    if not _watchable(answer):
        return seen

    def record(where, key, value):
        if _has_target(value):
            seen.add((where, key))

    assert check(_instrumented(answer, record)) == checks.CORRECT
    return seen


def test_the_tables_name_real_checks():
    assert set(NO_ARRAYS) <= set(CASES) and set(WRITES) <= set(CASES)
    for name, writes in WRITES.items():
        assert getattr(CASES[name][0], "writes", None) == writes, name
    others = {n for n in CASES if n not in WRITES and getattr(CASES[n][0], "writes", ())}
    assert not others, (
        f"checks that let the answer write into an argument: list in WRITES: {others}"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_answer_that_writes_into_its_input_fails(name, capsys):
    found = _array_arguments(name)
    if name in NO_ARRAYS:
        assert not found, f"check_{name} passes arrays ({found}): take it out of NO_ARRAYS"
        pytest.skip(f"check_{name}: {NO_ARRAYS[name]}")
    watched = sorted((w, k) for w, k in found if not (w == "call" and k in WRITES.get(name, ())))
    if name in WRITES:
        assert found and not watched, f"check_{name}: {found} beside the exempt arguments"
        pytest.skip(f"check_{name}: its array argument {WRITES[name]} is to be written into")
    assert watched, f"check_{name} passes its answer no array: add it to NO_ARRAYS, with why"
    check, solution, _, _ = CASES[name]
    for where, key in watched:

        def spoil(w, k, value, target=(where, key)):
            if (w, k) == target:
                _spoil(value)

        with pytest.raises(AssertionError) as info:
            check(_instrumented(solution(), spoil))
        message = str(info.value)
        assert "changed its input" in message and "in place" in message, (where, key, message)
        assert "copy" in message and "x *= 2" in message, message


# ------------------------------------------------------------------ library calls watched
SAYS = re.compile(
    r"\b(?:in NumPy|NumPy only|only NumPy|plain NumPy|use NumPy|with NumPy|by hand|yourself|"
    r"your own code|into the library|without the library|write yours without)\b",
    re.I,
)
CALL = re.compile(r"check_\d\d_\d\(")


def exercise_text(name: str) -> str:
    """The text of exercise ``name`` ("NN_K") in its notebook: the lesson's "## Exercises"
    preface, and the cells from where the exercise starts ("Exercise K", "**K.") to its check
    call, markdown and code."""
    nn, k = name.split("_")
    notebook = next(LESSONS.glob(f"{nn}_*.ipynb"))
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"]]
    code = [c["cell_type"] == "code" for c in nb["cells"]]
    at = max(i for i, s in enumerate(cells) if code[i] and f"check_{name}(" in s)
    before = max([i for i in range(at) if code[i] and CALL.search(cells[i])], default=-1)
    text = "\n".join(cells[before + 1 : at])
    marks = list(re.finditer(rf"\*\*{k}\.|\bExercise {k}\b|^## Exercises", text, re.M))
    if marks:
        text = text[marks[-1].start() :]
    elif before < 0:  # no heading: the cells just above the check
        text = "\n".join(cells[max(at - 2, 0) : at])
    whole = "\n".join(cells)
    preface = re.search(
        r"^## Exercises\n(.*?)(?=\*\*(?:Exercise )?1\b|^###|\Z)", whole, re.M | re.S
    )
    return (preface.group(1) if preface else "") + "\n" + text


def _asks_for_own_code(name: str) -> bool:
    return bool(SAYS.search(exercise_text(name)))


OWN_CODE = [n for n in sorted(CASES) if _asks_for_own_code(n)]


def _calling_the_library(where, key, value):
    mt.functional.relu(mt.tensor(np.ones(3)))


def _with_a_library_call(answer):
    """``answer`` that calls ``mt.functional.relu`` first (in forward and backward for a
    Function class)."""
    if isinstance(answer, type) and issubclass(answer, Function):

        class Calling(answer):
            @staticmethod
            def forward(ctx, *args, **kwargs):
                _calling_the_library(0, 0, 0)
                return answer.forward(ctx, *args, **kwargs)

            @staticmethod
            def backward(ctx, *args, **kwargs):
                _calling_the_library(0, 0, 0)
                return answer.backward(ctx, *args, **kwargs)

        Calling.__name__ = Calling.__qualname__ = answer.__name__
        return Calling

    @functools.wraps(answer)
    def call(*args, **kwargs):
        _calling_the_library(0, 0, 0)
        return answer(*args, **kwargs)

    return call


def test_the_exercise_text_is_found():
    assert "Sigmoid" in exercise_text("01_2") and "RMSNorm" in exercise_text("04_1")
    assert {"21_1", "21_2", "04_3", "01_2"} <= set(OWN_CODE)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=MISSING_LIBRARY_GUARD[n]))
        if n in MISSING_LIBRARY_GUARD
        else n
        for n in OWN_CODE
    ],
)
def test_a_library_call_fails_where_the_exercise_asks_for_own_code(name, capsys):
    check, solution, _, _ = CASES[name]
    with pytest.raises(AssertionError, match="calls the library"):
        check(_with_a_library_call(solution()))


# ------------------------------------------------------------------ analytic derivatives
def _central(f, arrays: list[np.ndarray], h: float) -> list[np.ndarray]:
    """The gradient of the number ``f(*arrays)`` with respect to each array, by central
    differences of step ``h`` in float64 (the others held fixed)."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    grads = []
    for k, a in enumerate(arrays):

        def f_of_one(x, k=k):
            return f(*arrays[:k], x, *arrays[k + 1 :])

        grads.append(central_difference(f_of_one, a, h))
    return grads


def _sigmoid_by_differences(h):
    s1 = solutions(1)

    class Sigmoid(s1.Sigmoid):
        @staticmethod
        def forward(ctx, x):
            y = s1.Sigmoid.forward(ctx, x)
            ctx.save_for_backward(x)
            return y

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved
            return grad * (1 / (1 + np.exp(-(x + h))) - 1 / (1 + np.exp(-(x - h)))) / (2 * h)

    return Sigmoid


def _rms(x, gamma, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma


def _rmsnorm_by_differences(h):
    s4 = solutions(4)

    class RMSNorm(s4.RMSNorm):
        @staticmethod
        def forward(ctx, x, gamma, eps=1e-6):
            y = s4.RMSNorm.forward(ctx, x, gamma, eps)
            ctx.save_for_backward(x, gamma, eps)
            return y

        @staticmethod
        def backward(ctx, grad):
            x, gamma, eps = ctx.saved
            dx, dgamma = _central(lambda a, b: (grad * _rms(a, b, eps)).sum(), [x, gamma], h)
            return dx, dgamma

    return RMSNorm


def _add_norm_by_differences(h):
    def layer_norm(z, eps=1e-5):
        zc = z - z.mean(-1, keepdims=True)
        return zc / np.sqrt((zc * zc).mean(-1, keepdims=True) + eps)

    def add_norm_backward(x, W, g, eps=1e-5):
        dx, dW = _central(lambda a, b: (g * layer_norm(a + a @ b, eps)).sum(), [x, W], h)
        return dx, dW

    return add_norm_backward


def _rms_norm_backward_by_differences(h):
    def rms_norm_backward(x, gamma, grad, eps):
        dx, dgamma = _central(lambda a, b: (grad * _rms(a, b, eps)).sum(), [x, gamma], h)
        return dx, dgamma

    return rms_norm_backward


BY_DIFFERENCES = {
    "01_2": _sigmoid_by_differences,
    "04_1": _rmsnorm_by_differences,
    "04_3": _add_norm_by_differences,
    "21_1": _rms_norm_backward_by_differences,
}
# lessons with no exercise that asks for a derivative: 15 (merging softmax states, a block's
# probabilities) and 20 (a band mask, causal linear attention, a crossover length)
STEPS = np.logspace(-10, -3, 15)  # the best central step lies inside (about 1e-5 x the scale)


@pytest.mark.parametrize("name", sorted(BY_DIFFERENCES))
def test_a_numerical_derivative_is_refused(name, capsys):
    check, solution, _, _ = CASES[name]
    assert check(solution()) == checks.CORRECT
    hints = []
    for h in STEPS:
        with pytest.raises(AssertionError) as info:
            check(BY_DIFFERENCES[name](h))
        hints.append(str(info.value))
    told = [h for h, hint in zip(STEPS, hints, strict=True) if "analytic" in hint]
    # no step passes, and the good ones (the middle of the grid) are told why
    assert len(told) >= 5, f"few steps h got a hint naming the analytic derivative: {hints}"
