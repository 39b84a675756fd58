/* ref.c — see ref.h. Clarity over speed: this is the definition the engine
 * is held to. */
#include "ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_layer {
    double *attn_norm, *ffn_norm;          /* [dim] */
    double *wq, *wk, *wv, *wo;             /* [out][in] */
    double *wg, *wu, *wd;
    double *bq, *bk, *bv;                  /* qwen2: [q_dim], [kv_dim] x2 */
    double *q_norm, *k_norm;               /* qwen3: [head_dim] */
} ref_layer;

struct ref_model {
    ref_hparams hp;
    int head_dim, q_dim, kv_dim, pos;
    double *embd, *out_norm, *out;         /* [vocab][dim], [dim], [vocab][dim] */
    ref_layer *layers;
    double *kc, *vc;                       /* [layers][ctx][kv_dim] */
    double *x, *xb, *q, *k, *v, *att, *o, *g, *u, *sc;
};

/* IEEE half to double, from the definition (sign, 5-bit exponent, 10-bit
 * fraction, bias 15, subnormals below exponent 1). */
static double half_to_double(uint16_t h)
{
    int sign = h >> 15, e = (h >> 10) & 31, f = h & 1023;
    double v;
    if (e == 0)
        v = ldexp(f, -24);
    else if (e == 31)
        v = f ? NAN : INFINITY;
    else
        v = ldexp(1024 + f, e - 25);
    return sign ? -v : v;
}

