/* chat.c — chat template recognition and rendering (see chat.h). */
#include "chat.h"

#include <string.h>

static int contains(const char *hay, size_t len, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= len; i++)
        if (memcmp(hay + i, needle, nl) == 0)
            return 1;
    return 0;
}

pms_chat_format pms_chat_detect(const char *tmpl, size_t len)
{
    if (!tmpl)
        return PMS_CHAT_PLAIN;
    /* Most specific markers first: a Llama 3 template also mentions
     * neither [INST] nor <|im_start|>, but a Zephyr one could quote </s>. */
    if (contains(tmpl, len, "<|start_header_id|>"))
        return PMS_CHAT_LLAMA3;
    if (contains(tmpl, len, "<|im_start|>"))
        return PMS_CHAT_CHATML;
    if (contains(tmpl, len, "[INST]"))
        return PMS_CHAT_LLAMA2;
    if (contains(tmpl, len, "<|user|>"))
        return PMS_CHAT_ZEPHYR;
    return PMS_CHAT_PLAIN;
}

const char *pms_chat_format_name(pms_chat_format f)
{
    switch (f) {
    case PMS_CHAT_CHATML: return "chatml";
    case PMS_CHAT_LLAMA2: return "llama2";
    case PMS_CHAT_LLAMA3: return "llama3";
    case PMS_CHAT_ZEPHYR: return "zephyr";
    default: return "plain";
    }
}

const char *pms_chat_end_of_turn(pms_chat_format f)
{
    switch (f) {
    case PMS_CHAT_CHATML: return "<|im_end|>";
    case PMS_CHAT_LLAMA3: return "<|eot_id|>";
    case PMS_CHAT_ZEPHYR: return "</s>";
    case PMS_CHAT_LLAMA2: return "[INST]";
    default: return "\nUser:";
    }
}

static const char *role_name(pms_chat_role r)
{
    return r == PMS_ROLE_SYSTEM ? "system" : r == PMS_ROLE_USER ? "user" : "assistant";
}

static int put(pms_buf *out, const char *s)
{
    return pms_buf_puts(out, s);
}

static int put_msg(pms_buf *out, const pms_chat_msg *m)
{
    return pms_buf_append(out, m->content, m->len);
}

/* <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n */
static int render_chatml(const pms_chat_msg *msgs, size_t n, pms_buf *out)
{
    for (size_t i = 0; i < n; i++)
        if (put(out, "<|im_start|>") || put(out, role_name(msgs[i].role)) || put(out, "\n") ||
            put_msg(out, &msgs[i]) || put(out, "<|im_end|>\n"))
            return -1;
    return put(out, "<|im_start|>assistant\n");
}

/* <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|> ...
 * then the assistant header. BOS comes from the tokenizer. */
static int render_llama3(const pms_chat_msg *msgs, size_t n, pms_buf *out)
{
    for (size_t i = 0; i < n; i++)
        if (put(out, "<|start_header_id|>") || put(out, role_name(msgs[i].role)) ||
            put(out, "<|end_header_id|>\n\n") || put_msg(out, &msgs[i]) || put(out, "<|eot_id|>"))
            return -1;
    return put(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* <|{role}|>\n{content}</s>\n ... <|assistant|>\n */
static int render_zephyr(const pms_chat_msg *msgs, size_t n, pms_buf *out)
{
    for (size_t i = 0; i < n; i++)
        if (put(out, "<|") || put(out, role_name(msgs[i].role)) || put(out, "|>\n") ||
            put_msg(out, &msgs[i]) || put(out, "</s>\n"))
            return -1;
    return put(out, "<|assistant|>\n");
}

/* [INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} [INST] ...
 * The system block goes inside the first user turn, as Llama 2 was
 * trained. Turn separators that are special tokens in the original
 * (</s><s>) are left to the tokenizer's BOS; a space separates turns. */
static int render_llama2(const pms_chat_msg *msgs, size_t n, pms_buf *out)
{
    const pms_chat_msg *sys = NULL;
    for (size_t i = 0; i < n; i++) {
        const pms_chat_msg *m = &msgs[i];
        if (m->role == PMS_ROLE_SYSTEM) {
            sys = m;
            continue;
        }
        if (m->role == PMS_ROLE_USER) {
            if ((out->n && put(out, " ")) || put(out, "[INST] "))
                return -1;
            if (sys && (put(out, "<<SYS>>\n") || put_msg(out, sys) || put(out, "\n<</SYS>>\n\n")))
                return -1;
            sys = NULL;
            if (put_msg(out, m) || put(out, " [/INST]"))
                return -1;
        } else if (put(out, " ") || put_msg(out, m)) {
            return -1;
        }
    }
    return 0;
}

static int render_plain(const pms_chat_msg *msgs, size_t n, pms_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        const pms_chat_msg *m = &msgs[i];
        const char *head = m->role == PMS_ROLE_USER ? "User: " : m->role == PMS_ROLE_ASSISTANT ? "Assistant: " : "";
        const char *tail = m->role == PMS_ROLE_SYSTEM ? "\n\n" : "\n";
        if (put(out, head) || put_msg(out, m) || put(out, tail))
            return -1;
    }
    return put(out, "Assistant:");
}

int pms_chat_render(pms_chat_format f, const pms_chat_msg *msgs, size_t n, pms_buf *out)
{
    switch (f) {
    case PMS_CHAT_CHATML: return render_chatml(msgs, n, out);
    case PMS_CHAT_LLAMA2: return render_llama2(msgs, n, out);
    case PMS_CHAT_LLAMA3: return render_llama3(msgs, n, out);
    case PMS_CHAT_ZEPHYR: return render_zephyr(msgs, n, out);
    default: return render_plain(msgs, n, out);
    }
}
