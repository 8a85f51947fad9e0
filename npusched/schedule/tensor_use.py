"""Who reads and writes each feature map, and where a feature map lives under a schedule.

The memory model, the pricing and the solvers all need these two facts; they do not depend on any choice a
solver makes beyond a tensor's placement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from npusched.ir import FeatureMap, TensorFormat
from npusched.lowering.graph import Network, NpuSubgraph
from npusched.schedule.schedule import Schedule, TensorPlacement
from npusched.target.estimators import PricedArchitecture


def subgraphs_of(network_or_subgraph: Network | NpuSubgraph) -> tuple[NpuSubgraph, ...]:
    """The NPU subgraphs to evaluate: all of a Network's, or the one given."""
    if isinstance(network_or_subgraph, Network):
        return network_or_subgraph.subgraphs
    return (network_or_subgraph,)


def feature_map_label(fm: FeatureMap) -> str:
    """How reports name a feature map (an unnamed one by its id)."""
    return fm.name if fm.name else f"<tensor {fm.uid}>"


@dataclass(frozen=True)
class TensorUse:
    """Producers and consumers of every feature map of the evaluated subgraphs (by op index)."""

    producers: dict[FeatureMap, tuple[int, ...]]
    consumers: dict[FeatureMap, tuple[int, ...]]
    subgraph_outputs: frozenset[FeatureMap]
    subgraph_inputs: frozenset[FeatureMap]
    variables: frozenset[str] = frozenset()
    variable_writes: dict[FeatureMap, str] = field(default_factory=dict)
    # Reads beyond one per consumer: a pass reading the map as both inputs (MUL(x, x)) is two consumers to Vela.
    repeated_reads: dict[FeatureMap, int] = field(default_factory=dict)

    def consumer_count(self, fm: FeatureMap) -> int:
        """Consumers as Vela counts them: one per input that reads ``fm`` (Vela lists a pass once per input), and
        one more for a subgraph output (the CPU side or the network output)."""
        return (len(self.consumers.get(fm, ())) + self.repeated_reads.get(fm, 0)
                + (1 if fm in self.subgraph_outputs else 0))

    def storage_key(self, fm: FeatureMap) -> Any:
        """Identity of the buffer holding ``fm``: a pass that writes a variable (LSTM state) writes into the
        variable's own buffer, so its OFM and the variable share one allocation."""
        name = self.variable_writes.get(fm)
        if name is not None:
            return ("variable", name)
        if fm.name in self.variables:
            return ("variable", fm.name)
        return fm


def tensor_use(network_or_subgraph: Network | NpuSubgraph) -> TensorUse:
    """Readers and writers of every feature map, read off each subgraph's pass DAG (``NpuSubgraph.graph``)."""
    producers: dict[FeatureMap, tuple[int, ...]] = {}
    consumers: dict[FeatureMap, tuple[int, ...]] = {}
    outputs: set[FeatureMap] = set()
    inputs: set[FeatureMap] = set()
    writes: dict[FeatureMap, str] = {}
    repeated: dict[FeatureMap, int] = {}
    for sg in subgraphs_of(network_or_subgraph):
        outputs.update(sg.outputs)
        inputs.update(sg.inputs)
        read: set[FeatureMap] = set()
        written: set[FeatureMap] = set()
        for op in sg.ops:  # maps in the order passes first touch them: what a walk over the schedule sees
            for fm in sg.graph.predecessors(op.index):
                if fm not in read:
                    read.add(fm)
                    consumers[fm] = consumers.get(fm, ()) + sg.readers(fm)
            for fm in sg.graph.successors(op.index):
                if fm not in written:
                    written.add(fm)
                    producers[fm] = producers.get(fm, ()) + sg.writers(fm)
            if op.ifm2 is not None and op.ifm2.tensor == op.ifm.tensor:
                repeated[op.ifm.tensor] = repeated.get(op.ifm.tensor, 0) + 1
            if op.attr("memory_function") == "VariableTensorWrite" and op.attr("variable_tensor") is not None:
                var = op.attr("variable_tensor")
                writes[op.ofm.tensor] = var.name if isinstance(var, FeatureMap) else str(var)
    return TensorUse(producers, consumers, frozenset(outputs), frozenset(inputs), frozenset(writes.values()), writes,
                     repeated)


# --------------------------------------------------------------------------------------------------------------
# Storage


def default_placement(arch: PricedArchitecture, fm: FeatureMap) -> TensorPlacement:
    """Where a feature map lives before any schedule moves it: constants in permanent storage, the rest in
    feature-map storage, both NHWC."""
    if fm.is_const:
        return TensorPlacement(arch.permanent_storage_mem_area, TensorFormat.NHWC)
    return TensorPlacement(arch.feature_map_storage_mem_area, TensorFormat.NHWC)


def placement_of(arch: PricedArchitecture, schedule: Schedule, fm: FeatureMap) -> TensorPlacement:
    if fm.is_const:
        return default_placement(arch, fm)
    return schedule.placement(fm) or default_placement(arch, fm)


def in_fast_storage(arch: PricedArchitecture, placement: TensorPlacement) -> bool:
    return placement.mem_area == arch.fast_storage_mem_area
