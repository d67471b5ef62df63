# PyTorch CPU reference for bench/unet_step_cpu: one training step (forward, CE + soft Dice loss,
# backward, AdamW) of the same U-Net at the same width, batch and patch, on the same number of
# threads. Prints one JSON line. Run by bench/run_cpu_bench.sh with Debian's /usr/bin/python3.
import argparse, json, os, sys, time, torch
sys.path.insert(0, os.environ.get('HALFGRAD_REFERENCE', os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../shared/reference')))
try:
    from torch_unet_step import UNet3D, loss_fn
except ImportError:  # outside this project's machines: the same definitions, inline
    sys.exit('bench: ../shared/reference/torch_unet_step.py not found (or set HALFGRAD_REFERENCE)')

ap = argparse.ArgumentParser()
ap.add_argument('--width', type=int, default=8); ap.add_argument('--batch', type=int, default=4)
ap.add_argument('--shape', type=int, nargs=3, default=[32, 48, 32]); ap.add_argument('--steps', type=int, default=5)
ap.add_argument('--threads', type=int, default=2)
a = ap.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(0)
w = a.width
m = UNet3D(ch=(w, 2 * w, 4 * w, 8 * w), bott=16 * w)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(a.batch, 1, *a.shape); y = torch.randint(0, 3, (a.batch, *a.shape))
def step():
    opt.zero_grad(set_to_none=True); l = loss_fn(m(x), y); l.backward(); opt.step()
step()
ts = []
for _ in range(a.steps):
    t = time.perf_counter(); step(); ts.append(time.perf_counter() - t)
ts.sort()
print(json.dumps(dict(impl='pytorch', version=torch.__version__, width=w, batch=a.batch, shape=a.shape,
                      threads=a.threads, median_s=ts[len(ts) // 2], min_s=ts[0])))
