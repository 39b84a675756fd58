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

typedef pm__tok_sink sink;
#define emit pm__tok_emit

/* ---- SentencePiece ("llama") ------------------------------------------ */

/* The working string: optional leading "▁", every ' ' as "▁". */
static size_t spm_normalize(int prefix, const char *text, size_t len, char *dst)
{
    size_t n = 0;
    if (prefix) {
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

static int spm_encode(const llm_tokenizer *t, const char *text, size_t len, int prefix, sink *k)
{
    if (len == 0)
        return 0;
    if (len > (SIZE_MAX - 3) / 3 || len > UINT32_MAX / 4)
        return LLM_EINVAL; /* symbol offsets are 32-bit */
    char *s = malloc(3 * len + 3); /* every byte a space, plus the prefix */
    if (!s)
        return LLM_ENOMEM;
    size_t n = spm_normalize(prefix, text, len, s);
    size_t chars = count_chars(s, n);
    /* The heap holds at most the first pairs (chars - 1) plus one net new
     * pair per merge (a merge pops one and pushes up to two). */
    sym *syms = malloc(chars * sizeof *syms);
    cand *heap = malloc(2 * chars * sizeof *heap);
    int r = 0;
    if (!syms || !heap) {
        r = LLM_ENOMEM;
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

static int char_class(uint32_t cp)
{
    if (cp == 0xffffffffu)
        return C_OTHER; /* an invalid byte */
    if (pm__unicode_is_space(cp))
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

static int is_newline(unsigned char c)
{
    return c == '\r' || c == '\n';
}

static unsigned ascii_lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* Length of a contraction 's 't 're 've 'm 'll 'd at i, or 0. GPT-2's
 * regex matches them in lower case only; Llama 3's wraps them in (?i:...),
 * which we take as ASCII case folding (the letters are ASCII; Unicode
 * folding would also let U+017F LONG S stand for 's', which no tokenizer
 * we target relies on). The seven alternatives begin with different
 * letters, so trying them in the regex's order is the same as this test. */
static size_t contraction(const unsigned char *s, size_t n, size_t i, int fold)
{
    if (s[i] != '\'' || i + 1 >= n)
        return 0;
    unsigned c = fold ? ascii_lower(s[i + 1]) : s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd')
        return 2;
    if (i + 2 >= n)
        return 0;
    unsigned d = fold ? ascii_lower(s[i + 2]) : s[i + 2];
    if ((c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l'))
        return 3;
    return 0;
}

/* Length of GPT-2's chunk starting at i, following the regex alternatives
 * in order: contractions, ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+',
 * '\s+(?!\S)', '\s+'. */
static size_t gpt2_chunk(const unsigned char *s, size_t n, size_t i)
{
    size_t k = contraction(s, n, i, 0), cl;
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

/* The byte after a run of at most max characters of class c from j. */
static size_t skip_class(const unsigned char *s, size_t n, size_t j, int c, size_t max)
{
    size_t cl;
    for (size_t k = 0; k < max && j < n && class_at(s, n, j, &cl) == c; k++)
        j += cl;
    return j;
}

/* Length of Llama 3's chunk starting at i. The regex is
 *
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * and a backtracking engine takes the first alternative that matches at
 * i, each quantifier as long as the rest of its alternative allows. The
 * steps below are those alternatives in order; each one's comment says
 * what backtracking leaves of it. An invalid UTF-8 byte is a character of
 * no class (like U+FFFD, a symbol), so it counts as punctuation. */
static size_t llama3_chunk(const unsigned char *s, size_t n, size_t i, size_t max_digits)
{
    size_t k = contraction(s, n, i, 1), cl, cl2 = 0;
    if (k)
        return k;
    int c = class_at(s, n, i, &cl);
    int c2 = i + cl < n ? class_at(s, n, i + cl, &cl2) : -1;
    /* [^\r\n\p{L}\p{N}]?\p{L}+: a letter run, or one character that is no
     * letter, number or line break (a space, a tab, punctuation) glued to
     * the letter run right after it. */
    if (c == C_LETTER)
        return skip_class(s, n, i, C_LETTER, SIZE_MAX) - i;
    if (c != C_NUMBER && !is_newline(s[i]) && c2 == C_LETTER)
        return skip_class(s, n, i + cl, C_LETTER, SIZE_MAX) - i;
    /* \p{N}{1,3} (Qwen2: \p{N}): at most max_digits number characters. */
    if (c == C_NUMBER)
        return skip_class(s, n, i, C_NUMBER, max_digits) - i;
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*': the run is greedy and [\r\n]* always
     * matches, so nothing is given back. A space is kept only when
     * punctuation follows it; without it a space cannot start the run. */
    size_t j = s[i] == ' ' && c2 == C_OTHER ? i + 1 : i;
    if (class_at(s, n, j, &cl) == C_OTHER) {
        j = skip_class(s, n, j, C_OTHER, SIZE_MAX);
        while (j < n && is_newline(s[j]))
            j++;
        return j - i;
    }
    /* Only whitespace is left at i. '\s*[\r\n]+': \s* takes the whole
     * run and gives characters back until [\r\n]+ matches, so the chunk
     * ends right after the run's last line break (when it has one). */
    size_t end = i, after_break = 0, last = i;
    while (end < n && class_at(s, n, end, &cl) == C_SPACE) {
        if (is_newline(s[end]))
            after_break = end + 1;
        last = end;
        end += cl;
    }
    if (after_break)
        return after_break - i;
    /* '\s+(?!\S)' then '\s+', as in GPT-2's: the run at the end of the
     * text, else all but its last character, else (one character) itself. */
    if (end == n || last == i)
        return end - i;
    return last - i;
}

/* StarCoder's two regexes in turn: '\p{N}' makes every number character a
 * pre-token of its own, and GPT-2's regex splits each stretch between
 * them as if it were the whole text (its lookahead sees the stretch's end
 * as the text's end: "a 1" is "a", " ", "1"). */
static size_t starcoder_chunk(const unsigned char *s, size_t n, size_t i)
{
    size_t cl;
    if (class_at(s, n, i, &cl) == C_NUMBER)
        return cl;
    size_t end = i;
    while (end < n && class_at(s, n, end, &cl) != C_NUMBER)
        end += cl;
    return gpt2_chunk(s, end, i);
}

size_t pm__tok_pretoken(enum llm_tok_pre pre, const unsigned char *s, size_t n, size_t i)
{
    switch (pre) {
    case LLM_TOK_PRE_LLAMA3:
        return llama3_chunk(s, n, i, 3);
    case LLM_TOK_PRE_QWEN2:
        return llama3_chunk(s, n, i, 1);
    case LLM_TOK_PRE_STARCODER:
        return starcoder_chunk(s, n, i);
    default: /* GPT-2's; the multi-regex splits call it for their GPT-2 step */
        break;
    }
    return gpt2_chunk(s, n, i);
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
    /* ignore_merges: a pre-token that is a piece is that piece, whatever
     * the merges would have made of it. */
    int32_t whole = t->ignore_merges && len > 1 ? pm__tok_lookup(t, mapped, n) : -1;
    if (whole >= 0) {
        emit(k, whole);
        return;
    }
    merge_all(w);
    for (int32_t i = 0; i >= 0; i = w->syms[i].next)
        if (w->syms[i].id >= 0) /* a byte the vocabulary lacks is dropped */
            emit(k, w->syms[i].id);
}

static int bpe_encode(const llm_tokenizer *t, const char *text, size_t len, sink *k)
{
    if (len == 0)
        return 0;
    if (len > UINT32_MAX / 4)
        return LLM_EINVAL; /* symbol offsets are 32-bit */
    /* Per pre-token: mapped bytes (each byte maps to a 1- or 2-byte
     * character), one symbol per byte, and a heap of at most 2 pairs per
     * symbol (see spm_encode). */
    char *mapped = malloc(2 * len);
    sym *syms = malloc(len * sizeof *syms);
    cand *heap = malloc(2 * len * sizeof *heap);
    unsigned char *cut = malloc(len + 1);
    int r = 0;
    if (!mapped || !syms || !heap || !cut) {
        r = LLM_ENOMEM;
        goto out;
    }
    work w = {t, mapped, syms, 0, heap, 0, 2 * len};
    const unsigned char *s = (const unsigned char *)text;
    pm__tok_split(t->pre, s, len, cut);
    for (size_t i = 0; i < len;) {
        size_t c = 1;
        while (!cut[i + c])
            c++;
        bpe_word(t, s + i, c, &w, mapped, k);
        i += c;
    }
out:
    free(cut);
    free(mapped);
    free(syms);
    free(heap);
    return r;
}

/* One stretch of text with no user-defined piece in it. prefix: the
 * stretch starts the text or follows such a piece, where SentencePiece
 * puts its space prefix (llama.cpp's rule). */
static int encode_stretch(const llm_tokenizer *t, const char *text, size_t len, int prefix, sink *k)
{
    switch (t->kind) {
    case LLM_TOK_SPM:
        return spm_encode(t, text, len, prefix && t->add_space_prefix, k);
    case LLM_TOK_WPM:
        return pm__wpm_encode(t, text, len, k);
    case LLM_TOK_BPE:
        break;
    }
    return bpe_encode(t, text, len, k);
}

/* User-defined pieces are found in the raw text before anything else
 * (llama.cpp's order, after Hugging Face's added tokens): longest piece
 * first (equal lengths: lower id first), each at its leftmost
 * non-overlapping places in the text that no earlier piece took; the
 * stretches between are encoded on their own. mark[i] is the id of the
 * piece starting at byte i, MARK_TEXT for text, MARK_INSIDE for a byte
 * inside a piece.
 *
 * Rather than searching the text once per piece (MPT has 178 of them,
 * DeepSeek LLM 2398), each run of pieces of one length L is done in one
 * pass: every window of L bytes that is still text is looked up in the
 * pieces' hash, and the hits are taken piece by piece (a counting sort by
 * rank keeps each piece's hits left to right). Every piece taken so far is
 * at least L long, so a window is still all text exactly when its first
 * and last bytes are. */
#define MARK_TEXT (-1)
#define MARK_INSIDE (-2)

typedef struct cut_work {
    uint32_t *pos, *rank, *sorted; /* [len] hits of one length */
    uint32_t *count;               /* [n_user + 1] */
} cut_work;

static int window_free(const int32_t *mark, size_t i, size_t l)
{
    return mark[i] == MARK_TEXT && mark[i + l - 1] == MARK_TEXT;
}

/* Pieces of ranks [r0, r1), all l bytes long. */
static void mark_group(const llm_tokenizer *t, uint32_t r0, uint32_t r1, const char *text, size_t len,
                       int32_t *mark, cut_work *cw)
{
    size_t l = t->len[t->user_ids[r0]], n = 0;
    for (size_t i = 0; i + l <= len; i++) {
        if (!t->user_first[(unsigned char)text[i]] || !window_free(mark, i, l))
            continue;
        int32_t r = pm__tok_user_rank(t, text + i, l);
        if (r < 0)
            continue;
        cw->pos[n] = (uint32_t)i;
        cw->rank[n++] = (uint32_t)r - r0; /* same bytes, so same length: inside the group */
    }
    uint32_t groups = r1 - r0;
    memset(cw->count, 0, (groups + 1) * sizeof *cw->count);
    for (size_t k = 0; k < n; k++)
        cw->count[cw->rank[k] + 1]++;
    for (uint32_t g = 0; g < groups; g++)
        cw->count[g + 1] += cw->count[g];
    for (size_t k = 0; k < n; k++) /* stable: positions stay ascending per rank */
        cw->sorted[cw->count[cw->rank[k]]++] = cw->pos[k];
    size_t k = 0;
    for (uint32_t g = 0; g < groups; g++) {
        int32_t id = t->user_ids[r0 + g];
        size_t end = 0; /* where this piece's last take ends */
        for (; k < cw->count[g]; k++) {
            size_t i = cw->sorted[k];
            if (i < end || !window_free(mark, i, l))
                continue;
            mark[i] = id;
            for (size_t j = 1; j < l; j++)
                mark[i + j] = MARK_INSIDE;
            end = i + l;
        }
    }
}

static int encode_parts(const llm_tokenizer *t, const char *text, size_t len, sink *k)
{
    if (len > UINT32_MAX)
        return LLM_EINVAL;
    int32_t *mark = malloc(len * sizeof *mark);
    cut_work cw = {malloc(len * sizeof *cw.pos), malloc(len * sizeof *cw.rank), malloc(len * sizeof *cw.sorted),
                   malloc((t->n_user + 1) * sizeof *cw.count)};
    int r = 0, prefix = 1;
    if (!mark || !cw.pos || !cw.rank || !cw.sorted || !cw.count) {
        r = LLM_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < len; i++)
        mark[i] = MARK_TEXT;
    for (uint32_t r0 = 0; r0 < t->n_user;) {
        uint32_t r1 = r0 + 1;
        while (r1 < t->n_user && t->len[t->user_ids[r1]] == t->len[t->user_ids[r0]])
            r1++;
        mark_group(t, r0, r1, text, len, mark, &cw);
        r0 = r1;
    }
    for (size_t i = 0; i < len && !r;) {
        if (mark[i] >= 0) {
            emit(k, mark[i]);
            i += t->len[mark[i]];
            prefix = 1;
            continue;
        }
        size_t j = i;
        while (j < len && mark[j] == MARK_TEXT)
            j++;
        r = encode_stretch(t, text + i, j - i, prefix, k);
        prefix = 0;
        i = j;
    }
out:
    free(mark);
    free(cw.pos);
    free(cw.rank);
    free(cw.sorted);
    free(cw.count);
    return r;
}

int llm_tokenize(const llm_tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out, size_t cap,
                 size_t *n_out)
{
    sink k = {out, out ? cap : 0, 0};
    if (!t || (!text && len))
        return LLM_EINVAL;
    if (add_bos && t->bos >= 0)
        emit(&k, t->bos);
    int r = 0;
    if (len > 0)
        r = t->n_user ? encode_parts(t, text, len, &k) : encode_stretch(t, text, len, 1, &k);
    if (add_bos && t->kind == LLM_TOK_WPM && t->sep >= 0)
        emit(&k, t->sep);
    *n_out = k.n;
    if (r)
        return r;
    return k.n > k.cap ? LLM_ESPACE : 0;
}
