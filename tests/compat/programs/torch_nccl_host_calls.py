"""NCCL through torch, no GPU needed: the wheel's libnccl answers these on the CPU."""
import torch
import torch.cuda.nccl as nccl

print(len(nccl.unique_id()))
print(nccl.version())
