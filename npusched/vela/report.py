"""Readers for what Vela prints and writes: the verbose schedule, the per-layer CSV, the summary CSV and the
``_vela.tflite``.

Used by the fidelity scripts and the tests to compare npusched with Vela's own figures.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SHAPE = re.compile(r"<Shape4D \[([\d, ]+)\]>")
_OP_HEAD = re.compile(r"^\t(\d+): Operation (.*?)  - OFM <Shape4D \[([\d, ]+)\]>$")
_CASCADE = re.compile(r"^\t\t(\d+): (\d+) -> (\d+), size: (\d+)$")


def _ints(text: str) -> list[int]:
    return [int(v) for v in re.findall(r"-?\d+", text)]


@dataclass
class VelaScheduledOp:
    """One op of Vela's `--verbose-schedule` output."""

    index: int
    name: str
    ofm_shape: list[int]
    op_type: str = ""
    kernel: tuple[int, int, int, int, int, int] = (1, 1, 1, 1, 1, 1)  # w, h, stride x, stride y, dil x, dil y
    block_config: list[int] | None = None
    ofm_block: list[int] | None = None
    ifm_stripe: list[int] | None = None
    ifm2_stripe: list[int] | None = None
    ofm_stripe: list[int] | None = None
    encoded_weights_bytes: int | None = None
    weight_buffer_bytes: list[int] = field(default_factory=list)
    depth_slices: list[int] = field(default_factory=list)
    cascade: int = 0
    sram_used_bytes: int = 0


@dataclass
class VelaSchedule:
    """The final schedule of one NPU subgraph: its ops and cascades (start op, end op, size in bytes)."""

    label: str
    ops: list[VelaScheduledOp] = field(default_factory=list)
    cascades: list[tuple[int, int, int, int]] = field(default_factory=list)

    @property
    def subgraph(self) -> str:
        """The NPU subgraph's name: the label without Vela's `_MAX_BUFFERED`/`_MIN_BUFFERED` suffix."""
        return re.sub(r"_(?:MAX|MIN)_BUFFERED$", "", self.label)


def _shape_or_none(value: str) -> list[int] | None:
    match = _SHAPE.search(value)
    return _ints(match.group(1)) if match else None


def read_verbose_schedule(path: Path) -> list[VelaSchedule]:
    """Parse every `Schedule: '...'` block of a Vela stdout capture."""
    schedules: list[VelaSchedule] = []
    op: VelaScheduledOp | None = None
    for line in Path(path).read_text().splitlines():
        if line.startswith("Schedule: "):
            schedules.append(VelaSchedule(label=line.split("'")[1]))
            op = None
            continue
        if not schedules:
            continue
        head = _OP_HEAD.match(line)
        if head:
            op = VelaScheduledOp(int(head.group(1)), head.group(2).strip(), _ints(head.group(3)))
            schedules[-1].ops.append(op)
            continue
        cascade = _CASCADE.match(line)
        if cascade:
            schedules[-1].cascades.append(tuple(int(g) for g in cascade.groups()))  # type: ignore[arg-type]
            continue
        if op is None or not line.startswith("\t\t"):
            if not line.startswith("\t"):
                op = None
            continue
        # `Kernel: w=1, h=1, ...` splits at its colon; the other `=` lines at the equals sign.
        key, _, value = line.strip().partition(":" if "=" not in line or line.lstrip().startswith("Kernel:") else "=")
        key, value = key.strip(), value.strip()
        if key == "Type":
            op.op_type = value
        elif key == "Kernel":
            op.kernel = tuple(_ints(value))  # type: ignore[assignment]
        elif key == "Block Config":
            op.block_config = _ints(value)
        elif key == "OFM Block":
            op.ofm_block = _shape_or_none(value)
        elif key == "IFM Stripe":
            op.ifm_stripe = _shape_or_none(value)
        elif key == "IFM2 Stripe":
            op.ifm2_stripe = _shape_or_none(value)
        elif key == "OFM Stripe":
            op.ofm_stripe = _shape_or_none(value)
        elif key == "Encoded Weights":
            op.encoded_weights_bytes = _ints(value)[0] if _ints(value) else None
        elif key.startswith("Weight buffer"):
            op.weight_buffer_bytes.append(_ints(value)[0])
        elif key == "Depth slices":
            op.depth_slices = _ints(value)
        elif key == "Assigned Cascade":
            op.cascade = int(value)
        elif key == "SRAM Used":
            op.sram_used_bytes = _ints(value)[0]
    return schedules


