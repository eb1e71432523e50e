"""The plan search and evaluation behind `shardline.plan` (see planning/api.py)."""
