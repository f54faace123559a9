"""The Tile IR: typed SSA values with static shapes, ops from one registry, structured loops."""
from .core import Block, Function, Loc, Op, Param, TileType, Value, walk_block
from .ops import OPS, OpDef, TypeRuleError, infer
from .printer import print_function, structural_hash
from .verifier import verify

__all__ = ["Block", "Function", "Loc", "Op", "Param", "TileType", "Value", "walk_block", "OPS", "OpDef",
           "TypeRuleError", "infer", "print_function", "structural_hash", "verify"]
