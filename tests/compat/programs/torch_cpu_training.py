"""PyTorch CPU training as users write it: a model, autograd, an optimizer, a data loop."""
import torch

torch.manual_seed(0)
torch.set_num_threads(2)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
inputs = torch.randn(256, 32)
targets = torch.randint(0, 4, (256,))
for step in range(30):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    if step % 10 == 0 or step == 29:
        print(f"step {step} loss {loss.item():.5f}")
