/* tokenizer_encode.c — text to token ids (see tokenizer.h for the rules).
 *
 * Both models share one merge engine. The text of a word is a row of
 * symbols (byte ranges of one working string, linked left to right); every
 * adjacent pair that may merge is put in a binary heap keyed by priority
 * (SentencePiece: the merged piece's score, higher first; gpt2: the merge
 * rank, lower first) and then by position (leftmost first). Popping the
 * best pair merges it unless it went stale (one side already merged into
 * something else: then the two no longer sit side by side with the same
 * lengths), and the new symbol's pairs with its neighbours are pushed. The
 * result is the same as rescanning for the best pair after every merge
 * (llama2.c's loop) in O(n log n).
 *
 * Working memory is allocated once per call, sized from the text length.
 */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct sym {
    uint32_t start, len; /* byte range in the working string */
    int32_t id;          /* piece id, or -1 (spm: no piece for this char) */
    int32_t prev, next;  /* neighbours, -1 at the ends */
} sym;

typedef struct cand {
    double key;          /* lower is better */
    uint32_t left;       /* symbol index of the left side (also the tie-break) */
    uint32_t right;
    uint32_t size;       /* left.len + right.len when pushed */
    int32_t result;
} cand;

typedef struct work {
    const llm_tokenizer *t;
    const char *s;       /* working string */
    sym *syms;
    uint32_t n_syms;
    cand *heap;
    size_t n_heap, cap_heap;
} work;

