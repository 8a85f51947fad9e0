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
decision is recorded per site. ``Graphs.variant`` builds any graph between the two (``--schedule`` rebuilds the
one a run chose).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from npusched.frontend.normalise import SOFTMAX_SPLIT_BYTES, Normalisation, Site, normalise
from npusched.frontend.tflite_reader import parse_tflite
from npusched.frontend.validate import validate_model
from npusched.lowering.graph import Network, lower_model
from npusched.lowering.in_place import IN_PLACE_OF
from npusched.lowering.softmax import DEEP_VIEW
from npusched.run import SiteDecision
from npusched.target.arch import ArchitectureFeatures

# The pseudo-sites that stand for the lowering's in-place concatenation writes and its softmax deep views.
IN_PLACE_WRITES = Site("in_place_writes", "*")
SOFTMAX_DEEP_VIEWS = Site("softmax_deep_views", "*")


@dataclass(frozen=True)
class Variant:
    """One graph a run may schedule: the model's bytes, what normalisation did (None: not normalised), the priced
    sites it leaves out, whether passes write their slices of a concatenation in place, and the lowered network."""

    model_bytes: bytes
    normalisation: Normalisation | None
    skipped: frozenset[str]
    in_place: bool
    network: Network

    @property
    def sites(self) -> tuple[Site, ...]:
        """The priced sites this graph has (the lowering's pseudo-sites included)."""
        applied = self.normalisation.applied if self.normalisation is not None else ()
        return applied + ((IN_PLACE_WRITES,) if self.writes_in_place else ()) + \
            ((SOFTMAX_DEEP_VIEWS,) if self.has_deep_views else ())

    @property
    def writes_in_place(self) -> bool:
        return any(op.attr(IN_PLACE_OF) for op in self.network.npu_ops)

    @property
    def has_deep_views(self) -> bool:
        return any(op.attr(DEEP_VIEW) for op in self.network.npu_ops)


class Graphs:
    """The variants of one model a run may schedule, built on demand and kept (each is lowered once)."""

    def __init__(self, data: bytes, source: str, arch: ArchitectureFeatures, *, normalise_model: bool, stage: bool,
                 in_place: bool = True, softmax_split_bytes: int = SOFTMAX_SPLIT_BYTES) -> None:
        self.data, self.source, self.arch = data, source, arch
        self.normalise_model, self.stage, self.in_place = normalise_model, stage, in_place
        self.softmax_split_bytes = softmax_split_bytes
        self._built: dict[tuple[frozenset[str], bool], Variant] = {}
        self.own = self.variant(frozenset(), in_place)
        # Every priced site npusched's graph has (with the in-place writes, when it has any).
        self.sites: tuple[Site, ...] = self.own.sites

    @property
    def vela(self) -> Variant:
        """Vela's graph (lowered when first asked for)."""
        return self.variant(frozenset(site.key for site in self.sites), False)

    def variant(self, skipped: frozenset[str], in_place: bool) -> Variant:
        """The graph without the sites ``skipped`` names (``IN_PLACE_WRITES`` among them: no in-place writes)."""
        in_place = in_place and IN_PLACE_WRITES.key not in skipped
        key = (skipped, in_place)
        if key not in self._built:
            model_bytes, record = (normalise(self.data, self.source, stage=self.stage, skip=skipped,
                                             softmax_split_bytes=self.softmax_split_bytes)
                                   if self.normalise_model else (self.data, None))
            model = parse_tflite(model_bytes, self.source)
            validate_model(model)
            network = lower_model(model, self.arch, in_place=in_place,
                                  deep_views=SOFTMAX_DEEP_VIEWS.key not in skipped)
            self._built[key] = Variant(model_bytes, record, skipped, in_place, network)
        return self._built[key]

    @property
    def distinct(self) -> bool:
        """Whether npusched's graph differs from Vela's (else one search covers both)."""
        return bool(self.sites)


def decisions(sites: Sequence[Site], chosen: Variant, why_kept: str, why_out: str) -> tuple[SiteDecision, ...]:
    """Every site, applied or not in ``chosen``, with the reason the run gives for each side."""
    return tuple(SiteDecision(site, site.key not in chosen.skipped, why_out if site.key in chosen.skipped
                              else why_kept) for site in sites)
