"""Request-level serving: continuous batching with a KV-cache budget, chunked or separate
prefill, prefix caching, speculative decoding and disaggregated prefill/decode pools, as an
analytic steady state (`analytic`) checked by a small event simulation (`simulate`), on top of
the plan engine's step times (`steptimes`). docs/serving.md."""
