# emulate_conv_halo.py - the index math of halo_mma_kernel (ops/conv/conv3d_fprop_halo_cuda.cu) run in
# numpy on the CPU, for checking a change to its shared-memory layout, ldmatrix row addresses, MMA
# fragments or epilogue mapping without a GPU: one 8^3 tile that sticks out of a 12x10x9 volume, fprop
# and the dgrad's transposed gather, against the implicit GEMM's gathers (conv_igemm.cuh). ldmatrix.x4
# and mma.sync.m16n8k16 are emulated from their PTX fragment layouts (ops/tensor_core/ptx.cuh); values
# are float64, so a correct mapping gives errors ~1e-14 (summation order) and a wrong one O(10).
# A mirror of the kernel, not the kernel: keep the two in step. The CUDA tests are the real check
# (tests/cuda/conv3d_halo_cuda_test.cpp).
# Usage: /usr/bin/python3 tools/gpu/emulate_conv_halo.py   (Debian's numpy; ~1 minute)
import numpy as np
rng = np.random.default_rng(0)
def odd_row(h):
    c = (h + 7) // 8
    return (c if c % 2 else c + 1) * 8
def ldmatrix_x4(smem, addrs):  # addrs: 32 lane row addresses (in halfs); returns regs[lane][4] = pairs
    regs = np.zeros((32, 4, 2))
    for m in range(4):
        rows = [smem[addrs[8*m + j]: addrs[8*m + j] + 8] for j in range(8)]
        for l in range(32):
            regs[l, m] = rows[l // 4][2*(l % 4): 2*(l % 4) + 2]
    return regs
def mma(acc, a, b):  # acc[lane][4], a[lane][4][2], b[lane][2][2]
    A = np.zeros((16, 16)); B = np.zeros((16, 8))
    for l in range(32):
        g, t = l // 4, l % 4
        A[g, 2*t:2*t+2] = a[l, 0]; A[g+8, 2*t:2*t+2] = a[l, 1]
        A[g, 2*t+8:2*t+10] = a[l, 2]; A[g+8, 2*t+8:2*t+10] = a[l, 3]
        B[2*t:2*t+2, g] = b[l, 0]; B[2*t+8:2*t+10, g] = b[l, 1]
    D = A @ B
    for l in range(32):
        g, t = l // 4, l % 4
        acc[l, 0:2] += D[g, 2*t:2*t+2]; acc[l, 2:4] += D[g+8, 2*t:2*t+2]
def run(C, N, transposed, D=12, H=10, W=9, tile=(1, 0, 1)):
    kTile, kHalo = 8, 10
    x = rng.standard_normal((D, H, W, C))
    Bmat = rng.standard_normal((N, 27 * C))  # B[co][tap*C + c]
    VR, WR, SR = odd_row(C), odd_row(27 * C), odd_row(N)
    region = max(1000 * VR, 512 * SR)
    smem = np.zeros(region + N * WR)
    # weights
    for co in range(N):
        for tap in range(27):
            slot = 26 - tap if transposed else tap
            smem[region + co*WR + slot*C: region + co*WR + slot*C + C] = Bmat[co, tap*C:(tap+1)*C]
    z0, y0, x0 = tile[0]*8, tile[1]*8, tile[2]*8
    for v in range(1000):
        hz, hy, hx = v // 100, (v // 10) % 10, v % 10
        z, y, xx = z0 - 1 + hz, y0 - 1 + hy, x0 - 1 + hx
        if 0 <= z < D and 0 <= y < H and 0 <= xx < W:
            smem[v*VR: v*VR + C] = x[z, y, xx]
    out = {}
    for warp in range(8):
        acc = np.zeros((4, N // 8, 32, 4))
        a_row = [[((warp*kHalo + 2*i + (l % 16)//8)*kHalo + (l % 16) % 8)*VR + (l//16)*8 for l in range(32)] for i in range(4)]
        b_row = [((l//16)*8 + l % 8)*WR + ((l//8) % 2)*8 for l in range(32)]
        for ab in range(9):
            for e in range(3):
                tap = ab*3 + e
                shift = ((ab//3)*100 + (ab % 3)*10 + e)*VR
                for kc in range(C // 16):
                    b = np.zeros((N // 8, 32, 2, 2))
                    for j in range(0, N // 8, 2):
                        r = ldmatrix_x4(smem, [region + b_row[l] + j*8*WR + tap*C + kc*16 for l in range(32)])
                        b[j, :, 0] = r[:, 0]; b[j, :, 1] = r[:, 1]; b[j+1, :, 0] = r[:, 2]; b[j+1, :, 1] = r[:, 3]
                    for i in range(4):
                        af = ldmatrix_x4(smem, [a_row[i][l] + shift + kc*16 for l in range(32)])
                        for j in range(N // 8):
                            mma(acc[i, j], af, b[j])
        for i in range(4):
            for j in range(N // 8):
                for l in range(32):
                    for h in range(2):
                        v = warp*64 + i*16 + h*8 + l//4
                        col = j*8 + (l % 4)*2
                        out[(v, col)] = acc[i, j, l, 2*h]; out[(v, col+1)] = acc[i, j, l, 2*h+1]
    # reference: the implicit GEMM's gathers (conv_igemm.cuh)
    err = 0
    for v in range(512):
        lz, ly, lx = v // 64, (v // 8) % 8, v % 8
        z, y, xx = z0 + lz, y0 + ly, x0 + lx
        if not (z < D and y < H and xx < W): continue
        ref = np.zeros(N)
        for a in range(3):
            for bb in range(3):
                for e in range(3):
                    tap = (a*3 + bb)*3 + e
                    iz, iy, ix = (z + 1 - a, y + 1 - bb, xx + 1 - e) if transposed else (z - 1 + a, y - 1 + bb, xx - 1 + e)
                    if 0 <= iz < D and 0 <= iy < H and 0 <= ix < W:
                        ref += Bmat[:, tap*C:(tap+1)*C] @ x[iz, iy, ix]
        got = np.array([out[(v, c)] for c in range(N)])
        err = max(err, np.abs(got - ref).max())
    return err
worst = 0.0
for C, N in [(16, 16), (16, 32), (32, 16)]:
    for tr in (False, True):
        err = run(C, N, tr)
        worst = max(worst, err)
        print(f"C {C} -> N {N} {'dgrad (transposed)' if tr else 'fprop'}: max |kernel - gather| = {err:.3g}")
raise SystemExit(0 if worst < 1e-9 else "emulate_conv_halo: the kernel's mapping disagrees with the gather")
