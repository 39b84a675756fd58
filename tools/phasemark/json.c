/* json.c — a small recursive-descent JSON parser producing a flat DOM.
 *
 * Enough for Chrome trace files: objects, arrays, strings (escapes and
 * \u surrogate pairs decoded to UTF-8 in place), numbers (kept as text so
 * timestamps convert exactly), true/false/null. Nesting depth and node
 * count are bounded; any deviation from RFC 8259 is an error naming the
 * byte offset.
 */
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define PMT_JSON_DEPTH 64
#define PMT_JSON_NODES_MAX ((size_t)1 << 26)

typedef struct parser {
    pmt_json *j;
    char *p, *end;
    char *err;
    size_t errlen;
    int depth;
} parser;

static int fail(parser *ps, const char *what)
{
    pmt_errf(ps->err, ps->errlen, "offset %zu: %s", (size_t)(ps->p - ps->j->text), what);
    return -1;
}

static void ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int32_t new_node(parser *ps, int type)
{
    pmt_json *j = ps->j;
    if (j->n == j->cap) {
        size_t ncap = j->cap ? j->cap * 2 : 256;
        if (ncap > PMT_JSON_NODES_MAX)
            return fail(ps, "too many values");
        pmt_jnode *nn = realloc(j->nodes, ncap * sizeof *nn);
        if (!nn)
            return fail(ps, "out of memory");
        j->nodes = nn;
        j->cap = ncap;
    }
    pmt_jnode *n = &j->nodes[j->n];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->child = n->next = -1;
    return (int32_t)j->n++;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static char *put_utf8(char *w, unsigned cp)
{
    if (cp < 0x80) {
        *w++ = (char)cp;
    } else if (cp < 0x800) {
        *w++ = (char)(0xC0 | (cp >> 6));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *w++ = (char)(0xE0 | (cp >> 12));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *w++ = (char)(0xF0 | (cp >> 18));
        *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    }
    return w;
}

/* A \u escape at ps->p (after the backslash-u), surrogate pairs joined. */
static int unicode_escape(parser *ps, char **w)
{
    unsigned cp, lo;
    if (ps->end - ps->p < 4 || hex4(ps->p, &cp) < 0)
        return fail(ps, "bad \\u escape");
    ps->p += 4;
    if (cp >= 0xD800 && cp < 0xDC00) {
        if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
            hex4(ps->p + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
            return fail(ps, "unpaired surrogate");
        ps->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return fail(ps, "unpaired surrogate");
    }
    *w = put_utf8(*w, cp);
    return 0;
}

/* Decodes the string at ps->p (opening quote) in place. */
static int string(parser *ps, const char **out, size_t *len)
{
    ps->p++;
    char *start = ps->p, *w = ps->p;
    for (;;) {
        if (ps->p >= ps->end)
            return fail(ps, "unterminated string");
        char c = *ps->p;
        if (c == '"')
            break;
        if ((unsigned char)c < 0x20)
            return fail(ps, "control character in string");
        if ((unsigned char)c >= 0x80) {
            /* The text is NUL-terminated (parse copies it), so the check
             * never reads past the end. */
            size_t n = pmt_utf8_len((const unsigned char *)ps->p);
            if (!n || (size_t)(ps->end - ps->p) < n)
                return fail(ps, "invalid UTF-8 in string");
            memmove(w, ps->p, n);
            w += n;
            ps->p += n;
            continue;
        }
        if (c != '\\') {
            *w++ = c;
            ps->p++;
            continue;
        }
        if (++ps->p >= ps->end)
            return fail(ps, "unterminated escape");
        c = *ps->p++;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, c);
        if (c && k)
            *w++ = to[k - from];
        else if (c == 'u') {
            if (unicode_escape(ps, &w) < 0)
                return -1;
        } else
            return fail(ps, "bad escape");
    }
    ps->p++;
    *w = 0; /* safe: decoding never grows, and the quote slot is free */
    *out = start;
    *len = (size_t)(w - start);
    return 0;
}

static int number(parser *ps, int32_t node)
{
    char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return fail(ps, "bad number");
    if (*ps->p == '0')
        ps->p++;
    else
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    ps->j->nodes[node].str = s;
    ps->j->nodes[node].len = (size_t)(ps->p - s);
    return 0;
}

static int32_t value(parser *ps);

/* Parses the members of an array or object; children are linked in order. */
static int members(parser *ps, int32_t node, int is_obj)
{
    char close = is_obj ? '}' : ']';
    int32_t prev = -1;
    ps->p++;
    ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        size_t klen;
        ws(ps);
        if (is_obj) {
            if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, "expected a member name");
            if (string(ps, &key, &klen) < 0)
                return -1;
            ws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return fail(ps, "expected ':'");
            ps->p++;
        }
        int32_t child = value(ps);
        if (child < 0)
            return -1;
        ps->j->nodes[child].key = key;
        if (prev < 0)
            ps->j->nodes[node].child = child;
        else
            ps->j->nodes[prev].next = child;
        prev = child;
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected text");
    ps->p += n;
    return 0;
}

