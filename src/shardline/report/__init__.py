"""Rendering edges: terminal text, Markdown explanations, tables, plots, HTML."""
