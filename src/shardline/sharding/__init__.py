"""One einsum on a mesh: the mesh (`mesh`), the layout pricer (`layout`, `layout_rules`),
the sharding algebra (`algebra`) and the same pricing over numpy arrays (`compare`).
docs/architecture.md."""