def read_cpu_operator_count(path: Path) -> int:
    match = re.search(r"^CPU operators = (\d+)", Path(path).read_text(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{path}: no 'CPU operators = N' line")
    return int(match.group(1))


def read_partition(path: Path) -> tuple[int, int]:
    """(CPU operators, NPU subgraphs) of a ``_vela.tflite``: every ethos-u custom operator of the main subgraph is
    one NPU subgraph, every other operator runs on the CPU (as the zoo's golden partition.csv counts them)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(Path(path).read_bytes(), 0)
    npu = cpu = 0
    for op in model.subgraphs[0].operators:
        code = model.operatorCodes[op.opcodeIndex]
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        if builtin == schema.BuiltinOperator.CUSTOM and (code.customCode or b"").decode() == "ethos-u":
            npu += 1
        else:
            cpu += 1
    return cpu, npu


def read_per_layer(path: Path) -> list[list[dict[str, str]]]:
    """Vela's per-layer CSV: one list of rows per NPU subgraph (a header row starts each subgraph).

    The CSV repeats the column name `Network%`; the second one (MACs share) is keyed `Network% MACs`.
    """
    groups: list[list[dict[str, str]]] = []
    header: list[str] = []
    with open(path, newline="") as handle:
        for row in csv.reader(handle):
            if not row:
                continue
            if row[0] == "TFLite_operator":
                header = [name if name != "Network%" or i < 6 else "Network% MACs" for i, name in enumerate(row)]
                groups.append([])
                continue
            groups[-1].append(dict(zip(header, row, strict=True)))
    return groups


def read_summary(path: Path) -> dict[str, str]:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) != 1:
        raise ValueError(f"{path}: expected one summary row, found {len(rows)}")
    return rows[0]


def tflite_contents(path: Path) -> tuple[Any, ...]:
    """What a ``_vela.tflite`` holds, independent of the order its tensors are listed in: per subgraph the
    tensors (name, shape, type, data) and operators (operator code, input and output tensor names, custom
    options, which carry nothing for Vela's custom operator; its command stream is a tensor), and the metadata.
    Two files with equal contents run the same command streams on the same data."""
    import numpy as np
    import tflite

    model = tflite.Model.GetRootAs(Path(path).read_bytes(), 0)

    def data(index: int) -> bytes:
        buffer = model.Buffers(index)
        return buffer.DataAsNumpy().tobytes() if buffer is not None and buffer.DataLength() else b""

    subgraphs, tensor_names = [], []
    for s in range(model.SubgraphsLength()):
        graph = model.Subgraphs(s)
        tensors = [graph.Tensors(t) for t in range(graph.TensorsLength())]
        names = [t.Name().decode() for t in tensors]
        tensor_names += [(s, name) for name in names]

        def named(indices: Any, names: list[str] = names) -> tuple[str, ...]:
            return tuple(names[i] if i >= 0 else "" for i in indices)

        operators = []
        for o in range(graph.OperatorsLength()):
            op = graph.Operators(o)
            code = model.OperatorCodes(op.OpcodeIndex())
            custom = op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b""
            operators.append((max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), code.CustomCode(),
                              named(op.InputsAsNumpy() if op.InputsLength() else ()),
                              named(op.OutputsAsNumpy() if op.OutputsLength() else ()), custom))
        tensor_set = sorted((name, tuple(t.ShapeAsNumpy().tolist()) if t.ShapeLength() else (), t.Type(),
                             data(t.Buffer())) for name, t in zip(names, tensors, strict=True))
        subgraphs.append((tuple(tensor_set), tuple(operators), named(graph.InputsAsNumpy()),
                          named(graph.OutputsAsNumpy())))
    metadata = []
    for m in range(model.MetadataLength()):
        name, raw = model.Metadata(m).Name().decode(), data(model.Metadata(m).Buffer())
        payload: bytes | tuple[Any, ...] = raw
        if name == "OfflineMemoryAllocation":  # [version, subgraphs, tensors, one arena offset per tensor in order]
            offsets = np.frombuffer(raw, dtype="<i4")
            payload = tuple(offsets[:3].tolist()) + tuple(sorted(zip(tensor_names, offsets[3:].tolist(), strict=True)))
        metadata.append((name, payload))
    return tuple(subgraphs), tuple(sorted(metadata))
