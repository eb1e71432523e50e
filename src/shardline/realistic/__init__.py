"""The realistic whole-model time: every op priced at achievable rates and summed.

- `kernels`: one kernel's time (launch rule, memory-bound kernels, GEMMs through the per-op
  prediction of `shardline.ops.predict`, the fused attention kernel);
- `block`: the memory-bound ops between a transformer block's matmuls (norms, activations,
  rotary, softmax and dropout, residual adds), the embedding, the LM head's loss, the optimizer;
- `activations`: activation memory per layer (Korthikanti et al. 2022);
- `flops`: model FLOPs for MFU and hardware FLOPs for HFU.

Pure: no printing, no files.
"""
