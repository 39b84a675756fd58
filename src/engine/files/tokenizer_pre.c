/* tokenizer_pre.c — splitting a text into pre-tokens (see tokenizer.h).
 *
 * Two shapes of split. GPT-2's, Llama 3's, Qwen2's and StarCoder's are one
 * function each that says how long the pre-token at a position is
 * (pm__tok_pretoken in tokenizer_encode.c). Falcon's and DeepSeek's are
 * several regexes applied in turn, each to every fragment the previous
 * ones left: within a fragment the regex is searched left to right, and a
 * match becomes a fragment, and so does each stretch of text between
 * matches. Those splits are data here: a table of steps per
 * pre-tokenizer, each step a kind of pattern and a character class.
 *
 * A split is written as a cut map: cut[i] = 1 when a pre-token begins at
 * byte i (cut[0] and cut[n] are always 1). Steps only add cuts, and every
 * cut falls on a character boundary.
 *
 * Character classes follow how llama.cpp's regexes see the text: a
 * whitespace character beyond ASCII stands as U+000B, so it matches \s and
 * no literal range (U+3000 IDEOGRAPHIC SPACE is in DeepSeek's punctuation
 * range and CJK range, and matches neither), and \p{L}, \p{N}, \p{P} are
 * the Unicode general categories.
 */
#include "tokenizer_impl.h"

#include <string.h>

/* Unicode White_Space. */
int pm__unicode_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f ||
           cp == 0x3000;
}

typedef struct cp_range {
    uint32_t lo, hi;
} cp_range;

static int in_list(uint32_t cp, const cp_range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cp >= r[i].lo && cp <= r[i].hi)
            return 1;
    return 0;
}

/* The codepoint a literal range compares: whitespace beyond ASCII is
 * U+000B to the regex. An invalid byte is no character of any class. */
static uint32_t seen(uint32_t cp)
{
    return cp > 0x7f && cp != 0xffffffffu && pm__unicode_is_space(cp) ? 0x0b : cp;
}

/* ---- character classes ------------------------------------------------ */

static int cls_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }
static int cls_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }
static int cls_letter(uint32_t cp) { return pm__unicode_is_letter(cp); }
static int cls_number(uint32_t cp) { return pm__unicode_is_number(cp); }
static int cls_punct(uint32_t cp) { return pm__unicode_is_punct(cp); }

/* Falcon's [\p{P}\$\+<=>\^~\|`]: punctuation and the ASCII symbols. */
static int cls_falcon_punct(uint32_t cp)
{
    return pm__unicode_is_punct(cp) || (cp < 0x80 && cp && strchr("$+<=>^~|`", (int)cp) != NULL);
}

/* DeepSeek LLM's letter class: the cased letters of Latin, Greek,
 * Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic, Deseret,
 * Osage, Old Hungarian, Warang Citi, Adlam and the fullwidth forms, as
 * written out in its regex. */
