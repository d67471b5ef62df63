# torch_ddp_step.py - PyTorch DistributedDataParallel reference for halfgrad-unet3d train --gpus N
# (issue 13): the reference U-Net and loss of ../shared/reference/torch_unet_step.py, the reference
# recipe's step (AdamW lr 1e-3 wd 1e-2, AMP FP16 autocast + GradScaler, whole volumes 48x64x48
# (z, y, x), channels-last 3-D activations as halfgrad's default on CUDA), one process per GPU under
# DDP (NCCL, default 25 MB buckets, broadcast_buffers=False as halfgrad's train loop), timed per rank.
#
#   torchrun --nproc_per_node N bench/torch_ddp_step.py [--batches 8,16] [--steps 20] [--warm 5] [--out F.json]
#   (CPU check, tiny; gloo:) /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --redirects 2 \
#       --tee 2 --log_dir /tmp/ddp_logs bench/torch_ddp_step.py --device cpu --shape 16,16,16 --batches 2,4 \
#       --steps 2 --warm 1
#   (Debian's torch 1.13 on Python 3.12: torchrun's default --redirects 0 fails in to_map, because
#   Python 3.12's Flag iteration no longer yields Std.NONE; 2 (stderr to log_dir, teed) works.
#   The U-Net pools 4 times: every extent must be a multiple of 16.)
#
# Prints, on rank 0, one JSON line per per-GPU batch: world size, per-GPU batch B (global B * N), the
# median step time over ranks' medians (ms, CUDA events around a step; each step ends with a
# synchronize), and images/s per GPU = B / median step. Data: random volumes and labels, made once on
# the device (what is measured is the step and its gradient all-reduce, not a loader). Scaling
# efficiency is images/s per GPU at N over the same at N = 1 (bench/run_ddp_bench.sh prints it).
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.environ.get('HALFGRAD_REFERENCE', os.path.join(os.path.dirname(__file__), '..', '..', 'shared', 'reference')))
from torch_unet_step import UNet3D, loss_fn  # noqa: E402  (the reference model, unchanged)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--batches', default='8,16', help='per-GPU batch sizes, comma-separated')
    ap.add_argument('--shape', default='48,64,48', help='volume z,y,x (the reference recipe: 48,64,48)')
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--warm', type=int, default=5)
    ap.add_argument('--device', default='cuda', choices=['cuda', 'cpu'])
    ap.add_argument('--out', default='')
    args = ap.parse_args()

    cuda = args.device == 'cuda'
    local_rank = int(os.environ.get('LOCAL_RANK', 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group('nccl' if cuda else 'gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device('cuda', local_rank) if cuda else torch.device('cpu')
    shape = tuple(int(s) for s in args.shape.split(','))
    results = []
    for B in (int(b) for b in args.batches.split(',')):
        torch.manual_seed(0)
        model = UNet3D().to(dev)
        if cuda:
            model = model.to(memory_format=torch.channels_last_3d)
            torch.backends.cudnn.benchmark = True
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None,
                                                        broadcast_buffers=False)
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=1e-2)
        scaler = torch.cuda.amp.GradScaler(enabled=cuda)
        g = torch.Generator(device='cpu').manual_seed(1000 + rank)  # each rank its own slice of the data
        x = torch.randn((B, 1) + shape, generator=g).to(dev)
        y = torch.randint(0, 3, (B,) + shape, generator=g).to(dev)
        if cuda:
            x = x.to(memory_format=torch.channels_last_3d)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(args.device, dtype=torch.float16 if cuda else torch.bfloat16, enabled=cuda):
                loss = loss_fn(ddp(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        for _ in range(args.warm):
            step()
        times = []
        for _ in range(args.steps):
            if cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                step()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                step()
                times.append(1e3 * (time.perf_counter() - t0))
        times.sort()
        med = torch.tensor([times[len(times) // 2]], dtype=torch.float64, device=dev)
        meds = [torch.zeros_like(med) for _ in range(world)]
        dist.all_gather(meds, med)
        rank_medians = sorted(float(m.item()) for m in meds)
        step_ms = rank_medians[len(rank_medians) // 2]
        r = dict(framework='pytorch', torch=torch.__version__, world_size=world, batch_per_gpu=B,
                 global_batch=B * world, shape=list(shape), step_ms=step_ms, rank_step_ms=rank_medians,
                 images_per_s_per_gpu=B / (step_ms / 1e3))
        results.append(r)
        if rank == 0:
            print(json.dumps(r), flush=True)
        del ddp, model, opt
    if rank == 0 and args.out:
        with open(args.out, 'w') as f:
            json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
