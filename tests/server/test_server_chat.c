/* test_server_chat.c — chat template recognition and rendering (chat.h).
 *
 * The expected prompts are written out by hand from the published
 * templates (the .jinja files in tests/server/chat, read as Jinja runs them);
 * tests/server/chat_jinja.py checks the same renderings against Jinja
 * itself where python3-jinja2 is installed. Detection runs on the real
 * template texts.
 *
 *   test_server_chat CASE [FIXTURE_DIR]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "pm_check.h"
#include "text.h"

#define M(role, s) {role, s, sizeof(s) - 1}
#define SYS PMS_ROLE_SYSTEM
#define USR PMS_ROLE_USER
#define AST PMS_ROLE_ASSISTANT

/* System, then two user turns around an assistant one. */
static const pms_chat_msg conv4[] = {M(SYS, "Be brief."), M(USR, "Hi"), M(AST, "Hello!"), M(USR, "Why?")};
/* The same without the system message. */
static const pms_chat_msg conv3[] = {M(USR, "Hi"), M(AST, "Hello!"), M(USR, "Why?")};
/* One user message. */
static const pms_chat_msg conv1[] = {M(USR, "Hi")};

static const char *fixtures = "tests/server/chat";

static void expect(pms_chat_format f, const char *date, const pms_chat_msg *msgs, size_t n, const char *want)
{
    pms_buf b;
    char err[200];
    pms_buf_init(&b, 0);
    CHECK_INT_EQ(pms_chat_render(f, date, msgs, n, &b, err, sizeof err), 0);
    CHECK_STR_EQ(b.p ? b.p : "", want);
    pms_buf_free(&b);
}

static void expect_refused(pms_chat_format f, const pms_chat_msg *msgs, size_t n, const char *why)
{
    pms_buf b;
    char err[200];
    pms_buf_init(&b, 0);
    CHECK_INT_EQ(pms_chat_render(f, NULL, msgs, n, &b, err, sizeof err), -2);
    CHECK_STR_EQ(err, why);
    pms_buf_free(&b);
}