static double bf16_to_double(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t rd16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* The k-quants, from the GGUF block layout (written here independently of
 * the engine's quant_k.c, element by element). Q4_K / Q5_K super-block of
 * 256: d, dmin (fp16), 12 bytes holding eight 6-bit (scale, min) pairs,
 * [Q5_K: 32 bytes of fifth bits], 128 bytes of nibbles. */
static void k_scale_min(const unsigned char *s, int j, int *sc, int *mn)
{
    if (j < 4) {
        *sc = s[j] % 64;
        *mn = s[j + 4] % 64;
    } else {
        *sc = s[j + 4] % 16 + (s[j - 4] / 64) * 16;
        *mn = s[j + 4] / 16 + (s[j] / 64) * 16;
    }
}

static void decode_k45(const unsigned char *p, double *dst, size_t n, int five)
{
    size_t bytes = five ? 176 : 144;
    for (size_t b = 0; b < n / 256; b++) {
        const unsigned char *blk = p + bytes * b;
        double d = half_to_double(rd16(blk)), dmin = half_to_double(rd16(blk + 2));
        for (int e = 0; e < 256; e++) {
            int j = e / 32, l = e % 32, sc, mn;
            k_scale_min(blk + 4, j, &sc, &mn);
            unsigned byte = blk[(five ? 48 : 16) + 32 * (j / 2) + l];
            int q = j % 2 ? (int)(byte / 16) : (int)(byte % 16);
            if (five && (blk[16 + l] >> j) % 2)
                q += 16;
            dst[256 * b + e] = d * sc * q - dmin * mn;
        }
    }
}

/* Q6_K super-block of 256 (210 bytes): ql[128], qh[64], int8 scales[16]
 * (one per 16 elements), fp16 d. Element e = 128h + 32g + l. */
static void decode_q6_k(const unsigned char *p, double *dst, size_t n)
{
    for (size_t b = 0; b < n / 256; b++) {
        const unsigned char *blk = p + 210 * b;
        double d = half_to_double(rd16(blk + 208));
        for (int e = 0; e < 256; e++) {
            int h = e / 128, g = (e % 128) / 32, l = e % 32;
            unsigned lo = blk[64 * h + l + (g % 2) * 32];
            lo = g / 2 ? lo / 16 : lo % 16;
            unsigned hi = (blk[128 + 32 * h + l] >> (2 * g)) % 4;
            dst[256 * b + e] = d * (int8_t)blk[192 + e / 16] * ((int)(lo + 16 * hi) - 32);
        }
    }
}

/* Q2_K super-block of 256 (84 bytes): 16 scale bytes (low nibble: the
 * scale, high nibble: the min of elements 16k..16k+15), qs[64], fp16 d,
 * fp16 dmin. Element e = 128h + 32g + l takes bits 2g, 2g+1 of
 * qs[32h + l]. */
static void decode_q2_k(const unsigned char *p, double *dst, size_t n)
{
    for (size_t b = 0; b < n / 256; b++) {
        const unsigned char *blk = p + 84 * b;
        double d = half_to_double(rd16(blk + 80)), dmin = half_to_double(rd16(blk + 82));
        for (int e = 0; e < 256; e++) {
            int h = e / 128, g = (e % 128) / 32, l = e % 32;
            int q = (blk[16 + 32 * h + l] >> (2 * g)) % 4;
            int sc = blk[e / 16] % 16, mn = blk[e / 16] / 16;
            dst[256 * b + e] = d * sc * q - dmin * mn;
        }
    }
}

/* Q3_K super-block of 256 (110 bytes): hmask[32], qs[64] (as Q2_K's), 12
 * bytes of sixteen 6-bit scales, fp16 d. Scale k: low 4 bits from byte
 * k % 8 (low nibble for k < 8, high for k >= 8), top 2 bits from byte
 * 8 + k % 4 at bit 2 * (k / 4); stored biased by 32. Element
 * e = 128h + 32g + l: low bits as Q2_K, minus 4 unless bit 4h + g of
 * hmask[l] is set. */
static void decode_q3_k(const unsigned char *p, double *dst, size_t n)
{
    for (size_t b = 0; b < n / 256; b++) {
        const unsigned char *blk = p + 110 * b;
        const unsigned char *sb = blk + 96;
        double d = half_to_double(rd16(blk + 108));
        for (int e = 0; e < 256; e++) {
            int h = e / 128, g = (e % 128) / 32, l = e % 32, k = e / 16;
            int q = (blk[32 + 32 * h + l] >> (2 * g)) % 4;
            if (!((blk[l] >> (4 * h + g)) & 1))
                q -= 4;
            int lo = k < 8 ? sb[k] % 16 : sb[k - 8] / 16;
            int hi = (sb[8 + k % 4] >> (2 * (k / 4))) % 4;
            dst[256 * b + e] = d * (lo + 16 * hi - 32) * q;
        }
    }
}

/* Q4_1 / Q5_0 / Q5_1 blocks of 32, from the GGUF layout: fp16 d, [fp16
 * m], [4 bytes: bit e of the little-endian word is element e's 16s bit],
 * 16 nibble bytes (element j low, j+16 high). x = d*q + m, or d*(q - 16)
 * for q5_0. */
static void decode_legacy(const unsigned char *p, double *dst, size_t n, uint32_t type)
{
    int has_m = type != 6, five = type != 3;
    size_t bytes = 18 + 2 * (size_t)has_m + 4 * (size_t)five;
    for (size_t b = 0; b < n / 32; b++) {
        const unsigned char *blk = p + bytes * b;
        double d = half_to_double(rd16(blk)), m = has_m ? half_to_double(rd16(blk + 2)) : 0.0;
        const unsigned char *qh = blk + 2 + 2 * has_m, *qs = qh + 4 * five;
        for (int e = 0; e < 32; e++) {
            int q = e < 16 ? qs[e] % 16 : qs[e - 16] / 16;
            if (five && (qh[e / 8] >> (e % 8)) % 2)
                q += 16;
            dst[32 * b + (size_t)e] = has_m ? d * q + m : d * (q - 16);
        }
    }
}

/* Decodes a whole tensor of n elements into dst. */
static int decode(const llm_gguf_tensor *t, double *dst, size_t n)
{
    const unsigned char *p = t->data;
    switch (t->type) {
    case 0: /* f32 */
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, p + 4 * i, 4);
            dst[i] = f;
        }
        return 0;
    case 1: /* f16 */
        for (size_t i = 0; i < n; i++)
            dst[i] = half_to_double(rd16(p + 2 * i));
        return 0;
    case 30: /* bf16 */
        for (size_t i = 0; i < n; i++)
            dst[i] = bf16_to_double(rd16(p + 2 * i));
        return 0;
    case 8: /* q8_0: 34-byte blocks, fp16 d then 32 int8 */
        for (size_t b = 0; b < n / 32; b++) {
            const unsigned char *blk = p + 34 * b;
            double d = half_to_double(rd16(blk));
            for (int j = 0; j < 32; j++)
                dst[32 * b + j] = d * (int8_t)blk[2 + j];
        }
        return 0;
    case 2: /* q4_0: 18-byte blocks, fp16 d then nibbles (j low, j+16 high) */
        for (size_t b = 0; b < n / 32; b++) {
            const unsigned char *blk = p + 18 * b;
            double d = half_to_double(rd16(blk));
            for (int j = 0; j < 16; j++) {
                dst[32 * b + j] = d * ((blk[2 + j] & 15) - 8);
                dst[32 * b + j + 16] = d * ((blk[2 + j] >> 4) - 8);
            }
        }
        return 0;
    case 3: /* q4_1 */
    case 6: /* q5_0 */
    case 7: /* q5_1 */
        decode_legacy(p, dst, n, t->type);
        return 0;
    case 12: /* q4_K */
    case 13: /* q5_K */
        decode_k45(p, dst, n, t->type == 13);
        return 0;
    case 14: /* q6_K */
        decode_q6_k(p, dst, n);
        return 0;
    case 10: /* q2_K */
        decode_q2_k(p, dst, n);
        return 0;
    case 11: /* q3_K */
        decode_q3_k(p, dst, n);
        return 0;
    default:
        return -1;
    }
}

