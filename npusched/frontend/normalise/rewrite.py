"""The one interface every rewrite of the normaliser has: find its sites, apply those asked for.

A rewrite finds its sites on the model as the rewrites before it left it (``find``), each site a ``Plan`` that
holds everything ``apply`` needs, checked when found, so applying cannot fail on a malformed file; a site the
rewrite cannot read is simply not found. ``apply`` rewrites the sites it is given, any subset of those found
(one alone, or all), in one pass over the operator list, so each site's edit is the same whichever others are
applied. Every rewrite keeps each tensor the original model computes bit for bit (tests/test_normalise.py checks
it with the TFLite reference interpreter).

A *priced* rewrite changes only what a schedule costs or needs in fast storage, not what the NPU can run: which of
its sites are applied is the recipe's choice (``GraphRecipe.skipped_sites``; ``npusched.app.graph_choice`` prices
the network with and without them). The others (folding, grouped convolutions) change what runs on the NPU at all
and apply wherever they are found. Any rewrite can be switched off by name (``GraphRecipe.disabled_rewrites``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from npusched.frontend.normalise.flatbuffer import ModelT, SubGraphT
from npusched.frontend.recipe import GraphRecipe


@dataclass(frozen=True, order=True)
class Site:
    """One place a rewrite applies: the rewrite and the tensor that names the place. The name is the tensor's in
    the original model, so a site keeps its identity whichever other sites are applied before it."""

    rewrite: str
    tensor: str

    @property
    def key(self) -> str:
        """``rewrite:tensor``, as the summary and the JSON name the site."""
        return f"{self.rewrite}:{self.tensor}"


class Plan(Protocol):
    """What ``find`` returns per site: the site, the position of the (first) operator it rewrites, how many
    operators it rewrites (the summary counts them), and the data its ``apply`` needs."""

    @property
    def site(self) -> Site: ...

    @property
    def position(self) -> int: ...

    @property
    def operators(self) -> int: ...


@dataclass(frozen=True)
class Rewrite:
    """A rewrite of the normaliser (see the module docstring)."""

    name: str
    priced: bool
    find: Callable[[ModelT, SubGraphT], Sequence[Any]]
    apply: Callable[[ModelT, SubGraphT, Sequence[Any]], None]
    # "2 element-wise passes re-laid out 16 or more deep" from (sites applied, operators they rewrote).
    describe: Callable[[int, int], str]
    # The rewrite as a recipe runs it (its parameters from the recipe), or None where the recipe does not run it.
    for_recipe: Callable[[Rewrite, GraphRecipe], Rewrite | None] | None = None

    def configured(self, recipe: GraphRecipe) -> Rewrite | None:
        """This rewrite as ``recipe`` runs it; None where it does not (switched off by name, or not for it)."""
        if not recipe.rewrite_enabled(self.name):
            return None
        return self if self.for_recipe is None else self.for_recipe(self, recipe)


def counted(count: int, noun: str, plural_suffix: str = "s") -> str:
    """E.g. "1 input", "3 inputs", "2 element-wise passes" (``plural_suffix`` "es")."""
    return f"{count} {noun}{plural_suffix * (count != 1)}"
