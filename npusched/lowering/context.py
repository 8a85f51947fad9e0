"""What a lowering function may look at while turning one TFLite operator into NPU passes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from npusched.ir import ConstTensor, DataType, FeatureMap, Quantization, Shape4D
from npusched.target.arch import ArchitectureFeatures

if TYPE_CHECKING:  # the reader's types, imported lazily so lowering stays importable on its own
    from npusched.frontend.tflite_reader import TfliteModel, TfliteSubgraph, TfliteTensor


_NO_QUANT = Quantization()


def feature_map_of_tensor(tensor: TfliteTensor, name: str | None = None) -> FeatureMap:
    """The FeatureMap for a TFLite tensor, with the 4-D shape Vela's Shape4D gives it."""
    shape = tuple(int(d) for d in tensor.shape)
    return FeatureMap(
        name=tensor.name if name is None else name,
        shape=Shape4D.from_list(list(shape)),
        dtype=tensor.dtype,
        quantization=tensor.quantization if tensor.quantization is not None else Quantization(),
        orig_shape=shape,
        uid=int(tensor.index),
    )


def const_tensor_of(name: str, values: Any, dtype: DataType, quantization: Quantization = _NO_QUANT,
                    shape: Sequence[int] | None = None) -> ConstTensor:
    """A ConstTensor whose numpy values are cast to ``dtype`` and reshaped to ``shape``."""
    np_dtype = {DataType.uint8: np.uint8, DataType.int8: np.int8, DataType.int16: np.int16,
                DataType.int32: np.int32, DataType.int64: np.int64, DataType.float32: np.float32,
                DataType.bool: np.bool_}.get(dtype, np.int64)
    arr = np.asarray(values)
    if shape is None:
        shape = arr.shape
    arr = np.array(arr, dtype=np_dtype).reshape(tuple(shape))
    arr.setflags(write=False)
    return ConstTensor(name=name, shape=tuple(int(d) for d in shape), dtype=dtype, quantization=quantization,
                       values=arr)


@dataclass(frozen=True)
class LoweringContext:
    """Read-only view of the model being lowered plus factories for the values a lowering creates.

    ``aliases`` maps a TFLite tensor index to the FeatureMap the rest of the lowered graph uses for it
    (memory-only ops such as RESHAPE make two TFLite tensors one buffer).
    """

    model: TfliteModel
    subgraph: TfliteSubgraph
    arch: ArchitectureFeatures | None = None
    aliases: Mapping[int, FeatureMap] = field(default_factory=dict)
    # the default core's graph (``lower_model``'s ``default_core``): decompositions follow that core's
    default_core: bool = False
    # a softmax's per-row arithmetic on a deeper view of its maps (``lower_model``'s ``deep_views``)
    deep_views: bool = False

    def tensor(self, index: int) -> TfliteTensor:
        return self.subgraph.tensors[index]

    def feature_map(self, index: int) -> FeatureMap:
        """The FeatureMap the lowered graph uses for TFLite tensor ``index``."""
        if index in self.aliases:
            return self.aliases[index]
        return feature_map_of_tensor(self.subgraph.tensors[index])

    def new_feature_map(self, name: str, shape: Shape4D | Sequence[int], dtype: DataType,
                        quantization: Quantization | None = None) -> FeatureMap:
        """An intermediate tensor a decomposition creates (Vela names these e.g. ``<op>_tens0``)."""
        if isinstance(shape, Shape4D):
            orig = tuple(shape.as_list())
            shape4 = shape
        else:
            orig = tuple(int(d) for d in shape)
            shape4 = Shape4D.from_list(list(orig))
        return FeatureMap(name=name, shape=shape4, dtype=dtype,
                          quantization=quantization if quantization is not None else Quantization(),
                          orig_shape=orig)

    def const_tensor(self, name: str, values: Any, dtype: DataType, quantization: Quantization = _NO_QUANT,
                     shape: Sequence[int] | None = None) -> ConstTensor:
        return const_tensor_of(name, values, dtype, quantization, shape)

    def const_operand(self, name: str, values: Any, dtype: DataType, quantization: Quantization = _NO_QUANT,
                      shape: Sequence[int] | None = None) -> FeatureMap:
        """A constant used as an elementwise operand: a FeatureMap carrying its ConstTensor."""
        const = const_tensor_of(name, values, dtype, quantization, shape)
        return FeatureMap(name=name, shape=Shape4D.from_list(list(const.shape)), dtype=dtype,
                          quantization=quantization, constant=const, orig_shape=const.shape)
