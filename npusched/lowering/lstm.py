"""UNIDIRECTIONAL_SEQUENCE_LSTM unrolled into NPU passes the way Vela 5.2.0's legacy core does it.

Every time step (and, when the sequence is batch-major, every batch row separately) becomes 18 passes:

* four gates (input, forget, cell, output), each two FullyConnected passes - one on the step's input feature,
  one on the output state - with int16 results at scale 2^-12, then an int16 Add at scale 2^-15 whose fused
  activation is the hardware Sigmoid (Tanh for the cell gate);
* the new cell state: Mul(cell state, forget gate) + Mul(cell gate, input gate), added with the cell clip
  fused; the sum is written into the cell-state variable tensor;
* the new output state: a 1x1 AvgPool with a fused Tanh on the cell state, multiplied by the output gate and
  written, in the LSTM's input type, into the output-state variable tensor;
* a 1x1 AvgPool copying the output state into its slot of the LSTM output.

Vela's default core (its graph: ``LoweringContext.default_core``) makes 6 passes more per LSTM: a 1x1 AvgPool copy
of each state variable that the step reads instead, and a clamp (1x1 AvgPool) after each sigmoid gate and after
the cell-state Add, which then writes the state itself.

Vela first slices the input sequence and the states with SplitSliceRead ops and removes them before scheduling
by moving the read offset into the consuming passes; the passes returned here read the sequence / state tensors
directly with that offset (or, where Vela cannot move it, through the 1x1 AvgPool copy it inserts instead).
Passes that write a state carry ``("memory_function", "VariableTensorWrite")`` and ``("variable_tensor",
<the state's FeatureMap>)`` in ``attrs``: their OFM tensor shares the variable tensor's buffer (Vela gives it the same
equivalence id) and, like it, is stored in linear NHWC format. The output copies carry
``("memory_function", "ConcatSliceWrite")``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from npusched.ir import DataType, FeatureMap, Kernel, NpuOp, Quantization, Shape4D
from npusched.lowering.common import elementwise_op, pool_op, weighted_op
from npusched.lowering.context import LoweringContext
from npusched.lowering.softmax import elementwise_mul_scale

TFLITE_OP = "UNIDIRECTIONAL_SEQUENCE_LSTM"
Q0_15 = float(np.float32(2.0**-15))
GATE_SCALE = float(np.float32(2.0**-12))
# The Sigmoid output limits the TFLite reference can reach, over the 0x3000 effective scale Vela uses for
# elementwise passes with a fused Sigmoid/Tanh.
SIGMOID_MIN = 11 / 0x3000
SIGMOID_MAX = 32757 / 0x3000
# How Vela spreads the rows of a batched fully connected pass over H x W (other counts become 1 x rows).
BATCH_SPLITS = {4: (2, 2), 6: (2, 3), 8: (2, 4), 9: (3, 3), 12: (3, 4), 16: (4, 4)}

# Operand positions of the TFLite operator.
INPUT_WEIGHTS = {"input": 1, "forget": 2, "cell": 3, "output": 4}
RECURRENT_WEIGHTS = {"input": 5, "forget": 6, "cell": 7, "output": 8}
GATE_BIAS = {"input": 12, "forget": 13, "cell": 14, "output": 15}
OUTPUT_STATE = 18
CELL_STATE = 19
HIDDEN_INTERMEDIATE = 4


def _scale(q: Quantization) -> float:
    return float(q.scale[0]) if q.scale else 1.0


def _shape4(*dims: int) -> Shape4D:
    return Shape4D.from_list(list(dims))


@dataclass(frozen=True)
class _Operand:
    """How one pass reads a tensor: ``name`` is what Vela calls the (possibly sliced) tensor in pass names;
    ``shape`` is None where the pass derives its own view; ``offset``/``read`` slice a row out of it."""

    fm: FeatureMap
    name: str
    shape: Shape4D | None = None
    offset: Shape4D | None = None
    read: Shape4D | None = None

    @property
    def rows(self) -> int:
        """Rows of the 2-D [rows, n] tensor this operand stands for."""
        if self.read is not None:
            return self.read.batch * self.read.height * self.read.width
        return self.fm.shape.batch * self.fm.shape.height * self.fm.shape.width


class _LstmBuilder:
    """One unrolling: the passes made so far and the operator's dimensions and operands."""

    def __init__(self, op, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext):
        self.op = op
        self.ifm = ifm
        self.ofm = ofm
        self.ctx = ctx
        self.ofm_name = ctx.tensor(op.outputs[0]).name
        self.in_name = ctx.tensor(op.inputs[0]).name
        self.time_major = bool(op.options.get("time_major", False))
        shape = tuple(ctx.tensor(op.inputs[0]).shape)
        self.n_feature = shape[-1]
        self.n_time = shape[0 if self.time_major else 1]
        self.n_batch = shape[1 if self.time_major else 0]
        self.cell_clip = float(op.options.get("cell_clip", 0.0) or 0.0)
        self.output_state = ctx.feature_map(op.inputs[OUTPUT_STATE])
        self.cell_state = ctx.feature_map(op.inputs[CELL_STATE])
        self.output_state_name = ctx.tensor(op.inputs[OUTPUT_STATE]).name
        self.hidden_quantization = self._hidden_quantization()
        self.ops: list[NpuOp] = []

    def _hidden_quantization(self) -> Quantization | None:
        """Quantisation of the hidden (output-state) intermediate, the 5th of the operator's intermediates."""
        intermediates = self.op.intermediates
        if len(intermediates) > HIDDEN_INTERMEDIATE and intermediates[HIDDEN_INTERMEDIATE] >= 0:
            return self.ctx.tensor(intermediates[HIDDEN_INTERMEDIATE]).quantization
        return None

    # -- operands -------------------------------------------------------------------------------------------

    def feature(self, time: int, batch: int) -> _Operand:
        """The step's slice of the input sequence: one [rows, features] plane read at an offset."""
        name = f"{self.in_name}_feature#{batch}.{time}"
        if self.time_major:
            offset, read = Shape4D(0, time, 0, 0), _shape4(self.n_batch, self.n_feature)
        else:
            offset, read = Shape4D(0, batch, time, 0), _shape4(1, self.n_feature)
        operand = _Operand(self.ifm, name, self.ifm.shape, offset, read)
        if self.time_major and self.n_batch > 1:
            fc_in, _ = _fc_shapes(self.n_batch, self.n_feature, 1)
            if not all(r <= c for r, c in zip(read.as_list(), fc_in.as_list(), strict=True)):
                # The slice does not fit the batched FC's view: Vela copies it out with a 1x1 AvgPool.
                copy = self.ctx.new_feature_map(name, (self.n_batch, self.n_feature), self.ifm.dtype,
                                                self.ifm.quantization)
                self.ops.append(pool_op(
                    "AvgPool", f"{name}_avgpool", self.ifm, copy, tflite_op=TFLITE_OP,
                    kernel=Kernel(valid_padding=True), ifm_shape=self.ifm.shape, ifm_offset=offset,
                    ifm_read_shape=read, ofm_shape=copy.shape))
                return _Operand(copy, name)
        return operand

    def state_operand(self, fm: FeatureMap, name: str, batch: int, first_step: bool) -> _Operand:
        """How a step reads a state: the variable tensor or last step's result, one row of it if batch-major."""
        if self.time_major:
            return _Operand(fm, name)
        depth = fm.shape.depth
        if first_step or self.n_batch > 1:
            return _Operand(fm, name, _shape4(self.n_batch, depth), Shape4D(0, 0, batch, 0), _shape4(1, depth))
        return _Operand(fm, name)

    # -- passes ---------------------------------------------------------------------------------------------

    def fully_connected(self, name: str, src: _Operand, weights_index: int, bias_index: int | None) -> FeatureMap:
        w_tensor = self.ctx.tensor(self.op.inputs[weights_index])
        # TFLite holds FC weights [out, in]; Vela transposes them to [in, out].
        values = np.ascontiguousarray(np.asarray(w_tensor.data).T)
        n_in, n_out = values.shape
        if bias_index is not None and self.op.inputs[bias_index] >= 0:
            b_tensor = self.ctx.tensor(self.op.inputs[bias_index])
            bias = self.ctx.const_tensor(b_tensor.name, np.asarray(b_tensor.data).reshape(-1), b_tensor.dtype,
                                         b_tensor.quantization, shape=(n_out,))
        else:
            bias_dtype = DataType.int64 if src.fm.dtype == DataType.int16 else DataType.int32
            bias = self.ctx.const_tensor(f"{name}_bias", np.zeros(n_out), bias_dtype, shape=(n_out,))
        rows = src.rows
        out = self.ctx.new_feature_map(f"{name}_tens0", (rows, n_out), DataType.int16,
                                       Quantization(scale=(GATE_SCALE,), zero_point=(0,)))
        op_type = "FullyConnected"
        fc_in, fc_out = _fc_shapes(rows, n_in, n_out)
        if rows > 1:
            # Vela's batched FC keeps its weights as HWIO and, with rows it cannot fold, runs as a 1x1 conv.
            values = values.reshape(1, 1, n_in, n_out)
            if fc_in.height == 1 and fc_in.width > 4:
                op_type = "Conv2DBias"
        weights = self.ctx.const_tensor(f"{w_tensor.name}_reshape", values, w_tensor.dtype, w_tensor.quantization,
                                        shape=values.shape)
        if src.read is not None:
            # The slice Vela moved into this pass: its shape is the whole tensor's, its OFM one row.
            ifm_shape, ofm_shape = src.shape, _shape4(1, n_out) if rows == 1 else fc_out
        else:
            ifm_shape, ofm_shape = fc_in, fc_out
        self.ops.append(weighted_op(
            op_type, name, src.fm, out, weights, bias, tflite_op=TFLITE_OP, kernel=Kernel(),
            ifm_shape=ifm_shape, ofm_shape=ofm_shape, ifm_offset=src.offset, ifm_read_shape=src.read))
        return out

    def gate(self, gate: str, time: int, batch: int, feature: _Operand, state: _Operand) -> FeatureMap:
        prefix = f"{gate}_gate#{batch}.{time}"
        from_input = self.fully_connected(f"{prefix}:{feature.name}_fc", feature, INPUT_WEIGHTS[gate],
                                          GATE_BIAS[gate])
        from_state = self.fully_connected(f"{prefix}:{state.name}_fc", state, RECURRENT_WEIGHTS[gate], None)
        sigmoid = gate != "cell"
        add = elementwise_op(
            "Add", f"{prefix}_add", from_input, from_state, tflite_op=TFLITE_OP,
            quantization=Quantization(scale=(Q0_15,), zero_point=(0,)), activation="Sigmoid" if sigmoid else "Tanh",
            activation_min=SIGMOID_MIN if sigmoid else None, activation_max=SIGMOID_MAX if sigmoid else None)
        self.ops.append(add)
        if sigmoid and self.ctx.default_core:
            return self.copy(f"{prefix}_clamp", add.ofm.tensor, activation="Clip", clip=(SIGMOID_MIN, SIGMOID_MAX))
        return add.ofm.tensor

    def copy(self, name: str, src: FeatureMap, activation: str | None = None,
             clip: tuple[float, float] | None = None) -> FeatureMap:
        """A 1x1 AvgPool copy of ``src`` (clamped with ``activation``): how the default core runs a MemoryCopy or
        a Clamp (regor-5.2.0 ArchEthosU55::UseAvgPoolNop)."""
        self.ops.append(self.copy_op(name, src, activation, clip))
        return self.ops[-1].ofm.tensor

    def copy_op(self, name: str, src: FeatureMap, activation: str | None = None,
                clip: tuple[float, float] | None = None) -> NpuOp:
        out = self.ctx.new_feature_map(f"{name}_tens0", src.orig_shape or src.shape, src.dtype, src.quantization)
        return pool_op("AvgPool", name, src, out, tflite_op=TFLITE_OP, kernel=Kernel(valid_padding=True),
                       activation=activation, activation_min=None if clip is None else clip[0],
                       activation_max=None if clip is None else clip[1])

    def write_state(self, npu_op: NpuOp, state: FeatureMap, batch: int) -> NpuOp:
        """Point the pass's OFM at a variable state: a 2-D [rows, n] tensor sharing the state's buffer (only
        its own row of it when batch-major)."""
        tensor = npu_op.ofm.tensor
        shape = tensor.shape
        orig = (shape.batch * shape.height * shape.width, shape.depth) if self.time_major else (1, shape.depth)
        tensor = replace(tensor, shape=_shape4(*orig), orig_shape=orig)
        if self.time_major:
            access = replace(npu_op.ofm, tensor=tensor)
        else:
            access = replace(npu_op.ofm, tensor=tensor, shape=state.shape, offset=Shape4D(0, 0, batch, 0),
                             access_shape=_shape4(*orig))
        attrs = npu_op.attrs + (("memory_function", "VariableTensorWrite"), ("variable_tensor", state))
        return replace(npu_op, ofm=access, attrs=attrs)

    def cell_update(self, time: int, batch: int, cell: _Operand, input_gate: FeatureMap, forget_gate: FeatureMap,
                    cell_gate: FeatureMap) -> FeatureMap:
        prefix = f"cell_state#{batch}.{time}"
        cell_q = self.cell_state.quantization
        cell_scale = _scale(cell_q)
        mult, shift = elementwise_mul_scale(cell_scale, Q0_15, cell_scale)
        # Vela builds this Mul on the one-row slice, then widens its IFM view to the whole state tensor.
        forget = elementwise_op("Mul", f"{prefix}_cf_mul", cell.fm, forget_gate, tflite_op=TFLITE_OP,
                                quantization=cell_q, ifm_shape=cell.read,
                                attrs=(("explicit_scaling", (False, (shift,), (mult,))),))
        if cell.read is not None:
            assert cell.shape is not None  # a row read out of the state comes with the state's shape
            forget = replace(forget, ifm=replace(forget.ifm, shape=cell.shape, offset=cell.offset,
                                                 access_shape=cell.read))
        mult, shift = elementwise_mul_scale(Q0_15, Q0_15, cell_scale)
        update = elementwise_op("Mul", f"{prefix}_ci_mul", cell_gate, input_gate, tflite_op=TFLITE_OP,
                                quantization=cell_q, attrs=(("explicit_scaling", (False, (shift,), (mult,))),))
        clip = self.cell_clip
        if self.ctx.default_core:
            # the default core adds, then clamps into the state in a pass of its own
            add = elementwise_op("Add", f"{prefix}_add", forget.ofm.tensor, update.ofm.tensor, tflite_op=TFLITE_OP,
                                 quantization=cell_q, attrs=(("explicit_scaling", (False, (0,), (1,))),))
            clamp = self.copy_op(f"{prefix}_clamp", add.ofm.tensor, "Clip" if clip else None,
                                 (-clip, clip) if clip else None)
            clamp = self.write_state(clamp, self.cell_state, batch)
            self.ops.extend((forget, update, add, clamp))
            return clamp.ofm.tensor
        add = elementwise_op(
            "Add", f"{prefix}_add", forget.ofm.tensor, update.ofm.tensor, tflite_op=TFLITE_OP, quantization=cell_q,
            activation="Clip" if clip else None, activation_min=-clip if clip else None,
            activation_max=clip if clip else None, attrs=(("explicit_scaling", (False, (0,), (1,))),))
        add = self.write_state(add, self.cell_state, batch)
        self.ops.extend((forget, update, add))
        return add.ofm.tensor

    def output_update(self, time: int, batch: int, cell: _Operand, output_gate: FeatureMap) -> FeatureMap:
        prefix = f"output_state#{batch}.{time}"
        tanh_name = f"{prefix}_tanh"
        squashed = self.ctx.new_feature_map(f"{tanh_name}_tens0", cell.fm.orig_shape or cell.fm.shape, cell.fm.dtype,
                                            Quantization(scale=(Q0_15,), zero_point=(0,)))
        tanh = pool_op("AvgPool", tanh_name, cell.fm, squashed, tflite_op=TFLITE_OP, kernel=Kernel(valid_padding=True),
                       activation="Tanh", ifm_shape=cell.shape, ifm_offset=cell.offset, ifm_read_shape=cell.read)
        hidden = self.hidden_quantization
        if hidden is not None and hidden.scale:
            mult, shift = elementwise_mul_scale(Q0_15, Q0_15, _scale(hidden))
            scaling = (False, (shift,), (mult,))
        else:
            scaling = None  # the operator's intermediates could not be read
        mul = elementwise_op("Mul", f"{prefix}_mul", squashed, output_gate, tflite_op=TFLITE_OP,
                             quantization=self.output_state.quantization, dtype=self.ifm.dtype,
                             attrs=(("explicit_scaling", scaling),))
        mul = self.write_state(mul, self.output_state, batch)
        self.ops.extend((tanh, mul))
        return mul.ofm.tensor

    def put_output(self, time: int, batch: int, state: FeatureMap) -> None:
        """Copy the step's output state into its slot of the operator's output (a ConcatSliceWrite AvgPool)."""
        name = f"{self.ofm_name}#{batch}.{time}"
        if self.time_major:
            offset, ifm_shape, ifm_offset, ifm_read = Shape4D(0, time, 0, 0), state.shape, None, None
        else:
            offset, ifm_shape = Shape4D(0, batch, time, 0), self.output_state.shape
            ifm_offset, ifm_read = Shape4D(0, 0, batch, 0), state.shape
        self.ops.append(pool_op(
            "AvgPool", name, state, self.ofm, tflite_op=TFLITE_OP, kernel=Kernel(valid_padding=True),
            ifm_shape=ifm_shape, ifm_offset=ifm_offset, ifm_read_shape=ifm_read, ofm_shape=self.ofm.shape,
            ofm_offset=offset, ofm_write_shape=state.shape, attrs=(("memory_function", "ConcatSliceWrite"),)))

    def unroll(self) -> list[NpuOp]:
        for batch in range(1 if self.time_major else self.n_batch):
            output_state: FeatureMap = self.output_state
            output_name = self.output_state_name if self.time_major else f"{self.output_state_name}_state#{batch}"
            cell_state: FeatureMap = self.cell_state
            for time in range(self.n_time):
                first = time == 0
                copied = first and self.ctx.default_core and batch == 0
                if copied:  # the default core reads each state variable through a copy of it
                    output_state = self.copy(f"{self.output_state_name}_copy", output_state)
                feature = self.feature(time, batch)
                state = self.state_operand(output_state, output_name, batch, first)
                gates = {g: self.gate(g, time, batch, feature, state) for g in ("input", "forget", "cell")}
                if copied:
                    cell_state = self.copy(f"{cell_state.name}_copy", cell_state)
                cell = self.state_operand(cell_state, cell_state.name, batch, first)
                cell_state = self.cell_update(time, batch, cell, gates["input"], gates["forget"], gates["cell"])
                output_gate = self.gate("output", time, batch, feature, state)
                new_cell = self.state_operand(cell_state, cell_state.name, batch, False)
                output_state = self.output_update(time, batch, new_cell, output_gate)
                output_name = output_state.name
                self.put_output(time, batch, output_state)
        return self.ops


