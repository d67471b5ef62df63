# wgrad_halo_fragments.py - a CPU check of the index math of ops/conv/conv3d_wgrad_halo_cuda.cu: the
# halo and dy tile loads, the ldmatrix.x4.trans row addresses and the mma.sync.m16n8k16 fragment
# layouts (ops/tensor_core/ptx.cuh's comments), emulated per lane in numpy and compared with a direct
# float64 weight gradient. Written because the machine the kernel was written on has no GPU; it checks
# the addressing (every tap, padded channels, tiles that stick out, Cin = 1's N = taps fragments, and
# that no padding word of shared memory is ever read: those are NaN here), not the cp.async pipeline
# or the barriers. Keep it in step with the kernel when either changes.
#
# Run: /usr/bin/python3 tools/wgrad_halo_fragments.py   (numpy; ~3 s; prints the max error per case)
import numpy as np, itertools
rng = np.random.default_rng(0)
TZ,TY,TX=4,8,8; HZ,HY,HX=6,10,10; HALO=600; V=256

def ldm_x4_trans(smem, addrs):  # addrs[lane] -> regs[lane][i] = (lo, hi)
    regs=[[None]*4 for _ in range(32)]
    for l in range(32):
        for i in range(4):
            r0=2*(l%4); c=l//4
            regs[l][i]=(smem[addrs[8*i+r0]+c], smem[addrs[8*i+r0+1]+c])
    return regs

def mma(acc, a, b):  # acc[lane][4], a[lane][4] pairs, b[lane][2] pairs
    A=np.zeros((16,16)); B=np.zeros((16,8))
    for l in range(32):
        g,t=l//4,l%4
        for (reg,(r,c)) in zip(range(4),[(g,2*t),(g+8,2*t),(g,8+2*t),(g+8,8+2*t)]):
            A[r,c],A[r,c+1]=a[l][reg]
        for (reg,k) in zip(range(2),[2*t,8+2*t]):
            B[k,g],B[k+1,g]=b[l][reg]
    D=A@B
    for l in range(32):
        g,t=l//4,l%4
        acc[l][0]+=D[g,2*t]; acc[l][1]+=D[g,2*t+1]; acc[l][2]+=D[g+8,2*t]; acc[l][3]+=D[g+8,2*t+1]

def reference(x, dy):  # x (n,d,h,w,cin), dy (n,d,h,w,cout) -> dW (cout, 27*cin) KRSC
    n,d,h,w,cin=x.shape; cout=dy.shape[-1]
    xp=np.zeros((n,d+2,h+2,w+2,cin)); xp[:,1:-1,1:-1,1:-1]=x
    out=np.zeros((cout,27*cin))
    for a,b,e in itertools.product(range(3),range(3),range(3)):
        tap=9*a+3*b+e
        xs=xp[:,a:a+d,b:b+h,e:e+w].reshape(-1,cin)
        out[:,tap*cin:(tap+1)*cin]=dy.reshape(-1,cout).T@xs
    return out

