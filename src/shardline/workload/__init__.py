"""A model as einsum layers: the Workload type and the built-in templates, a model's
numbers (`modelspec`), mixture of experts (`moe`, `dense_first`), attention variants
(`attention`), per-tensor precision (`precision`) and a whole model on one
device (`stack`). docs/architecture.md."""