def _fc_shapes(rows: int, n_in: int, n_out: int) -> tuple[Shape4D, Shape4D]:
    """IFM and OFM views Vela gives a fully connected pass over a 2-D [rows, n] operand."""
    if rows <= 1:
        return _shape4(rows, 1, 1, n_in), _shape4(rows, 1, 1, n_out)
    h, w = BATCH_SPLITS.get(rows, (1, rows))
    return Shape4D(1, h, w, n_in), Shape4D(1, h, w, n_out)


def _tag_intermediates(ops: list[NpuOp], keep: set[FeatureMap], uid: int) -> list[NpuOp]:
    """Give the tensors this unrolling made their own ``uid``: Vela does not make their names unique, so two
    LSTMs of one model both have e.g. ``cell_state#0.0_add_tens0`` (different tensors with equal fields)."""
    mapping: dict[FeatureMap, FeatureMap] = {}

    def tagged(fm: FeatureMap) -> FeatureMap:
        if fm.is_const or fm in keep or fm.uid != -1:
            return fm
        if fm not in mapping:
            mapping[fm] = replace(fm, uid=uid)
        return mapping[fm]

    def retag(access):
        return None if access is None else replace(access, tensor=tagged(access.tensor))

    return [replace(o, ifm=retag(o.ifm), ifm2=retag(o.ifm2), ofm=retag(o.ofm)) for o in ops]


def lower_lstm(op, ifm: FeatureMap, ofm: FeatureMap, ctx: LoweringContext) -> list[NpuOp]:
    """The NPU passes of one UNIDIRECTIONAL_SEQUENCE_LSTM, in Vela's creation order."""
    builder = _LstmBuilder(op, ifm, ofm, ctx)
    ops = builder.unroll()
    keep = {ifm, ofm, builder.output_state, builder.cell_state}
    # Negative like every synthesised uid, distinct per LSTM operator.
    return _tag_intermediates(ops, keep, -2 - int(op.index))
