"""The graphs a CP-SAT run prices against each other: npusched's own and the one Vela legacy reads.

The priced rewrites of ``npusched.frontend.normalise`` (re-laid-out channel-poor chains, staged inputs and
outputs, widened outputs, gate order, softmax bands) and the lowering's in-place concatenation writes and softmax
deep views (``lower_model``) change only what a schedule costs or needs in fast storage, and each can lose: a
staged 320 x 320 x 3 input costs its copy more than the bursts it saves; a re-laid-out rescaling is a map no
convolution cascades from, which a Size schedule needs. What a rewrite is worth depends on what CP-SAT makes of it
(the heuristic, Vela legacy's rules, mostly cannot use it: on mobilenet_v2 it prices a staged input 5-9% worse
where CP-SAT gains 0.5-23%), so the run searches both graphs, each with part of the time limit, and keeps the
better schedule (``npusched.app.cpsat_run``): npusched's graph, every site applied, and Vela's graph, the
unconditional rewrites only (folding, grouped convolutions), which is also the graph of both Vela cores' own
schedules (``npusched.app.floors``). The sites of a network are priced together (kept or left out as one); the
decision is recorded per site. Each graph is a recipe's (``GraphRecipe``): Vela's is npusched's with every site
left out and no in-place write; the schedule document stores the recipe of the one a run chose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from npusched.frontend.normalise import Site
from npusched.frontend.recipe import GraphRecipe
from npusched.lowering.build import BuiltGraph
from npusched.lowering.in_place import IN_PLACE_OF
from npusched.lowering.softmax import DEEP_VIEW
from npusched.run import SiteDecision

# The pseudo-sites that stand for the lowering's in-place concatenation writes and its softmax deep views.
IN_PLACE_WRITES = Site("in_place_writes", "*")
SOFTMAX_DEEP_VIEWS = Site("softmax_deep_views", "*")


def graph_sites(graph: BuiltGraph) -> tuple[Site, ...]:
    """The priced sites ``graph`` has (the lowering's pseudo-sites included)."""
    applied = graph.normalisation.applied if graph.normalisation is not None else ()
    writes_in_place = any(op.attr(IN_PLACE_OF) for op in graph.network.npu_ops)
    has_deep_views = any(op.attr(DEEP_VIEW) for op in graph.network.npu_ops)
    return applied + ((IN_PLACE_WRITES,) if writes_in_place else ()) + \
        ((SOFTMAX_DEEP_VIEWS,) if has_deep_views else ())


class Graphs:
    """The graphs of one model a run may schedule, built on demand by ``build`` and kept (each is built once):
    npusched's own, of the run's ``recipe``, and Vela's."""

    def __init__(self, build: Callable[[GraphRecipe], BuiltGraph], recipe: GraphRecipe) -> None:
        self._build = build
        self._built: dict[GraphRecipe, BuiltGraph] = {}
        self.own = self.variant(recipe)
        # Every priced site npusched's graph has (with the in-place writes, when it has any).
        self.sites: tuple[Site, ...] = graph_sites(self.own)

    @property
    def vela(self) -> BuiltGraph:
        """Vela's graph (built when first asked for): every site left out, no in-place write. Where npusched's has no
        site it is Vela's (the recipe's in-place writes found none): not lowered twice."""
        if not self.sites:
            return self.own
        recipe = self.own.recipe.without(site.key for site in self.sites)
        return self.variant(replace(recipe, in_place_writes=False))

    def variant(self, recipe: GraphRecipe) -> BuiltGraph:
        if recipe not in self._built:
            self._built[recipe] = self._build(recipe)
        return self._built[recipe]

    @property
    def distinct(self) -> bool:
        """Whether npusched's graph differs from Vela's (else one search covers both)."""
        return bool(self.sites)


def decisions(sites: Sequence[Site], chosen: BuiltGraph, why_kept: str, why_out: str) -> tuple[SiteDecision, ...]:
    """Every site, applied or not in ``chosen``, with the reason the run gives for each side."""
    skipped = chosen.recipe.skipped_sites
    return tuple(SiteDecision(site, site.key not in skipped, why_out if site.key in skipped else why_kept)
                 for site in sites)
