# Calibration of the CPU recipe (`halfgrad-unet3d --config cpu`) with PyTorch on the CPU:
# the same U-Net (at a chosen width), trained on random patches (foreground-centred with probability
# FG), AdamW with warm-up + cosine, validated on whole padded volumes (48x64x48) every epoch.
#   /usr/bin/python3 tools/recipe/torch_cpu_recipe.py [--width 8 --patch 32 --batch 4 --lr 3e-3 --epochs 12 --spe 160]
# Prints Dice of classes 1 and 2 per epoch and the time. Used to choose the recipe, not by CI.
import argparse, os, sys, time, json, numpy as np, torch
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, '../../../shared/reference'))
from torch_unet_step import UNet3D, loss_fn
from torch_hippo_train import load, dice

ap = argparse.ArgumentParser()
ap.add_argument('--width', type=int, default=8); ap.add_argument('--patch', type=int, nargs=3, default=[32, 32, 32])
ap.add_argument('--batch', type=int, default=4); ap.add_argument('--lr', type=float, default=3e-3)
ap.add_argument('--epochs', type=int, default=12); ap.add_argument('--spe', type=int, default=160)
ap.add_argument('--fg', type=float, default=0.67); ap.add_argument('--threads', type=int, default=2)
ap.add_argument('--warmup', type=float, default=1.0)
ap.add_argument('--flip', type=int, nargs='*', default=[2], help='axes (0=z,1=y,2=x) flipped at random')
ap.add_argument('--norm', default='batch', choices=['batch', 'instance'])
a = ap.parse_args()
if a.norm == 'instance':
    import torch_unet_step
    torch_unet_step.nn.BatchNorm3d = lambda c: torch.nn.InstanceNorm3d(c, affine=True)
torch.set_num_threads(a.threads); torch.manual_seed(0); rng = np.random.default_rng(0)
X, Y = load(os.path.join(here, '../../../shared/data/hippocampus'))
va = torch.arange(len(X)) % 5 == 4
Xtr, Ytr, Xva, Yva = X[~va], Y[~va], X[va], Y[va]
w = a.width
m = UNet3D(ch=(w, 2 * w, 4 * w, 8 * w), bott=16 * w)
opt = torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=1e-2)
steps = a.spe // a.batch; P = a.patch
fg = [torch.nonzero(y > 0) for y in Ytr]
def patch(i):
    x, y = Xtr[i, 0], Ytr[i]
    if rng.random() < a.fg and len(fg[i]):
        c = fg[i][rng.integers(len(fg[i]))].numpy()
    else:
        c = np.array([rng.integers(s) for s in x.shape])
    st = [int(min(max(c[d] - P[d] // 2, 0), x.shape[d] - P[d])) for d in range(3)]
    xs = x[st[0]:st[0] + P[0], st[1]:st[1] + P[1], st[2]:st[2] + P[2]]
    ys = y[st[0]:st[0] + P[0], st[1]:st[1] + P[1], st[2]:st[2] + P[2]]
    for d in a.flip:
        if rng.random() < 0.5: xs = xs.flip(d); ys = ys.flip(d)
    return xs, ys
def lr_at(e):
    if e < a.warmup: return a.lr * (0.1 + 0.9 * e / a.warmup)
    t = min(1.0, (e - a.warmup) / max(1.0, a.epochs - a.warmup)); lo = a.lr / 20
    return lo + 0.5 * (a.lr - lo) * (1 + np.cos(np.pi * t))
t0 = time.time()
for ep in range(a.epochs):
    m.train(); ls = []
    for s in range(steps):
        for g in opt.param_groups: g['lr'] = lr_at(ep + s / steps)
        b = [patch(int(rng.integers(len(Xtr)))) for _ in range(a.batch)]
        x = torch.stack([p[0] for p in b])[:, None]; y = torch.stack([p[1] for p in b])
        opt.zero_grad(); l = loss_fn(m(x), y); l.backward(); opt.step(); ls.append(l.item())
    m.eval(); preds = []
    with torch.no_grad():
        for i in range(0, len(Xva), 8): preds.append(m(Xva[i:i + 8]).argmax(1))
    d = dice(torch.cat(preds), Yva)
    m.train(); pt = []
    with torch.no_grad():
        for i in range(0, len(Xva), 8): pt.append(m(Xva[i:i + 8]).argmax(1))
    dt = dice(torch.cat(pt), Yva)
    hist = torch.bincount(torch.cat(preds).flatten(), minlength=3).tolist()
    print(json.dumps(dict(epoch=ep + 1, loss=round(float(np.mean(ls)), 4), dice=[round(v, 4) for v in d], pred_hist=hist, dice_batchstats=[round(v, 4) for v in dt], t=round(time.time() - t0, 1))), flush=True)