static const cp_range k_dsl_letters[] = {
    {0x41, 0x5a}, {0x61, 0x7a}, {0xb5, 0xb5}, {0xc0, 0xd6}, {0xd8, 0xf6}, {0xf8, 0x1ba},
    {0x1bc, 0x1bf}, {0x1c4, 0x293}, {0x295, 0x2af}, {0x370, 0x373}, {0x376, 0x377}, {0x37b, 0x37d},
    {0x37f, 0x37f}, {0x386, 0x386}, {0x388, 0x38a}, {0x38c, 0x38c}, {0x38e, 0x3a1}, {0x3a3, 0x3f5},
    {0x3f7, 0x481}, {0x48a, 0x52f}, {0x531, 0x556}, {0x10a0, 0x10c5}, {0x13a0, 0x13f5}, {0x13f8, 0x13fd},
    {0x1c90, 0x1cba}, {0x1cbd, 0x1cbf}, {0x1d00, 0x1d2b}, {0x1d6b, 0x1d77}, {0x1d79, 0x1d9a},
    {0x1e00, 0x1f15}, {0x1f18, 0x1f1d}, {0x1f20, 0x1f45}, {0x1f48, 0x1f4d}, {0x1f50, 0x1f57},
    {0x1f59, 0x1f59}, {0x1f5b, 0x1f5b}, {0x1f5d, 0x1f5d}, {0x1f5f, 0x1f7d}, {0x1f80, 0x1fb4},
    {0x1fb6, 0x1fbc}, {0x1fbe, 0x1fbe}, {0x1fc2, 0x1fc4}, {0x1fc6, 0x1fcc}, {0x1fd0, 0x1fd3},
    {0x1fd6, 0x1fdb}, {0x1fe0, 0x1fec}, {0x1ff2, 0x1ff4}, {0x1ff6, 0x1ffc}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210a, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211d}, {0x2124, 0x2124},
    {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212a, 0x212d}, {0x212f, 0x2134}, {0x2139, 0x2139},
    {0x213c, 0x213f}, {0x2145, 0x2149}, {0x214e, 0x214e}, {0x2183, 0x2184}, {0x2c00, 0x2c7b},
    {0x2c7e, 0x2ce4}, {0x2ceb, 0x2cee}, {0x2cf2, 0x2cf3}, {0xa640, 0xa66d}, {0xa680, 0xa69b},
    {0xa722, 0xa76f}, {0xa771, 0xa787}, {0xa78b, 0xa78e}, {0xab70, 0xabbf}, {0xfb00, 0xfb06},
    {0xfb13, 0xfb17}, {0xff21, 0xff3a}, {0xff41, 0xff5a}, {0x10400, 0x1044f}, {0x104b0, 0x104d3},
    {0x104d8, 0x104fb}, {0x10c80, 0x10cb2}, {0x10cc0, 0x10cf2}, {0x118a0, 0x118df}, {0x1e900, 0x1e943},
};

static int cls_dsl_letter(uint32_t cp)
{
    return in_list(seen(cp), k_dsl_letters, sizeof k_dsl_letters / sizeof k_dsl_letters[0]);
}

/* DeepSeek LLM's [!-/:-~！-／：-～‘-‟　-。]: ':'..'~' takes in the
 * ASCII letters too, which an earlier step has already cut out. */
static int cls_dsl_punct(uint32_t cp)
{
    static const cp_range r[] = {{0x21, 0x2f},     {0x3a, 0x7e},     {0xff01, 0xff0f},
                                 {0xff1a, 0xff5e}, {0x2018, 0x201f}, {0x3000, 0x3002}};
    return in_list(seen(cp), r, sizeof r / sizeof r[0]);
}

/* DeepSeek's [一-龥ࠀ-一가-퟿]: U+0800..U+9FA5 (so most scripts past
 * Samaritan, not only CJK) and U+AC00..U+D7FF. */
static int cls_deepseek_cjk(uint32_t cp)
{
    static const cp_range r[] = {{0x4e00, 0x9fa5}, {0x0800, 0x4e00}, {0xac00, 0xd7ff}};
    return in_list(seen(cp), r, sizeof r / sizeof r[0]);
}

/* ---- steps ------------------------------------------------------------ */

enum step_kind {
    STEP_ONE,      /* C: one character of the class */
    STEP_RUN,      /* C+ */
    STEP_WS_RUN,   /* \s?C+ */
    STEP_THREE,    /* CCC: exactly three */
    STEP_TRAIL_WS, /* \s+$: the whitespace that ends the fragment */
    STEP_GPT2      /* GPT-2's regex without its last '\s+' */
};

typedef struct pre_step {
    enum step_kind kind;
    int (*cls)(uint32_t cp);
} pre_step;

/* Falcon: punctuation runs; GPT-2's regex (its '\s+(?!\S)' without a
 * trailing '\s+' alternative splits as GPT-2's function does, since every
 * stretch the regex leaves is a fragment too); runs of three ASCII digits. */
static const pre_step k_falcon[] = {
    {STEP_RUN, cls_falcon_punct},
    {STEP_GPT2, NULL},
    {STEP_THREE, cls_digit},
};

/* DeepSeek LLM: [\r\n], \s?<letters>+, \s?<punctuation>+, \s+$, CJK
 * runs, \p{N}+. */
static const pre_step k_deepseek_llm[] = {
    {STEP_ONE, cls_newline},     {STEP_WS_RUN, cls_dsl_letter}, {STEP_WS_RUN, cls_dsl_punct},
    {STEP_TRAIL_WS, NULL},       {STEP_RUN, cls_deepseek_cjk},  {STEP_RUN, cls_number},
};

