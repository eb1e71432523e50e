#!/bin/bash
# The 1.7B GPT of Megatron-LM's weak-scaling table (NVIDIA/Megatron-LM README.md, commit d98e8a64,
# "Performance Benchmarking", images/model_table.png row 1.7B: 24 layers, hidden 2048, 16 heads,
# TP 1, PP 1, 48 GPUs, batch 192; vocabulary 131,072 and sequence 4,096 from the README's
# "Benchmark Configuration"), as the arguments of pretrain_gpt.py; the run of
# benchmarks/data/e2e_runs.toml "megatron-lm-gpt-1.7b-h100-48gpu" (distributed optimizer, which
# --overlap-param-gather needs; micro-batch 1; bf16).
GBS=192
torchrun --nproc_per_node 8 --nnodes 6 pretrain_gpt.py \
    --num-layers 24 \
    --hidden-size 2048 \
    --num-attention-heads 16 \
    --seq-length 4096 \
    --max-position-embeddings 4096 \
    --vocab-size 131072 \
    --untie-embeddings-and-output-weights \
    --tensor-model-parallel-size 1 \
    --pipeline-model-parallel-size 1 \
    --micro-batch-size 1 \
    --global-batch-size ${GBS} \
    --bf16 \
    --use-distributed-optimizer \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --lr 1.5e-4 --min-lr 1.0e-5 --lr-decay-style cosine \
    --data-path ${DATA_PATH} --split 99,1,0 \
    --log-interval 10 --eval-iters 0
