"""One einsum on one chip: the notation (`einsum`), a layer (`layer`: an einsum with
operand roles and logical axes), `Cost`, the roofline (`roofline`), tiles (`tiling`),
the achievable rates (`achievable`) and the realistic prediction (`predict`).
docs/architecture.md."""
