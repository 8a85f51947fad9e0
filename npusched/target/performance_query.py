"""What the estimators are asked about one NPU pass (Vela's ``PerformanceQuery``), and the query a scheduled pass
makes: its shapes, element widths, formats and memory areas (``npusched.target.performance`` prices it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npusched.ir import Kernel, MemArea, NpuBlockType, NpuOp, Shape4D, TensorFormat

__all__ = ["MATMUL_PRODUCTS", "PerformanceQuery", "is_block_swap", "query_for_op"]

# The NpuOp attribute naming which operand ("ifm" or "ofm") of a BATCH_MATMUL column pass is its int32 product
# map (``npusched.lowering.batch_matmul``): the default core prices the column passes as its compound MatMul, whose
# product map is scratch (``npusched.target.performance_default``).
MATMUL_PRODUCTS = "matmul_products"


def is_block_swap(op: NpuOp) -> bool:
    """Whether ``op`` is a TRANSPOSE run as Vela legacy runs it: a 1x1 AvgPool writing its OFM with H and W strides
    swapped (``npusched.lowering.rewrites_shape``). The default core runs the same TRANSPOSE as its own Transpose
    (``PerformanceQuery.block_swap``)."""
    return op.op_type == "AvgPool" and op.attr("original_type") == "Transpose"


@dataclass(frozen=True)
class PerformanceQuery:
    """Everything the estimator needs to know about one pass (Vela's ``PerformanceQuery``).

    Shapes are the full shapes the pass reads and writes (``ifm_read_shape``/``ofm_write_shape``), or a sub-volume
    when the scheduler prices part of a pass. ``const_shape`` is set (to ``[1, 1, 1, ofm depth]``) only when the pass
    has a bias/scale tensor; ``const_memory_area`` is where those constants are read from. ``config`` is a
    ``BlockConfig`` (anything with ``ofm_block``, ``ifm_block``, ``acc_type`` and ``is_partkernel``).
    """

    npu_block_type: NpuBlockType
    ifm_shape: Shape4D
    ofm_shape: Shape4D
    config: Any
    ifm_bits: int = 8
    ofm_bits: int = 8
    ifm_format: TensorFormat = TensorFormat.NHWC
    ofm_format: TensorFormat = TensorFormat.NHWC
    ifm_memory_area: MemArea = MemArea.Sram
    ofm_memory_area: MemArea = MemArea.Sram
    ifm2_shape: Shape4D | None = None
    ifm2_bits: int = 0
    ifm2_format: TensorFormat = TensorFormat.NHWC
    ifm2_memory_area: MemArea | None = None
    const_shape: Shape4D | None = None
    const_memory_area: MemArea | None = None
    kernel: Kernel = Kernel()
    # "ifm" / "ofm": that operand is the int32 product map of a BATCH_MATMUL column (``MATMUL_PRODUCTS``)
    matmul_products: str | None = None
    # The pass is a TRANSPOSE Vela legacy runs as a 1x1 AvgPool writing swapped strides (``is_block_swap``): the
    # default core prices it as its own Transpose of the same tensors (``npusched.target.performance_default``).
    block_swap: bool = False

    @property
    def has_bias(self) -> bool:
        return self.const_shape is not None and self.const_shape.depth > 0


def query_for_op(
    op: NpuOp,
    config: Any,
    *,
    ifm_format: TensorFormat = TensorFormat.NHWC,
    ofm_format: TensorFormat = TensorFormat.NHWC,
    ifm2_format: TensorFormat = TensorFormat.NHWC,
    ifm_area: MemArea = MemArea.Sram,
    ofm_area: MemArea = MemArea.Sram,
    ifm2_area: MemArea | None = None,
    const_area: MemArea | None = None,
    ofm_depth: int | None = None,
) -> PerformanceQuery:
    """The query Vela builds for a scheduled pass: the shapes it reads and writes (slices included), element
    widths from the tensors, a bias/scale stream sized by the OFM depth when the op has one.

    ``ofm_depth`` prices only the first channels of the OFM (the scheduler does this for weight slices).
    Formats and memory areas are schedule decisions, so the caller passes them.
    """
    ofm_shape = op.ofm.effective_shape
    if ofm_depth is not None:
        ofm_shape = ofm_shape.with_depth(ofm_depth)
    ifm2 = op.ifm2
    has_bias = op.bias is not None
    return PerformanceQuery(
        npu_block_type=op.npu_block_type,
        ifm_shape=op.ifm.effective_shape,
        ofm_shape=ofm_shape,
        config=config,
        ifm_bits=op.ifm.tensor.dtype.size_in_bits,
        ofm_bits=op.ofm.tensor.dtype.size_in_bits,
        ifm_format=ifm_format,
        ofm_format=ofm_format,
        ifm_memory_area=ifm_area,
        ofm_memory_area=ofm_area,
        ifm2_shape=ifm2.effective_shape if ifm2 is not None else None,
        ifm2_bits=ifm2.tensor.dtype.size_in_bits if ifm2 is not None else 0,
        ifm2_format=ifm2_format,
        ifm2_memory_area=(ifm2_area or ifm_area) if ifm2 is not None else None,
        const_shape=Shape4D(1, 1, 1, op.ofm.shape.depth) if has_bias else None,
        const_memory_area=const_area if has_bias else None,
        kernel=op.kernel,
        matmul_products=op.attr(MATMUL_PRODUCTS),  # type: ignore[arg-type]
        block_swap=is_block_swap(op),
    )
