"""The recipe of the graph a run schedules: everything, besides the model and the hardware, that decides it.

Which normalisation rewrites run (and with what parameters), which priced sites are left out, and the lowering's
choices (in-place concatenation writes, softmax deep views, the default core's graph, strides kept). A run makes
its recipe once from its options (``npusched.run.recipe_for``) and ``npusched.lowering.build.build_graph``
makes the graph from it alone, so the cost model or the solver never changes the graph behind the recipe's back;
the schedule document stores it, so ``--schedule`` rebuilds the very graph a run scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from npusched.errors import ConfigError

# A SOFTMAX is split into row bands when its decomposition's int32 map (one int32 per IFM element) is over this
# size: five such maps are live at its peak, each stored 16 deep (a 4-class map takes 64 bytes a pixel), so over
# 1.25 MiB; a classifier's or an attention layer's softmax (tens of KiB) is left as Vela compiles it, but where fast
# storage is short (``softmax_bands.split_bytes_for``).
SOFTMAX_SPLIT_BYTES = 64 * 1024
# The lowering's choices a priced site stands for (``Site.key``): they are left out by name like any other site.
IN_PLACE_WRITES_KEY = "in_place_writes:*"
SOFTMAX_DEEP_VIEWS_KEY = "softmax_deep_views:*"
# The lowering's choices as rewrites that ``--disable-rewrite`` names.
LOWERING_REWRITES = ("in_place_writes", "softmax_deep_views")


@dataclass(frozen=True)
class GraphRecipe:
    """What decides the graph (module docstring). The defaults are Vela legacy's lowering of the model with every
    normalisation rewrite that applies to any hardware: ``normalise(data)`` and ``lower_model(model, arch)``."""

    # Run the normaliser at all (``--no-normalise``: the model as it is).
    normalise: bool = True
    # Stage channel-poor maps where feature maps live off fast storage (the staged inputs and outputs).
    stage_maps: bool = False
    # A SOFTMAX whose int32 map is over this may be computed in row bands.
    softmax_split_bytes: int = SOFTMAX_SPLIT_BYTES
    # Priced sites left out (``Site.key``), the lowering's two pseudo-sites among them.
    skipped_sites: frozenset[str] = field(default_factory=frozenset)
    # Rewrites switched off by name (``--disable-rewrite``), the lowering's two among them.
    disabled_rewrites: frozenset[str] = field(default_factory=frozenset)
    # Passes making a concatenation's inputs write their slices in place, a write making its OFM live at most this
    # many bytes sooner (None: any, where feature maps live off fast storage).
    in_place_writes: bool = False
    in_place_budget_bytes: int | None = 0
    # A SOFTMAX's per-row arithmetic on a deeper view of its maps (the default core's way).
    softmax_deep_views: bool = False
    # The graph Vela's default core schedules (``--solver vela-default`` reads that core's schedule onto it).
    default_core: bool = False
    # Convolutions keep their stride (the default core's graph: Vela legacy folds some strides into depth).
    keep_strides: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped_sites", frozenset(self.skipped_sites))
        object.__setattr__(self, "disabled_rewrites", frozenset(self.disabled_rewrites))

    def rewrite_enabled(self, name: str) -> bool:
        return name not in self.disabled_rewrites

    @property
    def writes_in_place(self) -> bool:
        """Whether the lowering writes concatenations' slices in place (not left out by site or by name)."""
        return self.in_place_writes and IN_PLACE_WRITES_KEY not in self.skipped_sites \
            and self.rewrite_enabled("in_place_writes")

    @property
    def deep_views(self) -> bool:
        return self.softmax_deep_views and SOFTMAX_DEEP_VIEWS_KEY not in self.skipped_sites \
            and self.rewrite_enabled("softmax_deep_views")

    def without(self, sites: Iterable[str]) -> GraphRecipe:
        """This recipe with the priced sites ``sites`` (``Site.key``) left out too."""
        return replace(self, skipped_sites=self.skipped_sites | frozenset(sites))

    def as_json(self) -> dict[str, Any]:
        record = asdict(self)
        record["skipped_sites"] = sorted(self.skipped_sites)
        record["disabled_rewrites"] = sorted(self.disabled_rewrites)
        return record

    @classmethod
    def from_json(cls, record: object) -> GraphRecipe:
        """The recipe a schedule document stores; a ``ConfigError`` naming what is wrong with a malformed one."""
        if not isinstance(record, dict):
            raise ConfigError("the schedule document's recipe is not an object")
        unknown = sorted(set(record) - {each.name for each in fields(cls)})
        if unknown:
            raise ConfigError(f"the schedule document's recipe has unknown fields: {', '.join(unknown)} (written by "
                              "a newer npusched?)")
        values: dict[str, Any] = {}
        for name, value in record.items():
            if name in ("skipped_sites", "disabled_rewrites"):
                if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                    raise ConfigError(f"the schedule document's recipe field {name} is not a list of names")
                values[name] = frozenset(value)
            elif name == "in_place_budget_bytes":
                if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                    raise ConfigError(f"the schedule document's recipe field {name} is not a whole number or null")
                values[name] = value
            elif name == "softmax_split_bytes":
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise ConfigError(f"the schedule document's recipe field {name} is not a whole number")
                values[name] = value
            else:
                if not isinstance(value, bool):
                    raise ConfigError(f"the schedule document's recipe field {name} is not true or false")
                values[name] = value
        return cls(**values)
