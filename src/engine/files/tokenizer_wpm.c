/* tokenizer_wpm.c — WordPiece, BERT's tokenizer ("bert" in
 * tokenizer.ggml.model), as llama.cpp runs it.
 *
 * A GGUF WordPiece vocabulary spells a word-initial piece with a leading
 * "▁" (U+2581) and a continuation piece bare (Hugging Face's "##" dropped).
 * Encoding:
 *
 *  1. Words. Each character is replaced by the first character of its NFD
 *     decomposition (so precomposed letters lose their accents: "ü" is
 *     "u"; a separate combining mark stays), then lowercased (the simple
 *     mapping). Whitespace ends a word; NUL, U+FFFD, an invalid byte and
 *     control/format/private-use characters are dropped; punctuation, an
 *     ASCII symbol and a CJK ideograph are each a word of their own.
 *  2. Pieces. "▁" + word is matched greedily from its first byte: the
 *     longest piece starting there (at most the vocabulary's longest
 *     piece), then on from its end. If some position matches no piece,
 *     the whole word is [UNK] (one id).
 *
 * Working memory is one buffer per call, sized from the text.
 */
#include "tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

/* CJK ideographs that BERT splits off one by one (its ranges, including
 * its 0x2B920 where the block starts at 0x2B820). */
static int is_cjk(uint32_t cp)
{
    return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) || (cp >= 0x20000 && cp <= 0x2a6df) ||
           (cp >= 0x2a700 && cp <= 0x2b73f) || (cp >= 0x2b740 && cp <= 0x2b81f) ||
           (cp >= 0x2b920 && cp <= 0x2ceaf) || (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

static int is_ascii_symbol(uint32_t cp)
{
    return cp == '$' || cp == '+' || cp == '<' || cp == '=' || cp == '>' || cp == '^' || cp == '`' || cp == '|' ||
           cp == '~';
}

/* Greedy longest-first matching of w (the word with its "▁"), n bytes. */
static void wpm_word(const llm_tokenizer *t, const char *w, size_t n, pm__tok_sink *k)
{
    size_t start = k->n;
    for (size_t i = 0; i < n;) {
        size_t j = n - i < (size_t)t->max_piece ? n : i + t->max_piece;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = pm__tok_lookup(t, w + i, j - i)) >= 0)
                break;
        if (id < 0) {
            k->n = start; /* the ids written so far are overwritten or past n */
            if (t->unk >= 0)
                pm__tok_emit(k, t->unk);
            return;
        }
        pm__tok_emit(k, id);
        i = j;
    }
}

int pm__wpm_encode(const llm_tokenizer *t, const char *text, size_t len, pm__tok_sink *k)
{
    /* Every character (at least one input byte) becomes one character of
     * at most 4 bytes, so 4 bytes per input byte and the "▁" bound a word
     * whatever the tables map. */
    if (len > (SIZE_MAX - 3) / 4)
        return LLM_EINVAL;
    char *w = malloc(4 * len + 3);
    if (!w)
        return LLM_ENOMEM;
    const unsigned char *s = (const unsigned char *)text;
    size_t n = 0; /* bytes of the current word after its "▁" */
    memcpy(w, "\xe2\x96\x81", 3);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += pm__utf8_next(s + i, len - i, &cp);
        if (cp == 0xffffffffu || cp == 0 || cp == 0xfffd)
            continue;
        cp = pm__unicode_nfd_first(cp);
        if (pm__unicode_is_space(cp)) {
            if (n)
                wpm_word(t, w, n + 3, k);
            n = 0;
            continue;
        }
        if (pm__unicode_is_control(cp))
            continue;
        unsigned char u[4];
        size_t ul = pm__utf8_put(pm__unicode_lower(cp), u);
        if (pm__unicode_is_punct(cp) || is_ascii_symbol(cp) || is_cjk(cp)) {
            if (n)
                wpm_word(t, w, n + 3, k);
            memcpy(w + 3, u, ul);
            wpm_word(t, w, ul + 3, k);
            n = 0;
            continue;
        }
        memcpy(w + 3 + n, u, ul);
        n += ul;
    }
    if (n)
        wpm_word(t, w, n + 3, k);
    free(w);
    return 0;
}
