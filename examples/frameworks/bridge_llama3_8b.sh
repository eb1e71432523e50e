# A Megatron-Bridge recipe (llama3_8b_pretrain_config) with its overrides: the layout, batch,
# sequence, precision and recompute named as Megatron-Bridge names them (ConfigContainer fields)
python examples/recipes/llama/pretrain_llama3_8b.py \
  model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=1 \
  model.context_parallel_size=1 model.sequence_parallel=true \
  train.micro_batch_size=1 train.global_batch_size=128 model.seq_length=8192 \
  mixed_precision=bf16_mixed ddp.use_distributed_optimizer=true \
  model.recompute_granularity=selective \
  checkpoint.save=/ckpt logger.log_interval=10 optimizer.lr=3e-4
