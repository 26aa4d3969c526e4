import sys, torch
sys.path.insert(0, "tests")
import family_reference as fr
torch.set_num_threads(int(sys.argv[1]))
out = {}
for fam in fr.ENCODERS + fr.SEQ2SEQ:
    print(fam, flush=True)
    out[fam] = fr.outputs(fam)
torch.save(out, sys.argv[2])
