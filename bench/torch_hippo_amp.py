# torch_hippo_amp.py - the AMP half of ../shared/reference/torch_hippo_train.py, unchanged: its own
# load / train / evaluate functions, called for mode 'amp' only. (The reference script runs AMP and
# then FP32; its FP32 run takes ~6 minutes, more than one GPU call can spare beside halfgrad's runs.)
#   python3 torch_hippo_amp.py OUT.json   (needs torch_hippo_train.py beside it; $HIPPO, $EPOCHS as there)
import json, os, sys, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_hippo_train as ref

here = os.path.dirname(os.path.abspath(__file__))
X, Y = ref.load(os.environ.get('HIPPO', f'{here}/../data/hippocampus'))
va = torch.arange(len(X)) % 5 == 4
# SEEDS="0 1": one run per seed (the reference's own `seed` argument), to see the seed-to-seed spread.
res = []
for seed in [int(s) for s in os.environ.get('SEEDS', '0').split()]:
    r = ref.train('amp', X[~va], Y[~va], X[va], Y[va], X[:0], Y[:0], epochs=int(os.environ.get('EPOCHS', 100)), seed=seed)
    r['seed'] = seed
    res.append(r)
    print(json.dumps({k: v for k, v in r.items() if k != 'hist'}), flush=True)
json.dump(res, open(sys.argv[1], 'w'), indent=1)
