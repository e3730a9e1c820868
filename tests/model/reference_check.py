#!/usr/bin/env python3
"""An independent, pure-Python (stdlib only) qwen35moe forward pass written straight from
docs/model.md sections 3-4, in double precision, for F32 GGUF files only.

    reference_check.py MODEL.gguf "TOKEN TOKEN ..." OUT.txt

writes one line per trunk position, "T pos logits...", and for p >= 1 (when the model has an MTP block) the
MTP draft row pairing the trunk's post-norm hidden of p-1 with the token at p, "M pos logits...". The
model_test binary runs it on a tiny synthetic model and compares with the C++ reference (CrossCheck test).
It shares no code with the C++ reference, so it catches layout and indexing slips on either side.
"""
import struct, math, sys
def read_gguf(path):
    b = open(path,'rb').read(); o = 0
    def u(fmt):
        nonlocal o; v = struct.unpack_from('<'+fmt, b, o); o += struct.calcsize('<'+fmt); return v[0]
    def s():
        n = u('Q'); nonlocal o; v = b[o:o+n].decode('utf-8','replace'); o += n; return v
    assert b[:4] == b'GGUF'; o = 4; ver = u('I'); nt = u('Q'); nkv = u('Q')
    fm = {0:'B',1:'b',2:'H',3:'h',4:'I',5:'i',6:'f',7:'?',10:'Q',11:'q',12:'d'}
    def val(t):
        if t == 8: return s()
        if t == 9:
            et = u('I'); n = u('Q'); return [val(et) for _ in range(n)]
        return u(fm[t])
    md = {}
    for _ in range(nkv):
        k = s(); t = u('I'); md[k] = val(t)
    infos = []
    for _ in range(nt):
        name = s(); nd = u('I'); ne = [u('Q') for _ in range(nd)]; t = u('I'); off = u('Q'); infos.append((name, ne, t, off))
    al = md.get('general.alignment', 32); o = (o + al - 1)//al*al
    T = {}
    for name, ne, t, off in infos:
        assert t == 0, name
        n = 1
        for x in ne: n *= x
        T[name] = (list(struct.unpack_from('<%df' % n, b, o + off)), ne)
    return md, T
md, T = read_gguf(sys.argv[1])
A = 'qwen35moe.'
E = md[A+'embedding_length']; nl = md[A+'block_count'] - md.get(A+'nextn_predict_layers', 0)
nh = md[A+'attention.head_count']; nkv = md[A+'attention.head_count_kv']; hd = md[A+'attention.key_length']
nrot = md[A+'rope.dimension_count']; base = md[A+'rope.freq_base']; eps = md[A+'attention.layer_norm_rms_epsilon']
nexp = md[A+'expert_count']; ku = md[A+'expert_used_count']; ff = md[A+'expert_feed_forward_length']; ffs = md[A+'expert_shared_feed_forward_length']
dconv = md[A+'ssm.conv_kernel']; d = md[A+'ssm.state_size']; Hk = md[A+'ssm.group_count']; Hv = md[A+'ssm.time_step_rank']
interval = md.get(A+'full_attention_interval', 4)
def W(name): return T[name][0]
def rows(name):
    v, ne = T[name]; return v, ne[0]
def mv(name, x, r0=0, nout=None):
    v, n = rows(name)
    if nout is None: nout = len(v)//n - r0
    return [sum(v[(r0+o)*n+i]*x[i] for i in range(n)) for o in range(nout)]
def rms(x, w):
    s = 1.0/math.sqrt(sum(t*t for t in x)/len(x) + eps); return [x[i]*s*w[i] for i in range(len(x))]
sig = lambda x: 1/(1+math.exp(-x)); silu = lambda x: x*sig(x)
softplus = lambda x: x if x > 20 else math.log1p(math.exp(x))
def rope(h, pos):
    h = list(h); half = nrot//2
    for i in range(half):
        th = pos * base ** (-2*i/nrot); c, s = math.cos(th), math.sin(th)
        a, b2 = h[i], h[i+half]; h[i] = a*c - b2*s; h[i+half] = a*s + b2*c
    return h
def attn(p, a, pos, kv):
    qg = mv(p+'attn_q.weight', a); k = mv(p+'attn_k.weight', a); v = mv(p+'attn_v.weight', a)
    qn = W(p+'attn_q_norm.weight'); kn = W(p+'attn_k_norm.weight')
    qs = [rope(rms(qg[2*h*hd:2*h*hd+hd], qn), pos) for h in range(nh)]
    gs = [qg[2*h*hd+hd:2*h*hd+2*hd] for h in range(nh)]
    ks = [rope(rms(k[j*hd:(j+1)*hd], kn), pos) for j in range(nkv)]
    vs = [v[j*hd:(j+1)*hd] for j in range(nkv)]
    kv[:] = [r for r in kv if r[0] < pos] + [(pos, ks, vs)]
    o = []
    for h in range(nh):
        j = h // (nh//nkv)
        sc = [sum(qs[h][i]*r[1][j][i] for i in range(hd))/math.sqrt(hd) for r in kv]
        m = max(sc); e = [math.exp(x-m) for x in sc]; z = sum(e)
        oh = [sum(e[t]/z*kv[t][2][j][i] for t in range(len(kv))) for i in range(hd)]
        o += [oh[i]*sig(gs[h][i]) for i in range(hd)]
    return mv(p+'attn_output.weight', o)
