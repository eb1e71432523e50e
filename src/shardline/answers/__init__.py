"""Single-device answers built on ops: batch curves (`curves`), the variants of one einsum
(`variants`), what-if (`whatif`), the sheet model (`sheet_model`) and the cheat sheet
(`cheatsheet`). docs/architecture.md."""