static double *load(ref_find_fn find, const void *h, const char *name, size_t n)
{
    const llm_gguf_tensor *t = find(h, name);
    if (!t) {
        fprintf(stderr, "ref: tensor %s missing\n", name);
        return NULL;
    }
    size_t have = (size_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    double *d = malloc(n * sizeof *d);
    if (!d || have != n || decode(t, d, n) != 0) {
        fprintf(stderr, "ref: tensor %s: %zu elements (want %zu) or bad type %u\n",
                name, have, n, (unsigned)t->type);
        free(d);
        return NULL;
    }
    return d;
}

static double *load_layer(ref_find_fn find, const void *h, int l, const char *what, size_t n)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", l, what);
    if (!strchr(what, '.'))
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, what);
    return load(find, h, name, n);
}

/* The architecture's extra vectors: 1 when all it needs loaded. qwen2
 * has q/k/v biases, and a llama file may have them too. */
static int load_extras(ref_layer *L, const ref_hparams *hp, ref_find_fn find, const void *h,
                       int l, size_t Q, size_t KV, size_t hd)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_q.bias", l);
    if (hp->arch == REF_QWEN2 || (hp->arch == REF_LLAMA && find(h, name))) {
        L->bq = load_layer(find, h, l, "attn_q.bias", Q);
        L->bk = load_layer(find, h, l, "attn_k.bias", KV);
        L->bv = load_layer(find, h, l, "attn_v.bias", KV);
        return L->bq && L->bk && L->bv;
    }
    if (hp->arch == REF_QWEN3) {
        L->q_norm = load_layer(find, h, l, "attn_q_norm", hd);
        L->k_norm = load_layer(find, h, l, "attn_k_norm", hd);
        return L->q_norm && L->k_norm;
    }
    return 1;
}