def gdn(p, a, st):
    kd = Hk*d; cd = 2*kd + Hv*d
    u = mv(p+'attn_qkv.weight', a); z = mv(p+'attn_gate.weight', a); bb = mv(p+'ssm_beta.weight', a); al = mv(p+'ssm_alpha.weight', a)
    taps = W(p+'ssm_conv1d.weight')
    win = st['conv'] + [u]  # list of dconv vectors, oldest first
    y = [silu(sum(taps[c*dconv+i]*win[i][c] for i in range(dconv))) for c in range(cd)]
    st['conv'] = win[1:]
    def l2(x):
        n = math.sqrt(sum(t*t for t in x)); n = max(n, eps); return [t/n for t in x]
    q = [l2(y[h*d:(h+1)*d]) for h in range(Hk)]; q = [[t/math.sqrt(d) for t in qq] for qq in q]
    k = [l2(y[kd+h*d:kd+(h+1)*d]) for h in range(Hk)]
    v = [y[2*kd+j*d:2*kd+(j+1)*d] for j in range(Hv)]
    dtb = W(p+'ssm_dt.bias'); sa = W(p+'ssm_a'); nw = W(p+'ssm_norm.weight')
    out = []
    for j in range(Hv):
        beta = sig(bb[j]); g = sa[j]*softplus(al[j]+dtb[j]); kh = j % Hk
        S = st['S'][j]; dec = math.exp(g)
        for i in range(d):
            for c in range(d): S[i][c] *= dec
        r = [sum(S[i][c]*k[kh][i] for i in range(d)) for c in range(d)]
        delta = [beta*(v[j][c]-r[c]) for c in range(d)]
        for i in range(d):
            for c in range(d): S[i][c] += k[kh][i]*delta[c]
        o = [sum(S[i][c]*q[kh][i] for i in range(d)) for c in range(d)]
        o = rms(o, nw); out += [o[c]*silu(z[j*d+c]) for c in range(d)]
    return mv(p+'ssm_out.weight', out)
def moe(p, f):
    lg = mv(p+'ffn_gate_inp.weight', f); m = max(lg); e = [math.exp(x-m) for x in lg]; zs = sum(e); pr = [x/zs for x in e]
    top = sorted(range(nexp), key=lambda i: (-pr[i], i))[:ku]; sm = max(sum(pr[i] for i in top), 6.1035e-5)
    out = [0.0]*E
    for ex in top:
        g = mv(p+'ffn_gate_exps.weight', f, ex*ff, ff); u2 = mv(p+'ffn_up_exps.weight', f, ex*ff, ff)
        h = [silu(g[i])*u2[i] for i in range(ff)]; y = mv(p+'ffn_down_exps.weight', h, ex*E, E)
        for i in range(E): out[i] += pr[ex]/sm*y[i]
    g = mv(p+'ffn_gate_shexp.weight', f); u2 = mv(p+'ffn_up_shexp.weight', f); h = [silu(g[i])*u2[i] for i in range(ffs)]
    y = mv(p+'ffn_down_shexp.weight', h); s = sig(sum(a*b for a, b in zip(W(p+'ffn_gate_inp_shexp.weight'), f)))
    return [out[i] + s*y[i] for i in range(E)]
def block(il, x, pos, st):
    p = 'blk.%d.' % il
    a = rms(x, W(p+'attn_norm.weight'))
    full = il >= nl or (il+1) % interval == 0
    m = attn(p, a, pos, st['kv']) if full else gdn(p, a, st)
    x = [x[i]+m[i] for i in range(E)]
    f = rms(x, W(p+'post_attention_norm.weight')); m = moe(p, f)
    return [x[i]+m[i] for i in range(E)]
emb, _ = rows('token_embd.weight')
head = 'output.weight' if 'output.weight' in T else 'token_embd.weight'
toks = [int(t) for t in sys.argv[2].split()]
states = [{'kv': [], 'conv': [[0.0]*(2*Hk*d+Hv*d) for _ in range(dconv-1)], 'S': [[[0.0]*d for _ in range(d)] for _ in range(Hv)]} for _ in range(nl)]
mtpst = {'kv': []}
H = []
out = open(sys.argv[3], 'w')
for pos, t in enumerate(toks):
    x = emb[t*E:(t+1)*E]
    for il in range(nl): x = block(il, x, pos, states[il])
    h = rms(x, W('output_norm.weight')); H.append(h)
    out.write('T %d %s\n' % (pos, ' '.join('%.9g' % v for v in mv(head, h))))
    if pos >= 1 and nl < md[A+'block_count']:
        p = 'blk.%d.' % nl
        e = rms(emb[t*E:(t+1)*E], W(p+'nextn.enorm.weight')); hh = rms(H[pos-1], W(p+'nextn.hnorm.weight'))
        x = mv(p+'nextn.eh_proj.weight', e + hh)
        x = block(nl, x, pos, mtpst)
        hm = rms(x, W(p+'nextn.shared_head_norm.weight'))
        out.write('M %d %s\n' % (pos, ' '.join('%.9g' % v for v in mv(head, hm))))
