"""The schedule document read back (format npusched.schedule/2, docs/guide/schedule-format.md; /1 documents too).

The document records every choice per NPU pass and the recipe of the graph scheduled; the reader rebuilds each
pass's block config and weight encoding from them on the lowered network of the same model and hardware, so
re-evaluating the schedule gives the figures the document reports. Anything that does not fit the network is bad
input: a ``ScheduleError`` naming the op. ``npusched.io.report_json`` writes the document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npusched.errors import ConfigError, ScheduleError
from npusched.frontend.normalise import Site
from npusched.frontend.recipe import GraphRecipe
from npusched.ir import MemArea, NpuOp, Shape4D, TensorFormat
from npusched.run import SiteDecision
from npusched.schedule.schedule import EncodedWeightsRef, OpSchedule, Schedule, TensorPlacement, WeightBuffering
from npusched.target.block_config import op_block_inputs, try_block_config
from npusched.target.weights import encode_op_weights

FORMAT = "npusched.schedule/2"
# Documents of the first format (no recipe: the graph is rebuilt from the solver and the sites left out) still read.
READABLE_FORMATS = ("npusched.schedule/1", FORMAT)


def load_document(path: Path) -> dict[str, Any]:
    """The document at ``path``, checked to be a schedule document with a schedule in it."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScheduleError(f"{path}: cannot read the schedule document ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScheduleError(f"{path}: cannot read the schedule document ({exc})") from None
    if not isinstance(document, dict) or document.get("format") not in READABLE_FORMATS:
        raise ScheduleError(f"{path}: not a {FORMAT} document")
    if document.get("solver") is None:
        raise ScheduleError(f"{path}: the document holds no schedule (it was made without a solver)")
    return document


def read_schedule(document: dict[str, Any], network: Any, arch: Any) -> Schedule:
    """The schedule a document describes, on ``network`` lowered for ``arch`` (the document's model and
    hardware)."""
    records = {record.get("op_index"): record for record in document.get("ops", ())}
    ops: list[OpSchedule] = []
    tensors: dict[Any, TensorPlacement] = {}
    try:
        for op in network.npu_ops:
            record = records.get(op.index)
            if record is None or record.get("placement") != "npu" or record.get("op_type") != op.op_type:
                raise ScheduleError(f"op {op.index} '{op.name}': the document has no {op.op_type} pass there; was it "
                                    "made for another model or configuration?")
            ops.append(_op_schedule(op, record, arch))
            for role, place in record["placements"].items():
                access = getattr(op, role)
                if access is not None:
                    tensors[access.tensor] = TensorPlacement(MemArea(place["mem_area"]), TensorFormat(place["format"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ScheduleError(f"the schedule document is incomplete or malformed ({type(exc).__name__}: {exc})"
                            ) from None
    return Schedule(ops=tuple(ops), tensors=tuple(tensors.items()), label=document.get("label") or "",
                    status=document.get("status", ""), solver=document.get("solver", ""))


def _shape(values: list[int] | None) -> Shape4D | None:
    return None if values is None else Shape4D(*values)


def _op_schedule(op: NpuOp, record: dict[str, Any], arch: Any) -> OpSchedule:
    ofm_stripe, ifm_stripe = Shape4D(*record["ofm_stripe"]), Shape4D(*record["ifm_stripe"])
    ifm2_stripe = _shape(record.get("ifm2_stripe"))
    height, width, _, depth = record["block_config"]
    block = try_block_config(Shape4D(1, height, width, depth), arch, ofm_shape=ofm_stripe, ifm_shape=ifm_stripe,
                             ifm2_shape=ifm2_stripe, is_partkernel=record["block_config_part_kernel"],
                             **op_block_inputs(op))
    if block is None or block.old_style() != record["block_config"]:
        raise ScheduleError(f"op {op.index} '{op.name}': block config {record['block_config']} does not fit it")
    weights = record["weight_buffering"]
    slices = tuple(weights["depth_slices"])
    buffering = WeightBuffering()
    if weights["kind"] != "none":
        buffering = WeightBuffering(kind=weights["kind"], depth_slices=slices,
                                    buffer_sizes=tuple(weights["buffer_bytes"]), pre_buffered=weights["pre_buffered"])
    encoded = encode_op_weights(arch, op, block.ofm_block.depth, slices) if op.weights is not None else None
    window = record["prefetch_window"]
    return OpSchedule(
        op_index=op.index, block_config=block, ofm_stripe=ofm_stripe, ifm_stripe=ifm_stripe, ifm2_stripe=ifm2_stripe,
        cascade=record["cascade"], weight_buffering=buffering,
        encoded_weights=EncodedWeightsRef.of(encoded, block.ofm_block.depth) if encoded is not None else None,
        rolling_buffer=_shape(record["rolling_buffer"]), tail_slack_cycles=window["tail_slack_cycles"],
        slack_ofm_depth=window["slack_ofm_depth"])


def site_decisions(document: dict[str, Any]) -> tuple[SiteDecision, ...]:
    """The priced rewrite sites of the run that wrote ``document``, applied or left out of its graph."""
    sites = document.get("sites", [])
    out = []
    for site in sites if isinstance(sites, list) else []:
        if isinstance(site, dict) and ":" in str(site.get("site")):
            rewrite, tensor = str(site["site"]).split(":", 1)
            out.append(SiteDecision(Site(rewrite, tensor), bool(site.get("applied")), str(site.get("reason", ""))))
    return tuple(out)


def stored_recipe(document: dict[str, Any], path: Path) -> GraphRecipe | None:
    """The recipe of the graph the document's schedule is of (None: a first-format document, which has none)."""
    if "recipe" not in document:
        return None
    try:
        return GraphRecipe.from_json(document["recipe"])
    except ConfigError as exc:
        raise ScheduleError(f"{path}: {exc}") from None
