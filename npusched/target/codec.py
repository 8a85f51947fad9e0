"""The Ethos-U weight codec (``ethosu.mlw_codec``), its streams remembered within a process.

A run encodes each op's weights while it schedules (the encoded sizes decide buffering), and with --output-dir
Vela's backend encodes the chosen streams again: on a network with megabytes of weights that second encoding is a
sixth of the compile. Both go through ``reorder_encode`` here (the backend points Vela's weight compressor at it
for the compile), so the second is a look-up of the very bytes the codec returned for the same arguments.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np
from ethosu import mlw_codec

# Streams kept, least recently used dropped first: a 700-pass network with 10 MB of weights and several slicings
# of each op stays within it.
MEMO_LIMIT_BYTES = 128 * 2**20

_memo: OrderedDict[tuple[object, ...], tuple[bytes, int]] = OrderedDict()
_memo_bytes = 0


def reorder_encode(ifm_ublock_depth: int, ofm_ublock_depth: int, weights: np.ndarray, ofm_block_depth: int,
                   is_depthwise: bool, is_partkernel: bool, ifm_bitdepth: int, decomp_h: int, decomp_w: int
                   ) -> tuple[bytearray, int]:
    """``mlw_codec.reorder_encode`` (same arguments, same result: a fresh bytearray of the encoded stream and the
    unencoded size), remembered by the arguments and the weights' contents."""
    global _memo_bytes
    key = (hashlib.blake2b(weights.tobytes(), digest_size=16).digest(), weights.shape, weights.dtype.str,
           ifm_ublock_depth, ofm_ublock_depth, ofm_block_depth, is_depthwise, is_partkernel, ifm_bitdepth,
           decomp_h, decomp_w)
    known = _memo.get(key)
    if known is not None:
        _memo.move_to_end(key)
        return bytearray(known[0]), known[1]
    stream, unencoded = mlw_codec.reorder_encode(ifm_ublock_depth, ofm_ublock_depth, weights, ofm_block_depth,
                                                 is_depthwise, is_partkernel, ifm_bitdepth, decomp_h, decomp_w)
    _memo[key] = (bytes(stream), int(unencoded))
    _memo_bytes += len(stream)
    while _memo_bytes > MEMO_LIMIT_BYTES and len(_memo) > 1:
        _, (dropped, _) = _memo.popitem(last=False)
        _memo_bytes -= len(dropped)
    return bytearray(stream), int(unencoded)


def remembered_streams() -> dict[tuple[object, ...], tuple[bytes, int]]:
    """The memo's streams, to hand to another process that compiles the same network."""
    return dict(_memo)


def remember_streams(streams: dict[tuple[object, ...], tuple[bytes, int]]) -> None:
    """Add ``streams`` (from :func:`remembered_streams` of another process) to this process's memo."""
    global _memo_bytes
    for key, value in streams.items():
        if key not in _memo:
            _memo[key] = value
            _memo_bytes += len(value[0])