ref_model *ref_load(const ref_hparams *hp, ref_find_fn find, const void *h)
{
    ref_model *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->hp = *hp;
    size_t D = hp->dim, hd = (size_t)ref_head_dim(hp), KV = hd * hp->n_kv_heads, F = hp->ffn;
    size_t Q = hd * hp->n_heads;
    r->head_dim = (int)hd;
    r->q_dim = (int)Q;
    r->kv_dim = (int)KV;
    int ok = 1;
    r->embd = load(find, h, "token_embd.weight", (size_t)hp->vocab * D);
    r->out_norm = load(find, h, "output_norm.weight", D);
    r->out = find(h, "output.weight") ? load(find, h, "output.weight", (size_t)hp->vocab * D) : NULL;
    ok = r->embd && r->out_norm && (r->out || !find(h, "output.weight"));
    r->layers = calloc((size_t)hp->n_layers, sizeof *r->layers);
    ok = ok && r->layers;
    for (int l = 0; ok && l < hp->n_layers; l++) {
        ref_layer *L = &r->layers[l];
        L->attn_norm = load_layer(find, h, l, "attn_norm", D);
        L->ffn_norm = load_layer(find, h, l, "ffn_norm", D);
        L->wq = load_layer(find, h, l, "attn_q", D * Q);
        L->wk = load_layer(find, h, l, "attn_k", D * KV);
        L->wv = load_layer(find, h, l, "attn_v", D * KV);
        L->wo = load_layer(find, h, l, "attn_output", Q * D);
        L->wg = load_layer(find, h, l, "ffn_gate", D * F);
        L->wu = load_layer(find, h, l, "ffn_up", D * F);
        L->wd = load_layer(find, h, l, "ffn_down", F * D);
        ok = L->attn_norm && L->ffn_norm && L->wq && L->wk && L->wv && L->wo && L->wg && L->wu && L->wd;
        ok = ok && load_extras(L, hp, find, h, l, Q, KV, hd);
    }
    size_t cache = (size_t)hp->n_layers * hp->ctx * KV;
    r->kc = calloc(cache, sizeof(double));
    r->vc = calloc(cache, sizeof(double));
    double **bufs[] = {&r->x, &r->xb, &r->q, &r->k, &r->v, &r->att, &r->o, &r->g, &r->u, &r->sc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        *bufs[i] = calloc(D + F + Q + (size_t)hp->ctx, sizeof(double));
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        ok = ok && *bufs[i];
    if (!ok || !r->kc || !r->vc) {
        ref_free(r);
        return NULL;
    }
    return r;
}

void ref_free(ref_model *r)
{
    if (!r)
        return;
    for (int l = 0; r->layers && l < r->hp.n_layers; l++) {
        ref_layer *L = &r->layers[l];
        double *p[] = {L->attn_norm, L->ffn_norm, L->wq, L->wk, L->wv, L->wo, L->wg, L->wu, L->wd,
                       L->bq, L->bk, L->bv, L->q_norm, L->k_norm};
        for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
            free(p[i]);
    }
    double *p[] = {r->embd, r->out_norm, r->out, r->kc, r->vc, r->x, r->xb, r->q, r->k,
                   r->v, r->att, r->o, r->g, r->u, r->sc};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
    free(r->layers);
    free(r);
}

void ref_reset(ref_model *r)
{
    r->pos = 0;
}

/* y[out] = W[out][in] x[in] */
static void matvec(const double *w, const double *x, double *y, int out, int in)
{
    for (int i = 0; i < out; i++) {
        double s = 0;
        for (int j = 0; j < in; j++)
            s += w[(size_t)i * in + j] * x[j];
        y[i] = s;
    }
}

static void rmsnorm(double *y, const double *x, const double *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

/* Rotates pair i of every head by (pos / factor) * base^(-2i/hd): the
 * pair is (2i, 2i+1) for llama (its GGUF rows are permuted that way) and
 * (i, i + hd/2) for qwen2/qwen3 (Hugging Face's rotate_half, unpermuted). */
static void rope(const ref_model *r, double *v, int heads)
{
    int hd = r->head_dim, split = r->hp.arch != REF_LLAMA;
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < hd / 2; i++) {
            double a = r->pos / r->hp.rope_factor * pow(r->hp.rope_base, -2.0 * i / hd);
            if (r->hp.rope_freqs)
                a /= ref_rope_freq(i);
            double *p0 = v + h * hd + (split ? i : 2 * i);
            double *p1 = split ? p0 + hd / 2 : p0 + 1;
            double x0 = *p0, x1 = *p1;
            *p0 = x0 * cos(a) - x1 * sin(a);
            *p1 = x0 * sin(a) + x1 * cos(a);
        }
}

static void add_vec(double *y, const double *b, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += b[i];
}

/* qwen3: every head of v normalized over its own hd elements. */
static void head_norm(const ref_model *r, double *v, int heads, const double *w)
{
    for (int h = 0; h < heads; h++)
        rmsnorm(v + h * r->head_dim, v + h * r->head_dim, w, r->head_dim, r->hp.eps);
}

static void attention(ref_model *r, int l)
{
    int hd = r->head_dim, group = r->hp.n_heads / r->hp.n_kv_heads;
    const double *kc = r->kc + (size_t)l * r->hp.ctx * r->kv_dim;
    const double *vc = r->vc + (size_t)l * r->hp.ctx * r->kv_dim;
    /* A window masks the keys before pos-window+1 out of the softmax. */
    int lo = r->hp.window > 0 && r->pos + 1 > r->hp.window ? r->pos + 1 - r->hp.window : 0;
    for (int h = 0; h < r->hp.n_heads; h++) {
        int kvh = h / group;
        double mx = -INFINITY, sum = 0;
        for (int p = lo; p <= r->pos; p++) {
            double s = 0;
            for (int i = 0; i < hd; i++)
                s += r->q[h * hd + i] * kc[(size_t)p * r->kv_dim + kvh * hd + i];
            r->sc[p] = s / sqrt((double)hd);
            if (r->sc[p] > mx)
                mx = r->sc[p];
        }
        for (int p = lo; p <= r->pos; p++) {
            r->sc[p] = exp(r->sc[p] - mx);
            sum += r->sc[p];
        }
        for (int i = 0; i < hd; i++) {
            double s = 0;
            for (int p = lo; p <= r->pos; p++)
                s += r->sc[p] / sum * vc[(size_t)p * r->kv_dim + kvh * hd + i];
            r->att[h * hd + i] = s;
        }
    }
}

void ref_step(ref_model *r, int token, double *logits)
{
    const ref_hparams *hp = &r->hp;
    int D = hp->dim, F = hp->ffn, KV = r->kv_dim, Q = r->q_dim;
    memcpy(r->x, r->embd + (size_t)token * D, (size_t)D * sizeof(double));
    for (int l = 0; l < hp->n_layers; l++) {
        const ref_layer *L = &r->layers[l];
        rmsnorm(r->xb, r->x, L->attn_norm, D, hp->eps);
        matvec(L->wq, r->xb, r->q, Q, D);
        matvec(L->wk, r->xb, r->k, KV, D);
        matvec(L->wv, r->xb, r->v, KV, D);
        if (L->bq) {
            add_vec(r->q, L->bq, Q);
            add_vec(r->k, L->bk, KV);
            add_vec(r->v, L->bv, KV);
        }
        if (L->q_norm) {
            head_norm(r, r->q, hp->n_heads, L->q_norm);
            head_norm(r, r->k, hp->n_kv_heads, L->k_norm);
        }
        rope(r, r->q, hp->n_heads);
        rope(r, r->k, hp->n_kv_heads);
        size_t slot = ((size_t)l * hp->ctx + r->pos) * KV;
        memcpy(r->kc + slot, r->k, (size_t)KV * sizeof(double));
        memcpy(r->vc + slot, r->v, (size_t)KV * sizeof(double));
        attention(r, l);
        matvec(L->wo, r->att, r->o, D, Q);
        for (int i = 0; i < D; i++)
            r->x[i] += r->o[i];
        rmsnorm(r->xb, r->x, L->ffn_norm, D, hp->eps);
        matvec(L->wg, r->xb, r->g, F, D);
        matvec(L->wu, r->xb, r->u, F, D);
        for (int i = 0; i < F; i++)
            r->g[i] = r->g[i] / (1.0 + exp(-r->g[i])) * r->u[i];
        matvec(L->wd, r->g, r->o, D, F);
        for (int i = 0; i < D; i++)
            r->x[i] += r->o[i];
    }
    rmsnorm(r->xb, r->x, r->out_norm, D, hp->eps);
    matvec(r->out ? r->out : r->embd, r->xb, logits, hp->vocab, D);
    r->pos++;
}

double ref_max_abs_diff(const double *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - (double)b[i]);
        if (d > m || d != d)
            m = d != d ? INFINITY : d;
    }
    return m;
}
