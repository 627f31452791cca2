"""hf_moe_train.py's tiny biased Mixtral trained by a loop that logs its own loss to a
dashboard, as users do: nothing in it knows about moescope.

usage: hf_moe_dashboard_train.py tensorboard|wandb BASE_DIR STEPS
tensorboard: a SummaryWriter in BASE_DIR/<pid> (one run per process, like SummaryWriter's
default runs/<time>_<host>), loss at global step 10 * step. wandb: an offline run in BASE_DIR,
loss at step 10 * step, finished at the end.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_moe_train  # noqa: E402

import transformers  # noqa: E402


def main():
    dashboard, base, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_config(hf_moe_train.tiny_config("mixtral"))
    router = hf_moe_train.router_of(model.model.layers[hf_moe_train.HOT_LAYER])

    def biased(module, args):
        row = module.weight[hf_moe_train.HOT_EXPERT].detach()
        return (args[0] + 20.0 * row / row.square().sum(),) + args[1:]

    router.register_forward_pre_hook(biased)
    if dashboard == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(log_dir=os.path.join(base, str(os.getpid())))
        log = lambda loss, step: writer.add_scalar("loss", loss, global_step=step)  # noqa: E731
    else:
        import wandb
        run = wandb.init(mode="offline", dir=base, project="moescope-test")
        log = lambda loss, step: run.log({"loss": loss}, step=step)  # noqa: E731
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        tokens = torch.randint(0, 128, (4, 32), generator=generator)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        log(loss.item(), 10 * step)
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    if dashboard == "tensorboard":
        writer.close()
    else:
        run.finish()


if __name__ == "__main__":
    main()
