# alloc_rounding_prediction.py - the bytes the CUDA allocator counts for the reference U-Net's conv
# weights (16-32-64-128, bottleneck 256, 3 classes; BatchNorm and bias vectors are < 1 MiB and round
# alike under both rules, so they are left out) and their gradient / AdamW-moment / FP16-cast twins,
# under the old exact-size rounding (2 MiB granules above 1 MiB) and the splitting allocator's
# (512 B). The prediction in bench/NOTES.md ("the splitting allocator"). Plain python3:
#   python3 bench/alloc_rounding_prediction.py
MiB=1<<20
def old(n): g=512 if n<MiB else 2*MiB; return (n+g-1)//g*g
def new(n): return (max(n,1)+511)//512*512
ch=[16,32,64,128]; bott=256
convs=[]  # (ci, co, k)
c=1
for co in ch: convs += [(c,co,27),(co,co,27)]; c=co
convs += [(c,bott,27),(bott,bott,27)]; c=bott
for co in reversed(ch):
    convs.append((c,co,8))            # up-conv
    convs += [(2*co,co,27),(co,co,27)]; c=co
convs.append((c,3,1))
sizes=[ci*co*k for ci,co,k in convs]
print("params", sum(sizes))
for label, copies in [("fp32: w, grad, m, v", [(4,4)]), ("amp: fp32 w, grad, m, v + fp16 weight casts", [(4,4),(2,1)])]:
    w_old=w_new=0
    for eb,n in copies:
        for s in sizes:
            w_old += n*old(s*eb); w_new += n*new(s*eb)
    print(label, "old %.1f MiB new %.1f MiB saving %.1f MiB" % (w_old/MiB, w_new/MiB, (w_old-w_new)/MiB))
