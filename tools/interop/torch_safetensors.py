#!/usr/bin/python3
"""PyTorch <-> halfgrad model.safetensors interop (issue 9), on the CPU.

  /usr/bin/python3 tools/interop/torch_safetensors.py --bin build/examples/halfgrad-unet3d \
      --data ../shared/data/hippocampus --work /tmp/interop [--halfgrad-epochs 30] [--torch-steps 150]

(a) halfgrad -> PyTorch: trains a U-Net with `halfgrad-unet3d train` (recipe tiny, FP32) on --data,
    loads its model.safetensors into the reference UNet3D (../shared/reference/torch_unet_step.py,
    widths from the file's metadata) with load_state_dict(strict=True), and compares PyTorch's Dice on
    every pair of --data (the reference's read_nii / prep / dice) with `halfgrad-unet3d eval`'s.
(b) PyTorch -> halfgrad: trains the reference UNet3D (at --torch-channels, default the cpu width
    8-16-32-64/128, so that a CPU trains it in minutes) for --torch-steps AdamW steps, writes its
    state_dict() as model.safetensors (no halfgrad metadata), evaluates it in PyTorch and with
    `halfgrad-unet3d eval` (which infers the architecture from the tensor names and shapes).
Each Dice pair must agree within --tol (0.005). Prints one JSON line of figures; exit status 1 when
a check fails.

safetensors: `safetensors.torch` when importable (pip's package, e.g. with PyTorch 2.x on the GPU
machine); otherwise the format is read and written here with json + numpy (Debian packages no
safetensors module): u64 little-endian header size N, N bytes of JSON, then the raw bytes.
"""
import argparse, json, os, struct, subprocess, sys, time
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.environ.get('HALFGRAD_REFERENCE', os.path.join(HERE, '..', '..', '..', 'shared', 'reference'))

try:
    import safetensors.torch as st_torch
except ImportError:
    st_torch = None

DTYPES = {'F32': (np.float32, torch.float32), 'F16': (np.float16, torch.float16),
          'F64': (np.float64, torch.float64), 'I64': (np.int64, torch.int64)}


def load_file(path):
    """(tensors, metadata) of a safetensors file."""
    if st_torch is not None:
        from safetensors import safe_open
        with safe_open(path, 'pt') as f:
            meta = f.metadata() or {}
        return st_torch.load_file(path), meta
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    header = json.loads(b[8:8 + n])
    meta = header.pop('__metadata__', {})
    out = {}
    for name, e in header.items():
        np_dt, _ = DTYPES[e['dtype']]
        lo, hi = e['data_offsets']
        a = np.frombuffer(b, np_dt, (hi - lo) // np.dtype(np_dt).itemsize, 8 + n + lo).reshape(e['shape'])
        out[name] = torch.from_numpy(a.copy())
    return out, meta


def save_file(tensors, path):
    if st_torch is not None:
        return st_torch.save_file(tensors, path)
    code = {v[1]: k for k, v in DTYPES.items()}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {'dtype': code[t.dtype], 'shape': list(t.shape), 'data_offsets': [off, off + len(raw)]}
        blobs.append(raw); off += len(raw)
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text))); f.write(text)
        for r in blobs: f.write(r)


DEVICE = 'cpu'


def torch_dice(m, X, Y, ncls):
    import torch_hippo_train as th
    m.to(DEVICE).eval(); preds = []
    with torch.no_grad():
        for i in range(0, len(X), 8): preds.append(m(X[i:i + 8].to(DEVICE)).argmax(1).cpu())
    return th.dice(torch.cat(preds), Y, ncls)