static int case_llama3(void)
{
    expect(PMS_CHAT_LLAMA3, NULL, conv4, 4,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect(PMS_CHAT_LLAMA3, NULL, conv1, 1,
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return pm_check_result();
}

static int case_llama31(void)
{
    const char *tail = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n";
    char want[1024];
    snprintf(want, sizeof want,
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
             "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>%s", tail);
    expect(PMS_CHAT_LLAMA31, NULL, conv4, 4, want);
    /* 3.1 keeps its fixed date; 3.2 writes the one it is given. */
    expect(PMS_CHAT_LLAMA31, "01 Dec 2026", conv4, 4, want);
    snprintf(want, sizeof want,
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
             "Cutting Knowledge Date: December 2023\nToday Date: 01 Dec 2026\n\nBe brief.<|eot_id|>%s", tail);
    expect(PMS_CHAT_LLAMA32, "01 Dec 2026", conv4, 4, want);
    /* Without a system message the system header is still there, empty. */
    snprintf(want, sizeof want,
             "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
             "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>%s", tail);
    expect(PMS_CHAT_LLAMA32, NULL, conv3, 3, want);
    return pm_check_result();
}

static int case_chatml(void)
{
    const char *c4 = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                     "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
                     "<|im_start|>assistant\n";
    expect(PMS_CHAT_CHATML, NULL, conv4, 4, c4);
    expect(PMS_CHAT_QWEN25, NULL, conv4, 4, c4);
    expect(PMS_CHAT_CHATML, NULL, conv1, 1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* Qwen 2.5 supplies its own system message when there is none. */
    expect(PMS_CHAT_QWEN25, NULL, conv1, 1,
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    /* A later system message is an ordinary turn. */
    static const pms_chat_msg late[] = {M(USR, "Hi"), M(SYS, "Be brief.")};
    expect(PMS_CHAT_QWEN25, NULL, late, 2,
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>assistant\n");
    return pm_check_result();
}

static int case_mistral(void)
{
    expect(PMS_CHAT_MISTRAL_V0, NULL, conv3, 3, "<s>[INST] Hi [/INST]Hello!</s>[INST] Why? [/INST]");
    /* v1: the system text opens the first user turn. */
    expect(PMS_CHAT_MISTRAL_V1, NULL, conv4, 4, "<s> [INST] Be brief.\n\nHi [/INST] Hello!</s> [INST] Why? [/INST]");
    expect(PMS_CHAT_MISTRAL_V1, NULL, conv3, 3, "<s> [INST] Hi [/INST] Hello!</s> [INST] Why? [/INST]");
    /* v3: it opens the last one; the assistant text is trimmed. */
    expect(PMS_CHAT_MISTRAL_V3, NULL, conv4, 4, "<s>[INST] Hi[/INST] Hello!</s>[INST] Be brief.\n\nWhy?[/INST]");
    static const pms_chat_msg pad[] = {M(USR, "Hi "), M(AST, " Hello! \n"), M(USR, "Why?")};
    expect(PMS_CHAT_MISTRAL_V3, NULL, pad, 3, "<s>[INST] Hi [/INST] Hello!</s>[INST] Why?[/INST]");
    expect(PMS_CHAT_MISTRAL_V1, NULL, pad, 3, "<s> [INST] Hi  [/INST]  Hello! \n</s> [INST] Why? [/INST]");
    /* v3 drops the system message when the last turn is the assistant's,
     * as its template does. */
    static const pms_chat_msg ends[] = {M(SYS, "Be brief."), M(USR, "Hi"), M(AST, "Hello!")};
    expect(PMS_CHAT_MISTRAL_V3, NULL, ends, 3, "<s>[INST] Hi[/INST] Hello!</s>");
    return pm_check_result();
}

static int case_phi3(void)
{
    const char *c4 = "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
                     "<|user|>\nWhy?<|end|>\n<|assistant|>\n";
    expect(PMS_CHAT_PHI3, NULL, conv4, 4, c4);
    expect(PMS_CHAT_PHI35, NULL, conv4, 4, c4);
    static const pms_chat_msg empty_sys[] = {M(SYS, ""), M(USR, "Hi")};
    expect(PMS_CHAT_PHI3, NULL, empty_sys, 2, "<|system|>\n<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n");
    expect(PMS_CHAT_PHI35, NULL, empty_sys, 2, "<|user|>\nHi<|end|>\n<|assistant|>\n");
    /* The first release has no system role: its template leaves it out. */
    expect(PMS_CHAT_PHI3_V0, NULL, conv4, 4,
           "<s><|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|user|>\nWhy?<|end|>\n<|assistant|>\n");
    return pm_check_result();
}

static int case_gemma(void)
{
    const char *c3 = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
                     "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n";
    expect(PMS_CHAT_GEMMA, NULL, conv3, 3, c3);
    char want[512];
    snprintf(want, sizeof want, "<bos>%s", c3);
    expect(PMS_CHAT_GEMMA2, NULL, conv3, 3, want);
    /* A leading system message is folded into the first user turn. */
    expect(PMS_CHAT_GEMMA2, NULL, conv4, 4,
           "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
           "<start_of_turn>user\nWhy?<end_of_turn>\n<start_of_turn>model\n");
    return pm_check_result();
}

static int case_plain(void)
{
    expect(PMS_CHAT_PLAIN, NULL, conv4, 4, "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: Why?\nAssistant:");
    return pm_check_result();
}

/* Jinja's trim is Python's str.strip(): Unicode whitespace (U+00A0,
 * U+3000, U+2028) goes, other characters (U+200B is not whitespace) stay. */
static int case_trim(void)
{
    static const pms_chat_msg ws[] = {M(USR, " \t\xc2\xa0Hi there\n\xe3\x80\x80\xe2\x80\xa8")};
    expect(PMS_CHAT_LLAMA3, NULL, ws, 1,
           "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    static const pms_chat_msg zw[] = {M(USR, "\xe2\x80\x8bHi\xe2\x80\x8b "), M(AST, " \x1f"), M(USR, "\xe6\x97\xa5")};
    expect(PMS_CHAT_GEMMA, NULL, zw, 3,
           "<start_of_turn>user\n\xe2\x80\x8bHi\xe2\x80\x8b<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n"
           "<start_of_turn>user\n\xe6\x97\xa5<end_of_turn>\n<start_of_turn>model\n");
    /* ChatML does not trim. */
    expect(PMS_CHAT_CHATML, NULL, ws, 1,
           "<|im_start|>user\n \t\xc2\xa0Hi there\n\xe3\x80\x80\xe2\x80\xa8<|im_end|>\n<|im_start|>assistant\n");
    return pm_check_result();
}

static int case_refused(void)
{
    static const char alt[] = "Conversation roles must alternate user/assistant/user/assistant/...";
    static const char alt_sys[] =
        "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
    static const char roles[] =
        "Only user and assistant roles are supported, with the exception of an initial optional system message!";
    static const pms_chat_msg uu[] = {M(USR, "a"), M(USR, "b")};
    static const pms_chat_msg a1[] = {M(AST, "a")};
    static const pms_chat_msg us[] = {M(USR, "a"), M(SYS, "b")};
    static const pms_chat_msg ss[] = {M(SYS, "a"), M(SYS, "b")};
    expect_refused(PMS_CHAT_GEMMA2, uu, 2, alt);
    expect_refused(PMS_CHAT_GEMMA, a1, 1, alt);
    expect_refused(PMS_CHAT_GEMMA2, ss, 2, alt);
    expect_refused(PMS_CHAT_MISTRAL_V0, conv4, 4, alt);
    expect_refused(PMS_CHAT_MISTRAL_V0, us, 2, "Only user and assistant roles are supported!");
    expect_refused(PMS_CHAT_MISTRAL_V1, uu, 2, alt_sys);
    expect_refused(PMS_CHAT_MISTRAL_V1, us, 2, roles);
    expect_refused(PMS_CHAT_MISTRAL_V3, a1, 1, alt_sys);
    expect_refused(PMS_CHAT_MISTRAL_V3, us, 2, roles);
    /* Gemma renders a system turn where alternation allows it, as its
     * template does (the role name is written as given). */
    static const pms_chat_msg usu[] = {M(USR, "a"), M(SYS, "b")};
    expect(PMS_CHAT_GEMMA, NULL, usu, 2,
           "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>system\nb<end_of_turn>\n<start_of_turn>model\n");
    return pm_check_result();
}

/* Phi-3's role and end tokens are rstrip: the text handed to the
 * tokenizer drops the ASCII whitespace after them (not after <s>, and
 * other formats hand the prompt over as it is). */
static int case_rstrip(void)
{
    const char *in = "<s> x<|system|>\nBe  brief. <|end|>\n<|user|>\n Hi\n\n<|end|>\n<|assistant|>\n";
    pms_buf b;
    pms_buf_init(&b, 0);
    CHECK_INT_EQ(pms_chat_tokenizer_text(PMS_CHAT_PHI3, in, strlen(in), &b), 1);
    CHECK_STR_EQ(b.p, "<s> x<|system|>Be  brief. <|end|><|user|>Hi\n\n<|end|><|assistant|>");
    pms_buf_free(&b);
    pms_buf_init(&b, 0);
    CHECK_INT_EQ(pms_chat_tokenizer_text(PMS_CHAT_PHI3_V0, "a</s> \t\vb</s>", 13, &b), 1);
    CHECK_STR_EQ(b.p, "a</s>b</s>");
    pms_buf_free(&b);
    pms_buf_init(&b, 0);
    CHECK_INT_EQ(pms_chat_tokenizer_text(PMS_CHAT_PHI35, "", 0, &b), 1);
    CHECK_INT_EQ(b.n, 0);
    CHECK_INT_EQ(pms_chat_tokenizer_text(PMS_CHAT_LLAMA3, in, strlen(in), &b), 0);
    CHECK_INT_EQ(b.n, 0);
    pms_buf_free(&b);
    pms_buf_init(&b, 8);
    CHECK_INT_EQ(pms_chat_tokenizer_text(PMS_CHAT_PHI3, in, strlen(in), &b), -1);
    pms_buf_free(&b);
    return pm_check_result();
}

/* A full output buffer is -1, not a refusal. */
static int case_limit(void)
{
    pms_buf b;
    char err[64];
    pms_buf_init(&b, 10);
    CHECK_INT_EQ(pms_chat_render(PMS_CHAT_CHATML, NULL, conv4, 4, &b, err, sizeof err), -1);
    pms_buf_free(&b);
    pms_buf_init(&b, 10);
    CHECK_INT_EQ(pms_chat_render(PMS_CHAT_UNKNOWN, NULL, conv4, 4, &b, err, sizeof err), -2);
    pms_buf_free(&b);
    return pm_check_result();
}

static int case_names(void)
{
    for (int f = 0; f < PMS_CHAT_N_FORMATS; f++) {
        const char *name = pms_chat_format_name((pms_chat_format)f);
        CHECK_INT_EQ(pms_chat_format_parse(name), f);
        CHECK(strstr(pms_chat_format_names(), name) != NULL);
    }
    CHECK_STR_EQ(pms_chat_format_name(PMS_CHAT_LLAMA31), "llama3.1");
    CHECK_STR_EQ(pms_chat_format_name(PMS_CHAT_UNKNOWN), "unknown");
    CHECK_INT_EQ(pms_chat_format_parse("llama2"), PMS_CHAT_UNKNOWN);
    CHECK_INT_EQ(pms_chat_format_parse(NULL), PMS_CHAT_UNKNOWN);
    CHECK_STR_EQ(pms_chat_bos_text(PMS_CHAT_GEMMA2), "<bos>");
    CHECK_STR_EQ(pms_chat_bos_text(PMS_CHAT_QWEN25), "");
    CHECK_STR_EQ(pms_chat_end_of_turn(PMS_CHAT_LLAMA32), "<|eot_id|>");
    CHECK_STR_EQ(pms_chat_end_of_turn(PMS_CHAT_PHI35), "<|end|>");
    CHECK_STR_EQ(pms_chat_end_of_turn(PMS_CHAT_GEMMA), "<end_of_turn>");
    CHECK_STR_EQ(pms_chat_end_of_turn(PMS_CHAT_MISTRAL_V3), "");
    CHECK_STR_EQ(pms_chat_stop_text(PMS_CHAT_PLAIN), "\nUser:");
    CHECK_INT_EQ(pms_chat_needs_date(PMS_CHAT_LLAMA32), 1);
    CHECK_INT_EQ(pms_chat_needs_date(PMS_CHAT_LLAMA31), 0);
    return pm_check_result();
}

/* The whole file at dir/name, NUL-terminated; *len its size. */
static char *slurp(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fixtures, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    char *p = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *q = realloc(p, cap);
            if (!q)
                break;
            p = q;
        }
        size_t got = fread(p + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    if (p)
        p[n] = '\0';
    *len = n;
    return p;
}

static void expect_detect(const char *file, pms_chat_format want, const char *family)
{
    size_t len = 0;
    char *t = slurp(file, &len);
    REQUIRE(t != NULL);
    const char *fam = "unset";
    pms_chat_format got = pms_chat_detect(t, len, &fam);
    if (got != want)
        fprintf(stderr, "  %s: detected %s, want %s\n", file, pms_chat_format_name(got), pms_chat_format_name(want));
    CHECK_INT_EQ(got, want);
    if (family)
        CHECK_STR_EQ(fam ? fam : "(none)", family);
    else
        CHECK(fam == NULL);
    free(t);
}

static int case_detect(void)
{
    expect_detect("llama3-release.jinja", PMS_CHAT_LLAMA3, NULL);
    expect_detect("llama3-8b-instruct.jinja", PMS_CHAT_LLAMA3, NULL);
    expect_detect("llama3.1-8b-instruct.jinja", PMS_CHAT_LLAMA31, NULL);
    expect_detect("llama3.3-70b-instruct.jinja", PMS_CHAT_LLAMA31, NULL);
    expect_detect("llama3.2-3b-instruct.jinja", PMS_CHAT_LLAMA32, NULL);
    expect_detect("qwen2.5-7b-instruct.jinja", PMS_CHAT_QWEN25, NULL);
    expect_detect("chatml-openhermes-2.5.jinja", PMS_CHAT_CHATML, NULL);
    expect_detect("mistral-7b-instruct-v0.2-old.jinja", PMS_CHAT_MISTRAL_V0, NULL);
    expect_detect("mistral-7b-instruct-v0.2.jinja", PMS_CHAT_MISTRAL_V1, NULL);
    expect_detect("mistral-v3.jinja", PMS_CHAT_MISTRAL_V3, NULL);
    expect_detect("phi3-mini-4k-instruct.jinja", PMS_CHAT_PHI3, NULL);
    expect_detect("phi3.5-mini-instruct.jinja", PMS_CHAT_PHI35, NULL);
    expect_detect("phi3-mini-first-release.jinja", PMS_CHAT_PHI3_V0, NULL);
    expect_detect("gemma-7b-it.jinja", PMS_CHAT_GEMMA, NULL);
    expect_detect("gemma-2-2b-it.jinja", PMS_CHAT_GEMMA2, NULL);
    /* Templates of other shapes: refused, with the family they resemble. */
    expect_detect("unknown-mistral-nemo.jinja", PMS_CHAT_UNKNOWN, "Mistral / Llama 2");
    expect_detect("unknown-phi3-medium.jinja", PMS_CHAT_UNKNOWN, "Phi-3");
    expect_detect("unknown-phi4.jinja", PMS_CHAT_UNKNOWN, "ChatML");
    expect_detect("unknown-hermes-2-pro-llama3-tool-use.jinja", PMS_CHAT_UNKNOWN, "ChatML");
    expect_detect("unknown-deepseek-r1-distill-llama.jinja", PMS_CHAT_UNKNOWN, NULL);
    expect_detect("unknown-command-r-plus.jinja", PMS_CHAT_UNKNOWN, NULL);
    return pm_check_result();
}

/* Near misses of a known template are refused, not rendered as it. */
static int case_variants(void)
{
    const char *fam;
    const char *llama3 = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
                         "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] "
                         "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
                         "{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}";
    CHECK_INT_EQ(pms_chat_detect(llama3, strlen(llama3), &fam), PMS_CHAT_LLAMA3);
    /* The same with double quotes in place of single ones. */
    char dq[1024];
    snprintf(dq, sizeof dq, "%s", llama3);
    for (char *p = dq; *p; p++)
        if (*p == '\'')
            *p = '"';
    CHECK_INT_EQ(pms_chat_detect(dq, strlen(dq), &fam), PMS_CHAT_LLAMA3);
    /* Without the trim: another template. */
    char v[1024];
    snprintf(v, sizeof v, "%s", llama3);
    char *at = strstr(v, " | trim");
    REQUIRE(at != NULL);
    memmove(at, at + 7, strlen(at + 7) + 1);
    CHECK_INT_EQ(pms_chat_detect(v, strlen(v), &fam), PMS_CHAT_UNKNOWN);
    CHECK_STR_EQ(fam, "Llama 3");
    /* ChatML with a default system message (Qwen 2's shape): not the
     * plain ChatML format, whose prompt would lack that message. */
    const char *qwen2 = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                        "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
                        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
    CHECK_INT_EQ(pms_chat_detect(qwen2, strlen(qwen2), &fam), PMS_CHAT_UNKNOWN);
    CHECK_STR_EQ(fam, "ChatML");
    /* Llama 3 with a system message of its own put in front. */
    char sys3[1400];
    snprintf(sys3, sizeof sys3, "{%% if messages[0]['role'] != 'system' %%}{{ bos_token + "
             "'<|start_header_id|>system<|end_header_id|>\n\nBe nice.<|eot_id|>' }}{%% endif %%}%s", llama3);
    CHECK_INT_EQ(pms_chat_detect(sys3, strlen(sys3), &fam), PMS_CHAT_UNKNOWN);
    CHECK_STR_EQ(fam, "Llama 3");
    /* The length is honoured, and a NUL inside is refused. */
    CHECK_INT_EQ(pms_chat_detect(llama3, 40, &fam), PMS_CHAT_UNKNOWN);
    char nul[1100];
    size_t n = strlen(llama3);
    memcpy(nul, "\0", 1);
    memcpy(nul + 1, llama3, n);
    CHECK_INT_EQ(pms_chat_detect(nul, n + 1, &fam), PMS_CHAT_UNKNOWN);
    CHECK_INT_EQ(pms_chat_detect(NULL, 0, &fam), PMS_CHAT_PLAIN);
    CHECK(fam == NULL);
    CHECK_INT_EQ(pms_chat_detect("{{ messages | custom }}", 23, NULL), PMS_CHAT_UNKNOWN);
    CHECK_INT_EQ(pms_chat_detect("", 0, &fam), PMS_CHAT_UNKNOWN);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"llama3", case_llama3}, {"llama31", case_llama31}, {"chatml", case_chatml},   {"mistral", case_mistral},
        {"phi3", case_phi3},     {"gemma", case_gemma},     {"plain", case_plain},     {"trim", case_trim},
        {"refused", case_refused}, {"limit", case_limit},   {"names", case_names},     {"detect", case_detect},
        {"variants", case_variants}, {"rstrip", case_rstrip},
    };
    if (argc == 3)
        fixtures = argv[2];
    for (size_t i = 0; argc >= 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_server_chat CASE [FIXTURE_DIR]\n");
    return 2;
}