def tiles_of(x):
    n,d,h,w,_=x.shape
    tz,ty,tx=-(-d//TZ),-(-h//TY),-(-w//TX)
    for t in range(n*tz*ty*tx):
        nn=t//(tz*ty*tx); r=t%(tz*ty*tx)
        yield (nn,(r//(ty*tx))*TZ,((r%(ty*tx))//tx)*TY,(r%tx)*TX)

def halo_pixel(x,o,hv):
    n,d,h,w,_=x.shape
    hz,hy,hx=hv//(HY*HX),(hv//HX)%HY,hv%HX
    z,y,xx=o[1]-1+hz,o[2]-1+hy,o[3]-1+hx
    return (o[0],z,y,xx) if (0<=z<d and 0<=y<h and 0<=xx<w) else None

def load_dy(dy,o,row,cpad):
    n,d,h,w,cout=dy.shape
    s=np.full(V*row,np.nan)
    for v in range(V):
        z,y,xx=o[1]+v//64,o[2]+(v//8)%8,o[3]+v%8
        for c in range(cpad):
            s[v*row+c]= dy[o[0],z,y,xx,c] if (z<d and y<h and xx<w and c<cout) else 0.0
    return s

def generic(x,dy,cinpad,coutpad):
    cin=x.shape[-1]; cout=dy.shape[-1]
    rowx,rowdy=cinpad+8,coutpad+8; mmam,mman=coutpad//16,cinpad//8
    acc=np.zeros((9,3,mmam,mman,32,4))
    for o in tiles_of(x):
        xs=np.full(HALO*rowx,np.nan)
        for hv in range(HALO):
            p=halo_pixel(x,o,hv)
            for c in range(cinpad):
                xs[hv*rowx+c]= x[p][c] if (p is not None and c<cin) else 0.0
        dys=load_dy(dy,o,rowdy,coutpad)
        for warp in range(9):
            tb,te=warp//3,warp%3
            for yp in range(4):
                a={}
                for z in range(4):
                    for i in range(mmam):
                        a[z,i]=ldm_x4_trans(dys,[((z*4+yp)*16+(l//16)*8+l%8)*rowdy+i*16+((l//8)%2)*8 for l in range(32)])
                for hz in range(HZ):
                    for nb in range(0,mman,2):
                        addrs=[((((l//8)%2)+tb)*HX+l%8+te+hz*HY*HX+yp*2*HX)*rowx+(l//16)*8+nb*8 for l in range(32)]
                        r=ldm_x4_trans(xs,addrs)
                        b0=[(r[l][0],r[l][1]) for l in range(32)]; b1=[(r[l][2],r[l][3]) for l in range(32)]
                        for ta in range(3):
                            z=hz-ta
                            if z<0 or z>=4: continue
                            for i in range(mmam):
                                accv=[list(acc[warp,ta,i,nb,l]) for l in range(32)]
                                mma(accv,a[z,i],b0); acc[warp,ta,i,nb]=np.array(accv)
                                accv=[list(acc[warp,ta,i,nb+1,l]) for l in range(32)]
                                mma(accv,a[z,i],b1); acc[warp,ta,i,nb+1]=np.array(accv)
    K=27*cin; out=np.full((cout,K),np.nan)
    for warp in range(9):
        for e in range(3):
            for i in range(mmam):
                for nb in range(mman):
                    for l in range(32):
                        for r in range(4):
                            co=i*16+l//4+(r//2)*8; ci=nb*8+(l%4)*2+r%2; tap=9*e+3*(warp//3)+warp%3
                            if co<cout and ci<cin: out[co,tap*cin+ci]=acc[warp,e,i,nb,l,r]
    return out

def c1(x,dy,coutpad):
    cout=dy.shape[-1]; rowdy=coutpad+8; mmam=coutpad//16
    acc=np.zeros((8,mmam,4,32,4))
    for o in tiles_of(x):
        hs=np.full(608,np.nan)
        for hv in range(HALO):
            p=halo_pixel(x,o,hv); hs[hv]= x[p][0] if p is not None else 0.0
        dys=load_dy(dy,o,rowdy,coutpad)
        for warp in range(8):
            tapoff=[]
            for nb in range(4):
                tapoff.append([(((nb*8+l//4)//9)*HY+((nb*8+l//4)//3)%3)*HX+(nb*8+l//4)%3+2*(l%4) if nb*8+l//4<27 else -1 for l in range(32)])
            for kk in range(2):
                ks=warp+kk*8
                a=[ldm_x4_trans(dys,[(ks*16+(l//16)*8+l%8)*rowdy+i*16+((l//8)%2)*8 for l in range(32)]) for i in range(mmam)]
                step=(ks//4)*HY*HX+(ks%4)*2*HX
                for nb in range(4):
                    b=[]
                    for l in range(32):
                        if tapoff[nb][l]>=0:
                            v=step+tapoff[nb][l]; b.append(((hs[v],hs[v+1]),(hs[v+HX],hs[v+HX+1])))
                        else: b.append(((0.,0.),(0.,0.)))
                    for i in range(mmam):
                        accv=[list(acc[warp,i,nb,l]) for l in range(32)]
                        mma(accv,a[i],b); acc[warp,i,nb]=np.array(accv)
    red=np.zeros((8,coutpad,32))
    for warp in range(8):
        for i in range(mmam):
            for nb in range(4):
                for l in range(32):
                    for r in range(4):
                        red[warp,i*16+l//4+(r//2)*8,nb*8+(l%4)*2+r%2]=acc[warp,i,nb,l,r]
    return red.sum(0)[:cout,:27]

for (n,cin,cout,d,h,w) in [(1,16,16,5,9,7),(1,8,24,3,4,9),(1,32,16,2,3,3)]:
    x=rng.standard_normal((n,d,h,w,cin)); dy=rng.standard_normal((n,d,h,w,cout))
    got=generic(x,dy,16 if cin<=16 else 32,16 if cout<=16 else 32); ref=reference(x,dy)
    print("generic",n,cin,cout,d,h,w,"max err",np.abs(got-ref).max(),"nan",np.isnan(got).any())
for (n,cout,d,h,w) in [(1,16,5,9,7),(2,32,3,4,9)]:
    x=rng.standard_normal((n,d,h,w,1)); dy=rng.standard_normal((n,d,h,w,cout))
    got=c1(x,dy,16 if cout<=16 else 32); ref=reference(x,dy)
    print("c1",n,cout,d,h,w,"max err",np.abs(got-ref).max(),"nan",np.isnan(got).any())