static int32_t value(parser *ps)
{
    ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end");
    char c = *ps->p;
    int type = c == '{' ? PMT_JOBJ : c == '[' ? PMT_JARR : c == '"' ? PMT_JSTR
             : (c == 't' || c == 'f') ? PMT_JBOOL : c == 'n' ? PMT_JNULL : PMT_JNUM;
    int32_t node = new_node(ps, type);
    if (node < 0)
        return -1;
    int rc;
    if (type == PMT_JOBJ || type == PMT_JARR) {
        if (++ps->depth > PMT_JSON_DEPTH)
            return fail(ps, "nested too deeply");
        rc = members(ps, node, type == PMT_JOBJ);
        ps->depth--;
    } else if (type == PMT_JSTR) {
        const char *s;
        size_t len;
        rc = string(ps, &s, &len);
        if (rc == 0) {
            ps->j->nodes[node].str = s;
            ps->j->nodes[node].len = len;
        }
    } else if (type == PMT_JBOOL) {
        ps->j->nodes[node].boolean = c == 't';
        rc = literal(ps, c == 't' ? "true" : "false");
    } else if (type == PMT_JNULL) {
        rc = literal(ps, "null");
    } else {
        rc = number(ps, node);
    }
    return rc < 0 ? -1 : node;
}

int pmt_json_parse(pmt_json *j, const char *text, size_t len, char *err, size_t errlen)
{
    memset(j, 0, sizeof *j);
    j->text = malloc(len + 1);
    if (!j->text) {
        pmt_errf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(j->text, text, len);
    j->text[len] = 0;
    parser ps = {j, j->text, j->text + len, err, errlen, 0};
    if (len >= 3 && memcmp(ps.p, "\xEF\xBB\xBF", 3) == 0)
        ps.p += 3;
    if (value(&ps) < 0) {
        pmt_json_free(j);
        return -1;
    }
    ws(&ps);
    if (ps.p != ps.end) {
        fail(&ps, "text after the value");
        pmt_json_free(j);
        return -1;
    }
    return 0;
}

void pmt_json_free(pmt_json *j)
{
    free(j->nodes);
    free(j->text);
    memset(j, 0, sizeof *j);
}

const pmt_jnode *pmt_json_child(const pmt_json *j, const pmt_jnode *n)
{
    return n && n->child >= 0 ? &j->nodes[n->child] : NULL;
}

const pmt_jnode *pmt_json_next(const pmt_json *j, const pmt_jnode *n)
{
    return n && n->next >= 0 ? &j->nodes[n->next] : NULL;
}

const pmt_jnode *pmt_json_get(const pmt_json *j, const pmt_jnode *obj, const char *key)
{
    if (!obj || obj->type != PMT_JOBJ)
        return NULL;
    for (const pmt_jnode *c = pmt_json_child(j, obj); c; c = pmt_json_next(j, c))
        if (c->key && strcmp(c->key, key) == 0)
            return c;
    return NULL;
}
