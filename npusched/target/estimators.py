"""How passes are priced: the estimators, and the blend of the two Vela models that ``--objective both`` minimises.

Under ``Estimator.BOTH`` a pass costs ``legacy weight x`` its cycles under Vela legacy's model ``+ default weight x``
its cycles under the default core's (each after the slack the previous pass leaves under that model), and a
weighted model total over the architecture's ``blend_cap`` is an excess the objective penalises
(``objective_cycles``). The weights and the cap come from the two Vela cores' own schedules
(``npusched.app.cpsat_run.objective_arch``).
"""

from __future__ import annotations

import enum
import functools
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from npusched.target.arch import ArchitectureFeatures


class Estimator(str, enum.Enum):
    """How passes are priced (``--estimator``): as Vela's legacy core estimates them, as its default (C++) core
    does (``npusched.target.performance_default``), or the legacy estimate with prefetches competing for memory
    bandwidth (``npusched.target.contention``). ``vela``, the older name of ``vela-legacy``, still parses.

    ``BOTH`` is no ``--estimator``: it is the objective of ``--objective both``, a weighted sum of the two Vela
    cores' models (``ArchitectureFeatures.blend_weights``), which the solvers minimise; every figure a run prints
    is still one model's."""

    VELA_LEGACY = "vela-legacy"
    VELA_DEFAULT = "vela-default"
    CONTENTION = "contention"
    BOTH = "both"
    VELA = "vela-legacy"  # alias of VELA_LEGACY (the same member)

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Estimator | None:
        return cls.VELA_LEGACY if value == "vela" else None

    @classmethod
    def single(cls) -> tuple[Estimator, ...]:
        """The estimators that are one cost model (every one but ``BOTH``)."""
        return tuple(e for e in cls if e is not cls.BOTH)

    @classmethod
    def names(cls) -> list[str]:
        """Every accepted ``--estimator`` value, the alias ``vela`` included."""
        return [e.value for e in cls.single()] + ["vela"]


# Under ``Estimator.BOTH``, a cycle of a weighted model total over ``blend_cap`` costs the objective this many.
OVER_CAP_PENALTY = 100


def with_estimator(arch: ArchitectureFeatures, estimator: Estimator) -> ArchitectureFeatures:
    """``arch`` pricing with ``estimator`` (a single model)."""
    return arch if arch.estimator is estimator else replace(arch, estimator=estimator, blend_weights=(1.0, 1.0),
                                                            blend_cap=0.0)


def blended(arch: ArchitectureFeatures, legacy_weight: float, default_weight: float,
            cap: float = 0.0) -> ArchitectureFeatures:
    """``arch`` pricing a pass as ``legacy_weight`` x its cycles under Vela legacy's model + ``default_weight`` x
    its cycles under the default core's (``Estimator.BOTH``), each weighted total over ``cap`` penalised."""
    return replace(arch, estimator=Estimator.BOTH, blend_weights=(float(legacy_weight), float(default_weight)),
                   blend_cap=float(cap))


def objective_cycles(arch: ArchitectureFeatures, total_cycles: float, parts: tuple[float, float]) -> float:
    """What a solver minimises: the total; under ``Estimator.BOTH`` with a cap, plus ``OVER_CAP_PENALTY`` x each
    weighted model total's excess over it."""
    if arch.estimator is not Estimator.BOTH or arch.blend_cap <= 0:
        return total_cycles
    return total_cycles + OVER_CAP_PENALTY * sum(max(0.0, part - arch.blend_cap) for part in parts)


@functools.lru_cache(maxsize=64)
def blend_parts(arch: ArchitectureFeatures) -> tuple[ArchitectureFeatures, ArchitectureFeatures]:
    """The legacy-model and default-model architectures a ``BOTH`` architecture blends."""
    return with_estimator(arch, Estimator.VELA_LEGACY), with_estimator(arch, Estimator.VELA_DEFAULT)
