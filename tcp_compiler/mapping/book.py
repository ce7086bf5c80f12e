"""RNGD's recipe book as the generic compiler reaches it (tcp_compiler.recipes.Recipes): the
entries the RNGD Target names this module for, each from the module that owns it. Generic code
imports none of them; it calls `recipes(spec).<entry>`, so a second target offers the same names."""

from tcp_compiler.mapping.attention import plan_attention, rewrite_attention
from tcp_compiler.mapping.capacity import Capacity, capacity, capacity_error, check_capacity
from tcp_compiler.mapping.layer_period import layer_period, stand_in
from tcp_compiler.mapping.policy import DEFAULT_POLICY
from tcp_compiler.mapping.replicate import replicate
from tcp_compiler.mapping.schedule import schedule
from tcp_compiler.mapping.stage_chain import SENT, chain, chain_block, handoffs, in_turn, micro_batched
from tcp_compiler.mapping.steps import DecodeSteps, resize_graph

__all__ = [
    "DEFAULT_POLICY", "SENT", "Capacity", "DecodeSteps", "capacity", "capacity_error", "chain", "chain_block",
    "check_capacity", "handoffs", "in_turn", "layer_period", "micro_batched", "plan_attention", "replicate",
    "resize_graph", "rewrite_attention", "schedule", "stand_in",
]  # fmt: skip
