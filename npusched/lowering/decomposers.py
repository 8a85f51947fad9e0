"""Operators the NPU runs as a sequence of simpler passes, and the function that builds those passes: one table
for the graph optimiser (which operators to decompose) and the lowering (how)."""

from __future__ import annotations

from npusched.lowering.batch_matmul import lower_batch_matmul
from npusched.lowering.lstm import lower_lstm
from npusched.lowering.mean import lower_mean
from npusched.lowering.softmax import lower_softmax
from npusched.lowering.squared_difference import lower_squared_difference
from npusched.lowering.transpose import lower_transpose

DECOMPOSERS = {"Softmax": lower_softmax, "Mean": lower_mean, "UnidirectionalSequenceLstm": lower_lstm,
               "SquaredDifference": lower_squared_difference, "Transpose": lower_transpose,
               "BatchMatMul": lower_batch_matmul}
