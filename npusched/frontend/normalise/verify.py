"""Is a rewrite exact? Both models run once by the TFLite reference interpreter on the same seeded random inputs,
every tensor they share (by name) compared bit for bit: what ``normalise(..., verify=True)`` checks after each
rewrite (as LLVM's -verify-each), and what the tests hold every rewrite to.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def tensor_values(data: bytes, seed: int) -> dict[str, np.ndarray]:
    """Every tensor's value after one inference of ``data`` on seeded random inputs, by name (names used once
    only). Raises whatever the interpreter raises on a model it cannot run."""
    from ai_edge_litert import interpreter  # the reference kernels load slowly: only when asked

    it = interpreter.Interpreter(model_content=data,
                                 experimental_op_resolver_type=interpreter.OpResolverType.BUILTIN_REF,
                                 experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    rng = np.random.default_rng(seed)
    for detail in it.get_input_details():
        dtype = np.dtype(detail["dtype"])
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            value = rng.integers(info.min, info.max, size=detail["shape"], endpoint=True).astype(dtype)
        else:
            value = rng.standard_normal(detail["shape"]).astype(dtype)
        it.set_tensor(detail["index"], value)
    it.invoke()
    values: dict[str, list[np.ndarray]] = {}
    for detail in it.get_tensor_details():
        try:
            values.setdefault(detail["name"], []).append(np.array(it.get_tensor(detail["index"])))
        except ValueError:  # a tensor without data (freed or never allocated)
            continue
    return {name: found[0] for name, found in values.items() if len(found) == 1}


def first_difference(original: bytes, rewritten: bytes, seeds: Iterable[int] = (0,)) -> tuple[str | None, int]:
    """The first tensor the two models share whose value differs (None: none), and how many shared tensors were
    compared on the last seed."""
    shared: list[str] = []
    for seed in seeds:
        before, after = tensor_values(original, seed), tensor_values(rewritten, seed)
        shared = sorted(set(before) & set(after))
        for name in shared:
            a, b = before[name], after[name]
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                return f"{name} (seed {seed})", len(shared)
    return None, len(shared)