def halfgrad_eval(args, ckpt):
    r = subprocess.run([args.bin, 'eval', '--data', args.data, '--checkpoint', ckpt, '--device', args.device],
                       capture_output=True, text=True)
    if r.returncode != 0: sys.exit(f'halfgrad-unet3d eval failed:\n{r.stdout}\n{r.stderr}')
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr.strip()


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--bin', required=True); p.add_argument('--data', required=True); p.add_argument('--work', required=True)
    p.add_argument('--halfgrad-epochs', type=int, default=30); p.add_argument('--torch-steps', type=int, default=150)
    p.add_argument('--torch-channels', default='8,16,32,64,128'); p.add_argument('--tol', type=float, default=0.005)
    p.add_argument('--device', default='cpu', choices=['cpu', 'cuda'],
                   help='where PyTorch trains and evaluates, and `eval --device` (the GPU machine: cuda)')
    p.add_argument('--halfgrad-run', default='',
                   help='(a) uses this finished run folder instead of training the tiny recipe')
    args = p.parse_args()
    global DEVICE
    DEVICE = args.device
    sys.path.insert(0, REF)
    from torch_unet_step import UNet3D, loss_fn
    import torch_hippo_train as th
    torch.set_num_threads(2); torch.manual_seed(0); np.random.seed(0)
    os.makedirs(args.work, exist_ok=True)
    X, Y = th.load(args.data)
    res = {'torch': torch.__version__, 'safetensors_module': st_torch is not None, 'volumes': len(X)}
    ok = True

    # (a) halfgrad -> PyTorch
    run = os.path.join(args.work, 'halfgrad_run')
    t0 = time.time()
    if args.halfgrad_run:
        run = args.halfgrad_run
    else:
        subprocess.run([args.bin, 'train', '--data', args.data, '--config', 'tiny', '--epochs', str(args.halfgrad_epochs),
                        '--val-every', str(args.halfgrad_epochs), '--seed', '1', '--out', run, '--overwrite',
                        '--no-progress', '--device', args.device], check=True, capture_output=True)
    res['a_halfgrad_train_s'] = round(time.time() - t0, 1)
    hg, _ = halfgrad_eval(args, run)
    sd, meta = load_file(os.path.join(run, 'model.safetensors'))
    mo = json.loads(meta['halfgrad'])['model']
    m = UNet3D(mo['in_channels'], mo['num_classes'], tuple(mo['channels']), mo['bottleneck'])
    m.load_state_dict(sd, strict=True)  # raises on any missing, unexpected or mis-shaped tensor
    pt = torch_dice(m, X, Y, mo['num_classes'])
    res['a_model'] = mo
    res['a_halfgrad_dice'] = [round(d, 6) for d in hg['dice']]
    res['a_torch_dice'] = [round(d, 6) for d in pt]
    res['a_max_abs_diff'] = max(abs(a - b) for a, b in zip(hg['dice'], pt))
    ok &= res['a_max_abs_diff'] <= args.tol

    # (b) PyTorch -> halfgrad
    ch = [int(c) for c in args.torch_channels.split(',')]
    va = torch.arange(len(X)) % 5 == 4
    Xtr, Ytr = X[~va], Y[~va]
    m = UNet3D(1, 3, tuple(ch[:-1]), ch[-1]).to(DEVICE)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-2)
    t0 = time.time()
    for s in range(args.torch_steps):
        idx = torch.randint(0, len(Xtr), (4,))
        opt.zero_grad(set_to_none=True)
        l = loss_fn(m(Xtr[idx].to(DEVICE)), Ytr[idx].to(DEVICE)); l.backward(); opt.step()
    res['b_torch_train_s'] = round(time.time() - t0, 1); res['b_torch_last_loss'] = round(l.item(), 4)
    ckpt = os.path.join(args.work, 'torch_model.safetensors')
    save_file({k: v for k, v in m.state_dict().items()}, ckpt)
    pt = torch_dice(m, X, Y, 3)
    hg, said = halfgrad_eval(args, ckpt)
    res['b_channels'] = ch
    res['b_halfgrad_inferred'] = said
    res['b_torch_dice'] = [round(d, 6) for d in pt]
    res['b_halfgrad_dice'] = [round(d, 6) for d in hg['dice']]
    res['b_max_abs_diff'] = max(abs(a - b) for a, b in zip(hg['dice'], pt))
    ok &= res['b_max_abs_diff'] <= args.tol
    res['ok'] = bool(ok)
    print(json.dumps(res))
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