/* DeepSeek Coder: [\r\n], \s?\p{L}+, \s?\p{P}+, CJK runs, \p{N}. */
static const pre_step k_deepseek_coder[] = {
    {STEP_ONE, cls_newline},      {STEP_WS_RUN, cls_letter}, {STEP_WS_RUN, cls_punct},
    {STEP_RUN, cls_deepseek_cjk}, {STEP_ONE, cls_number},
};

static uint32_t cp_at(const unsigned char *s, size_t end, size_t i, size_t *len)
{
    uint32_t cp;
    *len = pm__utf8_next(s + i, end - i, &cp);
    return cp;
}

static int is_ws(uint32_t cp)
{
    return cp != 0xffffffffu && pm__unicode_is_space(cp);
}

/* The byte after a run of class c from j. */
static size_t run_end(const unsigned char *s, size_t end, size_t j, int (*c)(uint32_t))
{
    size_t cl;
    while (j < end && c(cp_at(s, end, j, &cl)))
        j += cl;
    return j;
}

/* Length of the step's match at i in the fragment ending at end, or 0;
 * on 0, *next is where the search tries next. */
static size_t step_match(const pre_step *st, const unsigned char *s, size_t end, size_t i, size_t *next)
{
    size_t cl, cl2, j;
    uint32_t cp = cp_at(s, end, i, &cl);
    *next = i + cl;
    switch (st->kind) {
    case STEP_ONE:
        return st->cls(cp) ? cl : 0;
    case STEP_RUN:
        return st->cls(cp) ? run_end(s, end, i, st->cls) - i : 0;
    case STEP_WS_RUN:
        if (st->cls(cp))
            return run_end(s, end, i, st->cls) - i;
        if (is_ws(cp) && i + cl < end && st->cls(cp_at(s, end, i + cl, &cl2)))
            return run_end(s, end, i + cl, st->cls) - i;
        return 0;
    case STEP_THREE:
        j = i;
        for (int k = 0; k < 3; k++) {
            if (j >= end || !st->cls(cp_at(s, end, j, &cl2)))
                return 0;
            j += cl2;
        }
        return j - i;
    case STEP_TRAIL_WS:
        j = run_end(s, end, i, is_ws);
        if (j == end && j > i)
            return j - i;
        *next = j > i ? j : i + cl; /* no later start in this run can reach the end either */
        return 0;
    case STEP_GPT2:
        return pm__tok_pretoken(LLM_TOK_PRE_GPT2, s, end, i);
    }
    return 0;
}

/* Applies one step to every fragment of the cut map. */
static void apply_step(const pre_step *st, const unsigned char *s, size_t n, unsigned char *cut)
{
    for (size_t a = 0; a < n;) {
        size_t b = a + 1;
        while (!cut[b])
            b++;
        for (size_t i = a; i < b;) {
            size_t next;
            size_t k = step_match(st, s, b, i, &next);
            if (k) {
                cut[i] = cut[i + k] = 1;
                i += k;
            } else {
                i = next;
            }
        }
        a = b;
    }
}

void pm__tok_split(enum llm_tok_pre pre, const unsigned char *s, size_t n, unsigned char *cut)
{
    memset(cut, 0, n + 1);
    cut[0] = cut[n] = 1;
    const pre_step *steps = NULL;
    size_t n_steps = 0;
    switch (pre) {
    case LLM_TOK_PRE_FALCON:
        steps = k_falcon, n_steps = sizeof k_falcon / sizeof k_falcon[0];
        break;
    case LLM_TOK_PRE_DEEPSEEK_LLM:
        steps = k_deepseek_llm, n_steps = sizeof k_deepseek_llm / sizeof k_deepseek_llm[0];
        break;
    case LLM_TOK_PRE_DEEPSEEK_CODER:
        steps = k_deepseek_coder, n_steps = sizeof k_deepseek_coder / sizeof k_deepseek_coder[0];
        break;
    default:
        for (size_t i = 0; i < n;) {
            i += pm__tok_pretoken(pre, s, n, i);
            cut[i] = 1;
        }
        return;
    }
    for (size_t k = 0; k < n_steps && n > 0; k++)
        apply_step(&steps[k], s, n, cut);
}
