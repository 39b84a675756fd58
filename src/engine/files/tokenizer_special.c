/* tokenizer_special.c — special-token spellings in text (see
 * tokenizer_special.h).
 *
 * The text is kept as a list of fragments, each either a stretch of plain
 * text (id -1) or one special token. Every special token, longest first,
 * splits each plain fragment at its occurrences, leftmost first. The
 * list is then emitted in order: token fragments as their id, plain ones
 * through llm_tokenize.
 */
#include "tokenizer_special.h"

#include <stdlib.h>
#include <string.h>

typedef struct frag {
    size_t off, len;
    int32_t id; /* -1: plain text */
} frag;

typedef struct special {
    int32_t id;
    const char *s;
    size_t len;
} special;

static int is_special_type(int type)
{
    return type == LLM_TOKTYPE_CONTROL || type == LLM_TOKTYPE_USER_DEFINED || type == LLM_TOKTYPE_UNKNOWN;
}

int32_t llm_tokenizer_find_special(const llm_tokenizer *t, const char *s, size_t len)
{
    uint32_t n = t ? llm_tokenizer_vocab_size(t) : 0;
    for (uint32_t i = 0; i < n && s && len; i++) {
        const char *p;
        size_t pl;
        if (is_special_type(llm_tokenizer_token_type(t, (int32_t)i)) && llm_tokenizer_piece(t, (int32_t)i, &p, &pl) == 0 &&
            pl == len && memcmp(p, s, len) == 0)
            return (int32_t)i;
    }
    return -1;
}

/* Longest first; equal lengths by id, so the order does not depend on
 * qsort's stability. */
static int by_length(const void *a, const void *b)
{
    const special *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The special tokens whose text occurs somewhere in the text (others
 * cannot split anything), sorted longest first. NULL with *n 0 when none;
 * *oom set when allocation failed. A vocabulary may hold thousands of
 * special tokens (reserved and unused ones), so a token is searched for
 * only when the text holds its first two bytes as a pair: one bitmap of
 * the text's byte pairs, built once. */
static special *collect(const llm_tokenizer *t, const char *text, size_t len, size_t *n, int *oom)
{
    special *v = NULL;
    size_t cnt = 0, cap = 0;
    *n = 0;
    uint8_t *pairs = calloc(65536 / 8, 1);
    if (!pairs) {
        *oom = 1;
        return NULL;
    }
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i + 1 < len; i++) {
        unsigned k = (unsigned)u[i] << 8 | u[i + 1];
        pairs[k >> 3] |= (uint8_t)(1u << (k & 7));
    }
    uint32_t nv = llm_tokenizer_vocab_size(t);
    for (uint32_t i = 0; i < nv; i++) {
        const char *p;
        size_t pl;
        if (!is_special_type(llm_tokenizer_token_type(t, (int32_t)i)) || llm_tokenizer_piece(t, (int32_t)i, &p, &pl) ||
            pl == 0 || pl > len)
            continue;
        if (pl >= 2) {
            unsigned k = (unsigned)(unsigned char)p[0] << 8 | (unsigned char)p[1];
            if (!(pairs[k >> 3] & (1u << (k & 7))))
                continue;
        }
        int found = 0;
        for (const char *q = text; !found && (q = memchr(q, p[0], len - (size_t)(q - text))) != NULL; q++)
            found = (size_t)(text + len - q) >= pl && memcmp(q, p, pl) == 0;
        if (!found)
            continue;
        if (cnt == cap) {
            size_t nc = cap ? cap * 2 : 16;
            special *nvp = realloc(v, nc * sizeof *v);
            if (!nvp) {
                free(v);
                free(pairs);
                *oom = 1;
                return NULL;
            }
            v = nvp;
            cap = nc;
        }
        v[cnt++] = (special){(int32_t)i, p, pl};
    }
    free(pairs);
    if (cnt > 1)
        qsort(v, cnt, sizeof *v, by_length);
    *n = cnt;
    return v;
}

/* Splits every plain fragment of *fr at the occurrences of sp. The list
 * grows by two per occurrence; 0 or -1 when out of memory. */
static int split_at(const char *text, const special *sp, frag **fr, size_t *n, size_t *cap)
{
    for (size_t i = 0; i < *n; i++) {
        frag f = (*fr)[i];
        if (f.id >= 0 || f.len < sp->len)
            continue;
        const char *base = text + f.off, *hit = NULL;
        for (size_t k = 0; k + sp->len <= f.len; k++)
            if (base[k] == sp->s[0] && memcmp(base + k, sp->s, sp->len) == 0) {
                hit = base + k;
                break;
            }
        if (!hit)
            continue;
        if (*n + 2 > *cap) {
            size_t nc = *cap * 2 + 4;
            frag *nf = realloc(*fr, nc * sizeof *nf);
            if (!nf)
                return -1;
            *fr = nf;
            *cap = nc;
        }
        size_t left = (size_t)(hit - base), right = f.len - left - sp->len;
        /* Replace f by [left][token][right]; empty plain parts vanish.
         * The right part is visited next, so later occurrences split too. */
        frag parts[3];
        size_t np = 0;
        if (left)
            parts[np++] = (frag){f.off, left, -1};
        parts[np++] = (frag){f.off + left, sp->len, sp->id};
        if (right)
            parts[np++] = (frag){f.off + left + sp->len, right, -1};
        memmove(*fr + i + np, *fr + i + 1, (*n - i - 1) * sizeof **fr);
        memcpy(*fr + i, parts, np * sizeof *parts);
        *n += np - 1;
        i += left ? 1 : 0; /* now at the token; the loop steps to the right part */
    }
    return 0;
}

static void put_id(int32_t *out, size_t cap, size_t *n, int32_t id)
{
    if (*n < cap)
        out[*n] = id;
    (*n)++;
}

int llm_tokenize_special(const llm_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
                         size_t cap, size_t *n_out)
{
    if (!t || (!text && len) || !n_out || (!out && cap))
        return LLM_EINVAL;
    size_t ns = 0, nf = len ? 1 : 0, fcap = 4;
    int oom = 0;
    special *sp = len ? collect(t, text, len, &ns, &oom) : NULL;
    frag *fr = oom ? NULL : malloc(fcap * sizeof *fr);
    if (!fr) {
        free(sp);
        return LLM_ENOMEM;
    }
    fr[0] = (frag){0, len, -1};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ns; i++)
        rc = split_at(text, &sp[i], &fr, &nf, &fcap) ? LLM_ENOMEM : 0;
    size_t n = 0;
    if (rc == 0 && add_bos && llm_tokenizer_bos(t) >= 0)
        put_id(out, cap, &n, llm_tokenizer_bos(t));
    for (size_t i = 0; rc == 0 && i < nf; i++) {
        if (fr[i].id >= 0) {
            put_id(out, cap, &n, fr[i].id);
            continue;
        }
        size_t got = 0;
        rc = llm_tokenize(t, text + fr[i].off, fr[i].len, 0, n < cap ? out + n : NULL, n < cap ? cap - n : 0, &got);
        if (rc == LLM_ESPACE)
            rc = 0;
        n += got;
    }
    free(fr);
    free(sp);
    *n_out = n;
    if (rc)
        return rc;
    return n > cap ? LLM_ESPACE : 0;
}
