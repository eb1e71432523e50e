"""The shared vocabulary, the innermost layer after `errors`: SI units and their parsing
(`units`), dtype widths (`dtypes`), the closed vocabularies (`kinds`), JSON-ready values
(`serialize`) and the option groups (`options`). docs/architecture.md."""
