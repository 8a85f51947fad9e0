"""The one way a graph is made: a model's bytes, the hardware and a ``GraphRecipe`` -> the lowered network.

Read, validate, normalise as the recipe says (``npusched.frontend.normalise``), validate again, lower
(``lower_model``). Every run, floor, replay and compile builds its graphs here, so two graphs of one recipe are
one graph, whatever the cost model, objective or solver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from npusched.frontend.normalise import Normalisation, RewriteRecord, normalise
from npusched.frontend.recipe import GraphRecipe
from npusched.frontend.tflite_reader import TfliteModel, parse_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import Network, lower_model
from npusched.lowering.in_place import IN_PLACE_OF
from npusched.lowering.softmax import DEEP_VIEW
from npusched.target.arch import ArchitectureFeatures


@dataclass(frozen=True)
class BuiltGraph:
    """One graph of a model: the recipe it was made by, the model's bytes as scheduled (normalised), what
    normalisation did (None: not normalised), the lowered network and what each step took."""

    recipe: GraphRecipe
    model_bytes: bytes = field(repr=False)
    normalisation: Normalisation | None
    network: Network
    timings_seconds: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def rewrites(self) -> tuple[RewriteRecord, ...]:
        """A record per rewrite: the normaliser's (none where the recipe does not normalise), then the lowering's
        in-place concatenation writes and softmax deep views (the passes that have them)."""
        normalised = self.normalisation.rewrites if self.normalisation is not None else ()
        lowered = tuple(RewriteRecord(name, priced=True, found=count, applied=count, operators=count,
                                      disabled=not self.recipe.rewrite_enabled(name))
                        for name, count in (("in_place_writes", self._passes_with(IN_PLACE_OF)),
                                            ("softmax_deep_views", self._passes_with(DEEP_VIEW))))
        return normalised + lowered

    def _passes_with(self, attribute: str) -> int:
        return sum(1 for op in self.network.npu_ops if op.attr(attribute))


def read_model(data: bytes, source: str) -> TfliteModel:
    """The model parsed and validated (a ``ModelError`` names what is wrong)."""
    model = parse_tflite(data, source)
    validate_model(model)
    return model


def normalised_bytes(data: bytes, source: str, recipe: GraphRecipe, *, verify: bool = False
                     ) -> tuple[bytes, Normalisation | None]:
    """The model's bytes as ``recipe`` normalises them (``data`` itself and None where it does not normalise)."""
    if not recipe.normalise:
        return data, None
    return normalise(data, recipe, source, verify=verify)


def build_graph(data: bytes, source: str, arch: ArchitectureFeatures, recipe: GraphRecipe, *,
                verify_rewrites: bool = False, parsed: TfliteModel | None = None) -> BuiltGraph:
    """The graph ``recipe`` makes of the model ``data`` (named ``source`` in errors) for the hardware ``arch``
    (``parsed``: ``data`` already read by ``read_model``). With ``verify_rewrites`` every normalisation rewrite is
    checked against the TFLite reference interpreter."""
    timings: dict[str, float] = {}
    start = time.monotonic()
    # The user's file is judged first, so its errors are named as the file has them.
    model = parsed if parsed is not None else read_model(data, source)
    if parsed is None:
        timings["read"] = time.monotonic() - start
    start = time.monotonic()
    model_bytes, record = normalised_bytes(data, source, recipe, verify=verify_rewrites)
    if model_bytes is not data:
        model = read_model(model_bytes, source)
    timings["normalise"] = time.monotonic() - start
    start = time.monotonic()
    network = lower_model(model, arch, recipe)
    timings["lower"] = time.monotonic() - start
    return BuiltGraph(recipe, model_bytes, record, network, timings)
