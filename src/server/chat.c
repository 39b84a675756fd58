/* chat.c — chat template recognition and rendering (see chat.h).
 *
 * Recognition works on a normalized copy of the template: Jinja's "\n"
 * escape becomes a newline and double quotes become single ones, so a
 * fingerprint does not depend on how a template spells its strings. A
 * format's fingerprint is a set of fragments that must all occur (the
 * ones that decide what the template writes for system, user and
 * assistant turns) and a set that must not; the first format whose
 * fingerprint fits wins. A template that only shares a family's markers
 * matches nothing and is refused: a near miss is a variant we have not
 * checked, and rendering it as its neighbour would be a silent guess.
 *
 * The renderers follow each template's control flow for the case the
 * server has (string contents; roles system, user and assistant; no
 * tools; add_generation_prompt true), including Jinja's trim, which is
 * Python's str.strip(), and the templates' own refusals.
 */
#include "chat.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names and tokens ----------------------------------------------------- */

typedef struct fmt_info {
    const char *name;
    const char *bos;  /* written by the template, "" when none */
    const char *eot;  /* stop token ending an assistant turn, "" when EOS does it */
    const char *stop; /* implicit stop string */
} fmt_info;

static const fmt_info infos[PMS_CHAT_N_FORMATS] = {
    [PMS_CHAT_PLAIN] = {"plain", "", "", "\nUser:"},
    [PMS_CHAT_CHATML] = {"chatml", "", "<|im_end|>", "<|im_end|>"},
    [PMS_CHAT_QWEN25] = {"qwen2.5", "", "<|im_end|>", "<|im_end|>"},
    [PMS_CHAT_LLAMA3] = {"llama3", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>"},
    [PMS_CHAT_LLAMA31] = {"llama3.1", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>"},
    [PMS_CHAT_LLAMA32] = {"llama3.2", "<|begin_of_text|>", "<|eot_id|>", "<|eot_id|>"},
    [PMS_CHAT_MISTRAL_V0] = {"mistral-v0", "<s>", "", ""},
    [PMS_CHAT_MISTRAL_V1] = {"mistral-v1", "<s>", "", ""},
    [PMS_CHAT_MISTRAL_V3] = {"mistral-v3", "<s>", "", ""},
    [PMS_CHAT_PHI3] = {"phi3", "", "<|end|>", "<|end|>"},
    [PMS_CHAT_PHI35] = {"phi3.5", "", "<|end|>", "<|end|>"},
    [PMS_CHAT_PHI3_V0] = {"phi3-v0", "<s>", "<|end|>", "<|end|>"},
    [PMS_CHAT_GEMMA] = {"gemma", "", "<end_of_turn>", "<end_of_turn>"},
    [PMS_CHAT_GEMMA2] = {"gemma2", "<bos>", "<end_of_turn>", "<end_of_turn>"},
};

static const fmt_info *info(pms_chat_format f)
{
    return f >= 0 && f < PMS_CHAT_N_FORMATS ? &infos[f] : NULL;
}

const char *pms_chat_format_name(pms_chat_format f)
{
    return info(f) ? info(f)->name : "unknown";
}

pms_chat_format pms_chat_format_parse(const char *name)
{
    for (int f = 0; name && f < PMS_CHAT_N_FORMATS; f++)
        if (strcmp(name, infos[f].name) == 0)
            return (pms_chat_format)f;
    return PMS_CHAT_UNKNOWN;
}

const char *pms_chat_format_names(void)
{
    return "plain, chatml, qwen2.5, llama3, llama3.1, llama3.2, mistral-v0, mistral-v1, mistral-v3, "
           "phi3, phi3.5, phi3-v0, gemma, gemma2";
}

const char *pms_chat_bos_text(pms_chat_format f)
{
    return info(f) ? info(f)->bos : "";
}

const char *pms_chat_end_of_turn(pms_chat_format f)
{
    return info(f) ? info(f)->eot : "";
}

const char *pms_chat_stop_text(pms_chat_format f)
{
    return info(f) ? info(f)->stop : "";
}

int pms_chat_needs_date(pms_chat_format f)
{
    return f == PMS_CHAT_LLAMA32;
}

/* ---- recognition ------------------------------------------------------------ */

#define MAX_FRAGS 8

typedef struct fingerprint {
    pms_chat_format f;
    const char *all[MAX_FRAGS];  /* every one must occur (normalized spelling) */
    const char *none[MAX_FRAGS]; /* none may occur */
} fingerprint;

/* Written in the normalized spelling: ' for both quotes, \n a newline. */
static const fingerprint prints[] = {
    {PMS_CHAT_LLAMA32,
     {"{{- bos_token }}", "<|start_header_id|>system<|end_header_id|>\n\n", "Cutting Knowledge Date: December 2023\n",
      "set date_string = strftime_now('%d %b %Y')", "'Today Date: ' + date_string + '\n\n'",
      "set system_message = messages[0]['content']|trim",
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'",
      "'<|start_header_id|>assistant<|end_header_id|>\n\n'"},
     {NULL}},
    {PMS_CHAT_LLAMA31,
     {"{{- bos_token }}", "<|start_header_id|>system<|end_header_id|>\n\n", "Cutting Knowledge Date: December 2023\n",
      "set date_string = '26 Jul 2024'", "'Today Date: ' + date_string + '\n\n'",
      "set system_message = messages[0]['content']|trim",
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'",
      "'<|start_header_id|>assistant<|end_header_id|>\n\n'"},
     {"strftime_now"}},
    {PMS_CHAT_LLAMA3,
     {"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'",
      "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}",
      "'<|start_header_id|>assistant<|end_header_id|>\n\n'"},
     {"Cutting Knowledge", "system_message", "messages[0]"}},
    {PMS_CHAT_QWEN25,
     {"'<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n'",
      "'<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n'",
      "(message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == 'assistant' "
      "and not message.tool_calls)",
      "'<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n'", "'<|im_start|>assistant\n'"},
     {NULL}},
    {PMS_CHAT_CHATML,
     {"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' "
      "+ '\n'}}{% endfor %}",
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"},
     {"bos_token", "system_message", "tools", "trim", "strip", "messages[0]", "loop.first"}},
    {PMS_CHAT_MISTRAL_V3,
     {"{{- bos_token }}", "{%- if loop.last and system_message is defined %}",
      "'[INST] ' + system_message + '\n\n' + message['content'] + '[/INST]'", "'[INST] ' + message['content'] + '[/INST]'",
      "' ' + message['content']|trim + eos_token", "set system_message = messages[0]['content']",
      "(message['role'] == 'user') != (ns.index % 2 == 0)"},
     {NULL}},
    {PMS_CHAT_MISTRAL_V1,
     {"{{- bos_token }}", "{%- if loop.first and system_message is defined %}",
      "' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]'",
      "' [INST] ' + message['content'] + ' [/INST]'", "' ' + message['content'] + eos_token",
      "set system_message = messages[0]['content']", "(message['role'] == 'user') != (loop.index0 % 2 == 0)"},
     {"tools", "trim", "strip"}},
    {PMS_CHAT_MISTRAL_V0,
     {"{{ bos_token }}{% for message in messages %}", "(message['role'] == 'user') != (loop.index0 % 2 == 0)",
      "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}",
      "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}",
      "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"},
     {"system", "trim", "strip", "messages[0]"}},
    {PMS_CHAT_PHI35,
     {"{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}",
      "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}",
      "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}",
      "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}"},
     {"bos_token", "messages[0]"}},
    {PMS_CHAT_PHI3,
     {"{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}",
      "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}",
      "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}",
      "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}"},
     {"bos_token", "messages[0]"}},
    {PMS_CHAT_PHI3_V0,
     {"{{ bos_token }}{% for message in messages %}",
      "{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + "
      "'<|assistant|>' + '\n'}}",
      "{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}"},
     {"system", "messages[0]"}},
    {PMS_CHAT_GEMMA2,
     {"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}",
      "(message['role'] == 'user') != (loop.index0 % 2 == 0)",
      "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}",
      "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}",
      "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}"},
     {NULL}},
    {PMS_CHAT_GEMMA,
     {"{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}",
      "(message['role'] == 'user') != (loop.index0 % 2 == 0)",
      "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}",
      "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}",
      "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}"},
     {"bos_token"}},
};

/* Family markers, for naming what an unrecognized template resembles. */
static const struct { const char *marker, *family; } families[] = {
    {"<|start_header_id|>", "Llama 3"}, {"<|im_start|>", "ChatML"},  {"[INST]", "Mistral / Llama 2"},
    {"<start_of_turn>", "Gemma"},       {"<|user|>", "Phi-3"},
};

/* The normalized copy: "\n" escapes as newlines, " as '. Caller frees. */
static char *normalize(const char *t, size_t len)
{
    char *o = malloc(len + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (t[i] == '\\' && i + 1 < len && t[i + 1] == 'n') {
            o[k++] = '\n';
            i++;
        } else {
            o[k++] = t[i] == '"' ? '\'' : t[i];
        }
    }
    o[k] = '\0';
    return o;
}

static int fits(const fingerprint *p, const char *norm)
{
    for (int i = 0; i < MAX_FRAGS && p->all[i]; i++)
        if (!strstr(norm, p->all[i]))
            return 0;
    for (int i = 0; i < MAX_FRAGS && p->none[i]; i++)
        if (strstr(norm, p->none[i]))
            return 0;
    return 1;
}

pms_chat_format pms_chat_detect(const char *tmpl, size_t len, const char **family)
{
    if (family)
        *family = NULL;
    if (!tmpl)
        return PMS_CHAT_PLAIN;
    /* A NUL inside the text would hide the rest from strstr. */
    if (memchr(tmpl, '\0', len))
        return PMS_CHAT_UNKNOWN;
    char *norm = normalize(tmpl, len);
    if (!norm)
        return PMS_CHAT_UNKNOWN;
    pms_chat_format f = PMS_CHAT_UNKNOWN;
    for (size_t i = 0; f == PMS_CHAT_UNKNOWN && i < sizeof prints / sizeof prints[0]; i++)
        if (fits(&prints[i], norm))
            f = prints[i].f;
    for (size_t i = 0; f == PMS_CHAT_UNKNOWN && family && !*family && i < sizeof families / sizeof families[0]; i++)
        if (strstr(norm, families[i].marker))
            *family = families[i].family;
    free(norm);
    return f;
}

/* ---- rendering helpers ---------------------------------------------------- */

typedef struct rd {
    pms_buf *out;
    int full; /* out's limit was reached */
    char *err;
    size_t errlen;
} rd;

static void put(rd *r, const char *s)
{
    if (!r->full && pms_buf_puts(r->out, s))
        r->full = 1;
}

static void put_n(rd *r, const char *s, size_t n)
{
    if (!r->full && pms_buf_append(r->out, s, n))
        r->full = 1;
}

static void put_msg(rd *r, const pms_chat_msg *m)
{
    put_n(r, m->content, m->len);
}

/* Python's str.isspace() for one codepoint (Jinja's trim is str.strip()). */
static int py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The codepoint whose UTF-8 starts at s[0] (n bytes), its length in *len;
 * a malformed byte is itself (never a space). */
static uint32_t cp_at(const unsigned char *s, size_t n, size_t *len)
{
    unsigned c = s[0];
    size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (need == 0 || need > n) {
        *len = 1;
        return 0xfffffffu;
    }
    uint32_t v = need == 1 ? c : need == 2 ? (c & 0x1f) : need == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *len = 1;
            return 0xfffffffu;
        }
        v = v << 6 | (s[i] & 0x3f);
    }
    *len = need;
    return v;
}

/* Content with leading and trailing whitespace removed, as Python's
 * strip(). Trailing characters are found by stepping back over
 * continuation bytes. */
static void put_trimmed(rd *r, const pms_chat_msg *m)
{
    const unsigned char *s = (const unsigned char *)m->content;
    size_t a = 0, b = m->len, l;
    while (a < b && py_space(cp_at(s + a, b - a, &l)))
        a += l;
    while (b > a) {
        size_t st = b - 1;
        while (st > a && (s[st] & 0xc0) == 0x80 && b - st < 4)
            st--;
        uint32_t c = cp_at(s + st, b - st, &l);
        if (st + l != b || !py_space(c))
            break;
        b = st;
    }
    put_n(r, m->content + a, b - a);
}

static int refuse(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(rd *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (r->errlen)
        vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return -2;
}

static const char *role_name(pms_chat_role role)
{
    return role == PMS_ROLE_SYSTEM ? "system" : role == PMS_ROLE_USER ? "user" : "assistant";
}

/* The templates' own checks, with their own words. */
static const char ALTERNATE[] = "Conversation roles must alternate user/assistant/user/assistant/...";
static const char ALTERNATE_SYS[] =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";

/* 0 when msgs[0..n) go user, assistant, user, ... */
static int alternates(const pms_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((msgs[i].role == PMS_ROLE_USER) != (i % 2 == 0))
            return -1;
    return 0;
}

/* ---- the formats ------------------------------------------------------------ */

static int render_plain(rd *r, const pms_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const pms_chat_msg *m = &msgs[i];
        put(r, m->role == PMS_ROLE_USER ? "User: " : m->role == PMS_ROLE_ASSISTANT ? "Assistant: " : "");
        put_msg(r, m);
        put(r, m->role == PMS_ROLE_SYSTEM ? "\n\n" : "\n");
    }
    put(r, "Assistant:");
    return 0;
}

static void chatml_turn(rd *r, const pms_chat_msg *m)
{
    put(r, "<|im_start|>");
    put(r, role_name(m->role));
    put(r, "\n");
    put_msg(r, m);
    put(r, "<|im_end|>\n");
}

static int render_chatml(rd *r, const pms_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        chatml_turn(r, &msgs[i]);
    put(r, "<|im_start|>assistant\n");
    return 0;
}

/* The first system message opens the prompt (else Qwen's default) and is
 * not repeated; later ones are ordinary turns. */
static int render_qwen25(rd *r, const pms_chat_msg *msgs, size_t n)
{
    if (n && msgs[0].role == PMS_ROLE_SYSTEM)
        chatml_turn(r, &msgs[0]);
    else
        put(r, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
    for (size_t i = 0; i < n; i++)
        if (!(i == 0 && msgs[i].role == PMS_ROLE_SYSTEM))
            chatml_turn(r, &msgs[i]);
    put(r, "<|im_start|>assistant\n");
    return 0;
}

static void llama3_turn(rd *r, const char *role, const pms_chat_msg *m)
{
    put(r, "<|start_header_id|>");
    put(r, role);
    put(r, "<|end_header_id|>\n\n");
    put_trimmed(r, m);
    put(r, "<|eot_id|>");
}

static int render_llama3(rd *r, const pms_chat_msg *msgs, size_t n)
{
    put(r, "<|begin_of_text|>");
    for (size_t i = 0; i < n; i++)
        llama3_turn(r, role_name(msgs[i].role), &msgs[i]);
    put(r, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* 3.1 and later: one system header always, carrying the knowledge cut-off,
 * the date and the (trimmed) first system message. */
static int render_llama31(rd *r, const char *date, const pms_chat_msg *msgs, size_t n)
{
    size_t first = n && msgs[0].role == PMS_ROLE_SYSTEM ? 1 : 0;
    put(r, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
    put(r, "Cutting Knowledge Date: December 2023\nToday Date: ");
    put(r, date ? date : "26 Jul 2024");
    put(r, "\n\n");
    if (first)
        put_trimmed(r, &msgs[0]);
    put(r, "<|eot_id|>");
    for (size_t i = first; i < n; i++)
        llama3_turn(r, role_name(msgs[i].role), &msgs[i]);
    put(r, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return 0;
}

/* v0: alternating user/assistant only; a turn ends with EOS. */
static int render_mistral_v0(rd *r, const pms_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if ((msgs[i].role == PMS_ROLE_USER) != (i % 2 == 0))
            return refuse(r, "%s", ALTERNATE);
        if (msgs[i].role == PMS_ROLE_SYSTEM)
            return refuse(r, "Only user and assistant roles are supported!");
    }
    put(r, "<s>");
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].role == PMS_ROLE_USER) {
            put(r, "[INST] ");
            put_msg(r, &msgs[i]);
            put(r, " [/INST]");
        } else {
            put_msg(r, &msgs[i]);
            put(r, "</s>");
        }
    }
    return 0;
}

/* v1 and v3 take an optional leading system message out of the loop; v1
 * writes it into the first user turn, v3 into the last message when that
 * is a user turn (otherwise the template drops it). Neither has a
 * generation prompt: the prompt ends with [/INST]. */
static int render_mistral(rd *r, int v3, const pms_chat_msg *msgs, size_t n)
{
    const pms_chat_msg *sys = n && msgs[0].role == PMS_ROLE_SYSTEM ? &msgs[0] : NULL;
    const pms_chat_msg *loop = sys ? msgs + 1 : msgs;
    size_t ln = sys ? n - 1 : n;
    /* v3 checks the alternation of the whole loop first; v1 checks each
     * message as it goes, alternation before role. */
    static const char ROLES[] = "Only user and assistant roles are supported, with the exception of an initial "
                                "optional system message!";
    if (v3 && alternates(loop, ln))
        return refuse(r, "%s", ALTERNATE_SYS);
    for (size_t i = 0; i < ln; i++) {
        if (!v3 && (loop[i].role == PMS_ROLE_USER) != (i % 2 == 0))
            return refuse(r, "%s", ALTERNATE_SYS);
        if (loop[i].role == PMS_ROLE_SYSTEM)
            return refuse(r, "%s", ROLES);
    }
    put(r, "<s>");
    for (size_t i = 0; i < ln; i++) {
        const pms_chat_msg *m = &loop[i];
        if (m->role == PMS_ROLE_USER) {
            put(r, v3 ? "[INST] " : " [INST] ");
            if (sys && (v3 ? i + 1 == ln : i == 0)) {
                put_msg(r, sys);
                put(r, "\n\n");
            }
            put_msg(r, m);
            put(r, v3 ? "[/INST]" : " [/INST]");
        } else if (m->role == PMS_ROLE_ASSISTANT) {
            put(r, " ");
            if (v3)
                put_trimmed(r, m);
            else
                put_msg(r, m);
            put(r, "</s>");
        }
    }
    return 0;
}

static int render_phi3(rd *r, int skip_empty_system, const pms_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const pms_chat_msg *m = &msgs[i];
        if (m->role == PMS_ROLE_SYSTEM && skip_empty_system && m->len == 0)
            continue;
        put(r, m->role == PMS_ROLE_SYSTEM ? "<|system|>\n" : m->role == PMS_ROLE_USER ? "<|user|>\n" : "<|assistant|>\n");
        put_msg(r, m);
        put(r, "<|end|>\n");
    }
    put(r, "<|assistant|>\n");
    return 0;
}

/* The first release writes the assistant header after every user turn
 * and has no system role: its template leaves system messages out. */
static int render_phi3_v0(rd *r, const pms_chat_msg *msgs, size_t n)
{
    put(r, "<s>");
    for (size_t i = 0; i < n; i++) {
        const pms_chat_msg *m = &msgs[i];
        if (m->role == PMS_ROLE_USER) {
            put(r, "<|user|>\n");
            put_msg(r, m);
            put(r, "<|end|>\n<|assistant|>\n");
        } else if (m->role == PMS_ROLE_ASSISTANT) {
            put_msg(r, m);
            put(r, "<|end|>\n");
        }
    }
    return 0;
}

/* Gemma's templates refuse a system message; we fold a leading one into
 * the first user turn the way Gemma 3's template does (its text, then a
 * blank line, before the trimmed user text). The rest alternates. */
static int render_gemma(rd *r, int bos, const pms_chat_msg *msgs, size_t n)
{
    const pms_chat_msg *sys = n && msgs[0].role == PMS_ROLE_SYSTEM ? &msgs[0] : NULL;
    const pms_chat_msg *loop = sys ? msgs + 1 : msgs;
    size_t ln = sys ? n - 1 : n;
    if (alternates(loop, ln))
        return refuse(r, "%s", ALTERNATE);
    if (bos)
        put(r, "<bos>");
    for (size_t i = 0; i < ln; i++) {
        put(r, "<start_of_turn>");
        put(r, loop[i].role == PMS_ROLE_ASSISTANT ? "model" : role_name(loop[i].role));
        put(r, "\n");
        if (i == 0 && sys) {
            put_msg(r, sys);
            put(r, "\n\n");
        }
        put_trimmed(r, &loop[i]);
        put(r, "<end_of_turn>\n");
    }
    put(r, "<start_of_turn>model\n");
    return 0;
}

static int ascii_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

int pms_chat_tokenizer_text(pms_chat_format f, const char *text, size_t len, pms_buf *out)
{
    static const char *const rstrip[] = {"<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "</s>"};
    if (f != PMS_CHAT_PHI3 && f != PMS_CHAT_PHI35 && f != PMS_CHAT_PHI3_V0)
        return 0;
    size_t i = 0, from = 0;
    while (i < len) {
        size_t hit = 0;
        for (size_t k = 0; !hit && k < sizeof rstrip / sizeof rstrip[0]; k++) {
            size_t n = strlen(rstrip[k]);
            if (n <= len - i && memcmp(text + i, rstrip[k], n) == 0)
                hit = n;
        }
        if (!hit) {
            i++;
            continue;
        }
        i += hit;
        if (pms_buf_append(out, text + from, i - from))
            return -1;
        while (i < len && ascii_space(text[i]))
            i++;
        from = i;
    }
    return pms_buf_append(out, text + from, len - from) ? -1 : 1;
}

int pms_chat_render(pms_chat_format f, const char *date, const pms_chat_msg *msgs, size_t n, pms_buf *out,
                    char *err, size_t errlen)
{
    rd r = {out, 0, err, errlen};
    if (errlen)
        err[0] = '\0';
    int rc;
    switch (f) {
    case PMS_CHAT_PLAIN: rc = render_plain(&r, msgs, n); break;
    case PMS_CHAT_CHATML: rc = render_chatml(&r, msgs, n); break;
    case PMS_CHAT_QWEN25: rc = render_qwen25(&r, msgs, n); break;
    case PMS_CHAT_LLAMA3: rc = render_llama3(&r, msgs, n); break;
    case PMS_CHAT_LLAMA31: rc = render_llama31(&r, NULL, msgs, n); break;
    case PMS_CHAT_LLAMA32: rc = render_llama31(&r, date, msgs, n); break;
    case PMS_CHAT_MISTRAL_V0: rc = render_mistral_v0(&r, msgs, n); break;
    case PMS_CHAT_MISTRAL_V1: rc = render_mistral(&r, 0, msgs, n); break;
    case PMS_CHAT_MISTRAL_V3: rc = render_mistral(&r, 1, msgs, n); break;
    case PMS_CHAT_PHI3: rc = render_phi3(&r, 0, msgs, n); break;
    case PMS_CHAT_PHI35: rc = render_phi3(&r, 1, msgs, n); break;
    case PMS_CHAT_PHI3_V0: rc = render_phi3_v0(&r, msgs, n); break;
    case PMS_CHAT_GEMMA: rc = render_gemma(&r, 0, msgs, n); break;
    case PMS_CHAT_GEMMA2: rc = render_gemma(&r, 1, msgs, n); break;
    default: rc = refuse(&r, "no chat template");
    }
    if (rc == 0 && r.full)
        rc = -1;
    return rc;
}
