"""Offline tuning on Kunlun without a chip: the LM footprint of a library op's config, from the
renderer itself (footprint.py), and a labelled cost-model estimate of its time (cost_model.py)."""
