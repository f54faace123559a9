"""tilejit's target plugins: `cpu`, `gpu`, `kunlun` (`python -m targets` lists them)."""

__tilejit__ = True   # tells tilejit's packages from others of the same name (compiler/names.py)
