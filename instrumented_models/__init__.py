"""Reference training runs whose overlap behaviour is known: ddp, fsdp2, tp, pp, fsdp2_tp.

Run each as `torchrun --standalone --nproc-per-node 2 -m instrumented_models.NAME` (fsdp2_tp on 4);
CUDA+NCCL when GPUs exist, CPU+gloo otherwise, with no other difference in code.
"""
