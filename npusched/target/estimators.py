"""How passes are priced: the estimators, the hardware priced by one of them (``PricedArchitecture``), and the
blend of the two Vela models that ``--objective both`` minimises.

``ArchitectureFeatures`` is the hardware alone: the graph (``frontend``, ``lowering``) is built from it and never
sees how it is priced (an import contract holds this). The schedule, the solvers and the run take a
``PricedArchitecture``: the hardware, the cost model (``estimator``) and, under ``Estimator.BOTH``, the objective's
blend. Under ``Estimator.BOTH`` a pass costs ``legacy weight x`` its cycles under Vela legacy's model ``+ default
weight x`` its cycles under the default core's (each after the slack the previous pass leaves under that model),
and a weighted model total over ``blend_cap`` is an excess the objective penalises (``objective_cycles``). The
weights and the cap come from the two Vela cores' own schedules (``npusched.app.cpsat_run.objective_arch``).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from npusched.errors import ConfigError
from npusched.target.arch import ArchitectureFeatures, load_hardware


class Estimator(str, enum.Enum):
    """How passes are priced (``--estimator``): as Vela's legacy core estimates them, as its default (C++) core
    does (``npusched.target.performance_default``), or the legacy estimate with prefetches competing for memory
    bandwidth (``npusched.target.contention``). ``vela``, the older name of ``vela-legacy``, still parses.

    ``BOTH`` is no ``--estimator``: it is the objective of ``--objective both``, a weighted sum of the two Vela
    cores' models (``PricedArchitecture.blend_weights``), which the solvers minimise; every figure a run prints
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


@dataclass(frozen=True, eq=False)
class PricedArchitecture(ArchitectureFeatures):
    """The hardware with how its passes are priced (npusched's ``--estimator``, not Vela's) and, under
    ``Estimator.BOTH``, the blend the objective weighs: a pass costs legacy x its legacy-model cycles + default x its
    default-model cycles, and each of the two weighted totals over ``blend_cap`` (0: none) is an excess the
    objective penalises."""

    estimator: Estimator = Estimator.VELA_LEGACY
    blend_weights: tuple[float, float] = (1.0, 1.0)
    blend_cap: float = 0.0


def load_architecture(
    accelerator_config: str = "ethos-u55-128",
    config_files: Sequence[str] | None = None,
    system_config: str | None = None,
    memory_mode: str | None = None,
    arena_cache_size: int | None = None,
    optimise: str = "Performance",
    estimator: str | Estimator = Estimator.VELA_LEGACY,
) -> PricedArchitecture:
    """The hardware as Vela 5.2.0 builds it for the same command-line options (``load_hardware``), pricing passes
    with ``estimator`` (npusched's ``--estimator``). Raises :class:`ConfigError`."""
    try:
        chosen = Estimator(estimator)
        if chosen is Estimator.BOTH:
            raise ValueError
    except ValueError:
        raise ConfigError(f"unknown estimator '{estimator}' (known: {', '.join(Estimator.names())})") from None
    hardware = load_hardware(accelerator_config, config_files, system_config, memory_mode, arena_cache_size, optimise)
    return _priced(hardware, chosen)


@functools.lru_cache(maxsize=32)
def _priced(hardware: ArchitectureFeatures, estimator: Estimator) -> PricedArchitecture:
    """``hardware`` priced by ``estimator``."""
    return PricedArchitecture(**{f.name: getattr(hardware, f.name) for f in fields(ArchitectureFeatures) if f.init},
                              estimator=estimator)


# Under ``Estimator.BOTH``, a cycle of a weighted model total over ``blend_cap`` costs the objective this many.
OVER_CAP_PENALTY = 100


def with_estimator(arch: PricedArchitecture, estimator: Estimator) -> PricedArchitecture:
    """``arch`` pricing with ``estimator`` (a single model)."""
    return arch if arch.estimator is estimator else replace(arch, estimator=estimator, blend_weights=(1.0, 1.0),
                                                            blend_cap=0.0)


def blended(arch: PricedArchitecture, legacy_weight: float, default_weight: float,
            cap: float = 0.0) -> PricedArchitecture:
    """``arch`` pricing a pass as ``legacy_weight`` x its cycles under Vela legacy's model + ``default_weight`` x
    its cycles under the default core's (``Estimator.BOTH``), each weighted total over ``cap`` penalised."""
    return replace(arch, estimator=Estimator.BOTH, blend_weights=(float(legacy_weight), float(default_weight)),
                   blend_cap=float(cap))


def objective_cycles(arch: PricedArchitecture, total_cycles: float, parts: tuple[float, float]) -> float:
    """What a solver minimises: the total; under ``Estimator.BOTH`` with a cap, plus ``OVER_CAP_PENALTY`` x each
    weighted model total's excess over it."""
    if arch.estimator is not Estimator.BOTH or arch.blend_cap <= 0:
        return total_cycles
    return total_cycles + OVER_CAP_PENALTY * sum(max(0.0, part - arch.blend_cap) for part in parts)


@functools.lru_cache(maxsize=64)
def blend_parts(arch: PricedArchitecture) -> tuple[PricedArchitecture, PricedArchitecture]:
    """The legacy-model and default-model architectures a ``BOTH`` architecture blends."""
    return with_estimator(arch, Estimator.VELA_LEGACY), with_estimator(arch, Estimator.VELA_DEFAULT)