static int cand_less(const cand *a, const cand *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static void heap_push(work *w, cand c)
{
    size_t i = w->n_heap++;
    w->heap[i] = c;
    while (i > 0 && cand_less(&w->heap[i], &w->heap[(i - 1) / 2])) {
        cand tmp = w->heap[i];
        w->heap[i] = w->heap[(i - 1) / 2];
        w->heap[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
}

static cand heap_pop(work *w)
{
    cand top = w->heap[0];
    w->heap[0] = w->heap[--w->n_heap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->n_heap && cand_less(&w->heap[l], &w->heap[m]))
            m = l;
        if (r < w->n_heap && cand_less(&w->heap[r], &w->heap[m]))
            m = r;
        if (m == i)
            break;
        cand tmp = w->heap[i];
        w->heap[i] = w->heap[m];
        w->heap[m] = tmp;
        i = m;
    }
    return top;
}

/* Pushes the pair (a, a.next) when it may merge. The heap never needs to
 * grow past its allocation of 2n: at most n-1 pairs to begin with, and
 * each merge pops one pair before pushing at most two. */
static void try_pair(work *w, int32_t a)
{
    if (a < 0 || w->syms[a].next < 0)
        return;
    const sym *l = &w->syms[a], *r = &w->syms[l->next];
    cand c = {0, (uint32_t)a, (uint32_t)l->next, l->len + r->len, -1};
    if (w->t->kind == LLM_TOK_SPM) {
        c.result = pm__tok_lookup(w->t, w->s + l->start, c.size);
        if (c.result < 0)
            return;
        c.key = -(double)w->t->scores[c.result];
    } else {
        if (l->id < 0 || r->id < 0)
            return;
        const llm_tok_merge *m = pm__tok_merge(w->t, l->id, r->id);
        if (!m)
            return;
        c.result = m->result;
        c.key = (double)m->rank;
    }
    if (w->n_heap < w->cap_heap)
        heap_push(w, c);
}

/* Runs the merges over symbols [0, n) of the working string. */
static void merge_all(work *w)
{
    for (uint32_t i = 0; i + 1 < w->n_syms; i++)
        try_pair(w, (int32_t)i);
    while (w->n_heap) {
        cand c = heap_pop(w);
        sym *l = &w->syms[c.left], *r = &w->syms[c.right];
        if (l->len == 0 || r->len == 0 || l->next != (int32_t)c.right || l->len + r->len != c.size)
            continue;
        l->len += r->len;
        l->id = c.result;
        l->next = r->next;
        if (r->next >= 0)
            w->syms[r->next].prev = (int32_t)c.left;
        r->len = 0;
        try_pair(w, l->prev);
        try_pair(w, (int32_t)c.left);
    }
}

/* Output accumulator: ids are written while they fit and always counted. */
typedef struct sink {
    int32_t *out;
    size_t cap, n;
} sink;

static void emit(sink *k, int32_t id)
{
    if (k->n < k->cap)
        k->out[k->n] = id;
    k->n++;
}

/* ---- SentencePiece ("llama") ------------------------------------------ */

/* The working string: optional leading "▁", every ' ' as "▁". */
static size_t spm_normalize(const llm_tokenizer *t, const char *text, size_t len, char *dst)
{
    size_t n = 0;
    if (t->add_space_prefix) {
        memcpy(dst, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(dst + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            dst[n++] = text[i];
        }
    }
    return n;
}

static void spm_emit(const work *w, sink *k)
{
    const llm_tokenizer *t = w->t;
    for (int32_t i = 0; i >= 0; i = w->syms[i].next) {
        const sym *s = &w->syms[i];
        if (s->id >= 0) {
            emit(k, s->id);
            continue;
        }
        /* No piece: byte fallback, else <unk> once for the character. */
        const unsigned char *p = (const unsigned char *)w->s + s->start;
        int all_bytes = 1;
        for (uint32_t j = 0; j < s->len; j++)
            all_bytes &= t->byte_tok[p[j]] >= 0;
        if (!all_bytes) {
            if (t->unk >= 0)
                emit(k, t->unk);
            continue;
        }
        for (uint32_t j = 0; j < s->len; j++)
            emit(k, t->byte_tok[p[j]]);
    }
}

/* Splits the working string into one symbol per UTF-8 character. */
static void spm_symbols(work *w, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = pm__utf8_next((const unsigned char *)w->s + i, n - i, &cp);
        sym *y = &w->syms[w->n_syms];
        y->start = (uint32_t)i;
        y->len = (uint32_t)cl;
        y->id = pm__tok_lookup(w->t, w->s + i, cl);
        y->prev = (int32_t)w->n_syms - 1;
        y->next = i + cl < n ? (int32_t)w->n_syms + 1 : -1;
        w->n_syms++;
        i += cl;
    }
}

static size_t count_chars(const char *s, size_t n)
{
    size_t chars = 0;
    for (size_t i = 0; i < n; chars++) {
        uint32_t cp;
        i += pm__utf8_next((const unsigned char *)s + i, n - i, &cp);
    }
    return chars;
}

static int spm_encode(const llm_tokenizer *t, const char *text, size_t len, sink *k)
{
    if (len == 0)
        return 0;
    if (len > (SIZE_MAX - 3) / 3 || len > UINT32_MAX / 4)
        return LLM_TOK_EINVAL; /* symbol offsets are 32-bit */
    char *s = malloc(3 * len + 3); /* every byte a space, plus the prefix */
    if (!s)
        return LLM_TOK_ENOMEM;
    size_t n = spm_normalize(t, text, len, s);
    size_t chars = count_chars(s, n);
    /* The heap holds at most the first pairs (chars - 1) plus one net new
     * pair per merge (a merge pops one and pushes up to two). */
    sym *syms = malloc(chars * sizeof *syms);
    cand *heap = malloc(2 * chars * sizeof *heap);
    int r = 0;
    if (!syms || !heap) {
        r = LLM_TOK_ENOMEM;
    } else {
        work w = {t, s, syms, 0, heap, 0, 2 * chars};
        spm_symbols(&w, n);
        merge_all(&w);
        spm_emit(&w, k);
    }
    free(s);
    free(syms);
    free(heap);
    return r;
}

/* ---- byte-level BPE ("gpt2") ------------------------------------------ */

/* Character classes of GPT-2's pre-tokenizer regex. */
enum { C_SPACE, C_LETTER, C_NUMBER, C_OTHER };

/* Unicode White_Space. */
static int is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

static int char_class(uint32_t cp)
{
    if (cp == 0xffffffffu)
        return C_OTHER; /* an invalid byte */
    if (is_space(cp))
        return C_SPACE;
    if (pm__unicode_is_letter(cp))
        return C_LETTER;
    if (pm__unicode_is_number(cp))
        return C_NUMBER;
    return C_OTHER;
}

static int class_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    uint32_t cp;
    *len = pm__utf8_next(s + i, n - i, &cp);
    return char_class(cp);
}

/* Length of GPT-2's contractions 's 't 'm 'd 're 've 'll at i, or 0. */
static size_t contraction(const unsigned char *s, size_t n, size_t i)
{
    if (s[i] != '\'' || i + 1 >= n)
        return 0;
    unsigned c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd')
        return 2;
    if (i + 2 < n && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') || (c == 'l' && s[i + 2] == 'l')))
        return 3;
    return 0;
}

/* Length of the chunk starting at i, following the regex alternatives in
 * order: contractions, ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+',
 * '\s+(?!\S)', '\s+'. */
static size_t next_chunk(const unsigned char *s, size_t n, size_t i)
{
    size_t k = contraction(s, n, i), cl;
    if (k)
        return k;
    size_t j = i;
    int c = class_at(s, n, j, &cl);
    if (s[i] == ' ' && i + 1 < n) {
        size_t cl2;
        int c2 = class_at(s, n, i + 1, &cl2);
        if (c2 != C_SPACE) { /* ' ' then a letter, number or other run */
            j = i + 1;
            c = c2;
            cl = cl2;
        }
    }
    if (c != C_SPACE) {
        while (j < n && class_at(s, n, j, &cl) == c)
            j += cl;
        return j - i;
    }
    /* A whitespace run: all of it at the end of the text; otherwise all but
     * its last character (which then prefixes the next word), unless the
     * run is a single character. */
    size_t last = i;
    while (j < n && class_at(s, n, j, &cl) == C_SPACE) {
        last = j;
        j += cl;
    }
    if (j == n || last == i)
        return j - i;
    return last - i;
}

/* BPE over one pre-token: bytes mapped to GPT-2 characters, merged. */
static void bpe_word(const llm_tokenizer *t, const unsigned char *p, size_t len, work *w, char *mapped, sink *k)
{
    size_t n = 0;
    w->n_syms = 0;
    w->n_heap = 0;
    w->s = mapped;
    for (size_t i = 0; i < len; i++) {
        sym *y = &w->syms[i];
        size_t cl = pm__utf8_put(pm__gpt2_byte_to_cp(p[i]), (unsigned char *)mapped + n);
        y->start = (uint32_t)n;
        y->len = (uint32_t)cl;
        y->id = t->byte_tok[p[i]];
        y->prev = (int32_t)i - 1;
        y->next = i + 1 < len ? (int32_t)i + 1 : -1;
        n += cl;
    }
    w->n_syms = (uint32_t)len;
    merge_all(w);
    for (int32_t i = 0; i >= 0; i = w->syms[i].next)
        emit(k, w->syms[i].id);
}

static int bpe_encode(const llm_tokenizer *t, const char *text, size_t len, sink *k)
{
    if (len == 0)
        return 0;
    if (len > UINT32_MAX / 4)
        return LLM_TOK_EINVAL; /* symbol offsets are 32-bit */
    /* Per pre-token: mapped bytes (each byte maps to a 1- or 2-byte
     * character), one symbol per byte, and a heap of at most 2 pairs per
     * symbol (see spm_encode). */
    char *mapped = malloc(2 * len);
    sym *syms = malloc(len * sizeof *syms);
    cand *heap = malloc(2 * len * sizeof *heap);
    int r = 0;
    if (!mapped || !syms || !heap) {
        r = LLM_TOK_ENOMEM;
        goto out;
    }
    work w = {t, mapped, syms, 0, heap, 0, 2 * len};
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t c = next_chunk(s, len, i);
        bpe_word(t, s + i, c, &w, mapped, k);
        i += c;
    }
out:
    free(mapped);
    free(syms);
    free(heap);
    return r;
}

int llm_tokenize(const llm_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out, size_t cap,
                 size_t *n_out)
{
    sink k = {out, out ? cap : 0, 0};
    if (!t || (!text && len))
        return LLM_TOK_EINVAL;
    if (add_bos && t->bos >= 0)
        emit(&k, t->bos);
    int r = t->kind == LLM_TOK_SPM ? spm_encode(t, text, len, &k) : bpe_encode(t, text, len, &k);
    *n_out = k.n;
    if (r)
        return r;
    return k.n > k.cap ? LLM_TOK_ENOSPC : 0;
}
