"""RNGD's recipe book as the generic compiler reaches it (tcp_compiler.recipes.Recipes): the
entries the RNGD Target names this module for, each from the module that owns it. Generic code
imports none of them; it calls `recipes(spec).<entry>`, so a second target offers the same names."""

from simulator.targets.rngd.mapping.attention import plan_attention, rewrite_attention
from simulator.targets.rngd.mapping.capacity import Capacity, capacity, capacity_error, check_capacity
from simulator.targets.rngd.mapping.layer_period import layer_period, stand_in
from simulator.targets.rngd.mapping.policy import DEFAULT_POLICY
from simulator.targets.rngd.mapping.replicate import replicate
from simulator.targets.rngd.mapping.scan_chunks import plan_scans, rewrite_scans
from simulator.targets.rngd.mapping.schedule import plan_token_tiles, schedule
from simulator.targets.rngd.mapping.stage_chain import (
    SENT,
    chain,
    chain_block,
    handoffs,
    in_turn,
    micro_batched,
)
from simulator.targets.rngd.mapping.steps import DecodeSteps, resize_graph

__all__ = [
    "DEFAULT_POLICY", "SENT", "Capacity", "DecodeSteps", "capacity", "capacity_error", "chain", "chain_block",
    "check_capacity", "handoffs", "in_turn", "layer_period", "micro_batched", "plan_attention", "plan_scans",
    "plan_token_tiles", "replicate", "resize_graph", "rewrite_attention", "rewrite_scans", "schedule",
    "stand_in",
]  # fmt: skip
