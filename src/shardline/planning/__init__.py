"""The plan search and evaluation behind `shardline.plan` (see plan.py)."""
