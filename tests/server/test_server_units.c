/* test_server_units.c — the server library's pure parts, case by case:
 * UTF-8 completion and repair, stop strings, request
 * validation, the command line and the metrics exposition.
 *
 * Expected values are written out by hand from the specifications (RFC
 * 3629 and Unicode's "maximal subpart" replacement practice for UTF-8,
 * OpenAI's parameter ranges,
 * Prometheus' text format), never taken from the code under test.
 *
 *   test_server_units CASE
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "chat.h"
#include "internal.h"
#include "metrics.h"
#include "pm_check.h"
#include "request.h"
#include "server.h"
#include "text.h"

static void check_complete(const char *s, size_t n, size_t want)
{
    size_t got = pms_utf8_complete(s, n);
    if (got != want)
        fprintf(stderr, "complete(%zu bytes) = %zu, want %zu\n", n, got, want);
    CHECK_INT_EQ(got, want);
}

static int case_utf8_complete(void)
{
    check_complete("", 0, 0);
    check_complete("abc", 3, 3);
    check_complete("a\xC3", 2, 1);          /* é cut after its lead */
    check_complete("a\xC3\xA9", 3, 3);
    check_complete("\xE2\x82", 2, 0);       /* € cut */
    check_complete("\xE2\x82\xAC", 3, 3);
    check_complete("x\xF0\x9F\x98", 4, 1);  /* 😀 cut after 3 of 4 */
    check_complete("\xF0\x9F\x98\x80", 4, 4);
    check_complete("\xC3" "A", 2, 2);       /* invalid: complete, replaced later */
    check_complete("\xFF", 1, 1);
    check_complete("\xED\xA0", 2, 2);       /* surrogate: invalid, not held */
    check_complete("\xF4\x90", 2, 2);       /* above U+10FFFF: invalid */
    check_complete("\xE0\x80", 2, 2);       /* overlong: invalid */
    check_complete("\x80\x80\x80", 3, 3);   /* stray continuations */
    return pm_check_result();
}

static void check_repair(const char *in, size_t n, const char *want)
{
    pms_buf b;
    pms_buf_init(&b, 0);
    CHECK_INT_EQ(pms_utf8_repair(&b, in, n), 0);
    CHECK_STR_EQ(b.p ? b.p : "", want);
    pms_buf_free(&b);
}

#define FFFD "\xEF\xBF\xBD"

static int case_utf8_repair(void)
{
    check_repair("plain", 5, "plain");
    check_repair("a\xFF" "b", 3, "a" FFFD "b");
    check_repair("\xC0\xAF", 2, FFFD FFFD);           /* overlong '/' */
    check_repair("\xE2\x82", 2, FFFD);                /* truncated at the end */
    check_repair("\xE2\x82" "A", 3, FFFD "A");        /* truncated mid-text */
    check_repair("\xED\xA0\x80", 3, FFFD FFFD FFFD);  /* a surrogate */
    check_repair("\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD);
    check_repair("\xE2\x82\xAC\xF0\x9F\x98\x80", 7, "\xE2\x82\xAC\xF0\x9F\x98\x80");
    check_repair("", 0, "");
    pms_buf b;
    pms_buf_init(&b, 4);
    CHECK_INT_EQ(pms_utf8_repair(&b, "\xFF\xFF", 2), -1); /* 6 bytes over a limit of 4 */
    pms_buf_free(&b);
    return pm_check_result();
}

static void check_quote(const char *in, size_t n, const char *want)
{
    pms_buf b;
    pms_buf_init(&b, 0);
    CHECK_INT_EQ(pms_json_quote(&b, in, n), 0);
    CHECK_STR_EQ(b.p, want);
    pms_buf_free(&b);
}

/* Escapes per RFC 8259 section 7. */
static int case_json_quote(void)
{
    check_quote("", 0, "\"\"");
    check_quote("plain text", 10, "\"plain text\"");
    check_quote("a\"b\\c/d", 7, "\"a\\\"b\\\\c/d\"");
    check_quote("\n\t\r\b\f", 5, "\"\\n\\t\\r\\b\\f\"");
    check_quote("\x01\x1b\x1f\x7f", 4, "\"\\u0001\\u001b\\u001f\x7f\"");
    check_quote("\0x", 2, "\"\\u0000x\"");
    check_quote("caf\xC3\xA9 \xE2\x82\xAC", 9, "\"caf\xC3\xA9 \xE2\x82\xAC\"");
    check_quote("a\xFF\"", 3, "\"a" FFFD "\\\"\"");
    check_quote("\xE2\x82", 2, "\"" FFFD "\"");
    pms_buf b;
    pms_buf_init(&b, 5);
    CHECK_INT_EQ(pms_json_quote(&b, "abcdef", 6), -1);
    pms_buf_free(&b);
    return pm_check_result();
}

static int case_stop(void)
{
    const char *stops[] = {"END", "wor", "\n\n"};
    size_t lens[] = {3, 3, 2};
    const char *t = "Hello END world";
    CHECK_INT_EQ(pms_stop_find(t, strlen(t), 0, stops, lens, 3), 6);
    CHECK_INT_EQ(pms_stop_find(t, strlen(t), 7, stops, lens, 3), 10);
    CHECK(pms_stop_find(t, strlen(t), 11, stops, lens, 3) == (size_t)-1);
    CHECK(pms_stop_find("EN", 2, 0, stops, lens, 3) == (size_t)-1);
    CHECK_INT_EQ(pms_stop_find("a\n\nb", 4, 0, stops, lens, 3), 1);
    CHECK_INT_EQ(pms_stop_holdback("abc EN", 6, stops, lens, 3), 2);
    CHECK_INT_EQ(pms_stop_holdback("abc E", 5, stops, lens, 3), 1);
    CHECK_INT_EQ(pms_stop_holdback("abc w", 5, stops, lens, 3), 1);
    CHECK_INT_EQ(pms_stop_holdback("abc\n", 4, stops, lens, 3), 1);
    CHECK_INT_EQ(pms_stop_holdback("abc", 3, stops, lens, 3), 0);
    CHECK_INT_EQ(pms_stop_holdback("", 0, stops, lens, 3), 0);
    CHECK_INT_EQ(pms_stop_holdback("abc EN", 6, stops, lens, 0), 0);
    return pm_check_result();
}

/* ---- requests ------------------------------------------------------------ */

static const pms_parse_ctx pctx = {"tiny", 300, 64, 100, PMS_CHAT_PLAIN};

static int case_request_valid(void)
{
    pms_req r;
    pms_err e = {0};
    const char *b1 = "{\"model\":\"tiny\",\"prompt\":\"Hi there\",\"max_tokens\":7,\"temperature\":0.5,"
                     "\"top_p\":0.9,\"top_k\":40,\"seed\":12345,\"stop\":[\"\\n\",\"END\"],\"stream\":true,"
                     "\"stream_options\":{\"include_usage\":true},\"n\":1,\"presence_penalty\":0,\"user\":\"x\"}";
    REQUIRE(pms_req_parse(&r, PMS_EP_COMPLETIONS, b1, strlen(b1), &pctx, &e) == 0);
    CHECK_STR_EQ(r.text, "Hi there");
    CHECK_INT_EQ(r.text_len, 8);
    CHECK(r.ids == NULL);
    CHECK_INT_EQ(r.max_tokens, 7);
    CHECK_NEAR(r.temperature, 0.5, 1e-7);
    CHECK_NEAR(r.top_p, 0.9, 1e-7);
    CHECK_INT_EQ(r.top_k, 40);
    CHECK_U64_EQ(r.seed, 12345);
    CHECK_INT_EQ(r.has_seed, 1);
    CHECK_INT_EQ(r.n_stop, 2);
    CHECK_STR_EQ(r.stop[0], "\n");
    CHECK_STR_EQ(r.stop[1], "END");
    CHECK_INT_EQ(r.stream, 1);
    CHECK_INT_EQ(r.include_usage, 1);
    CHECK_INT_EQ(pms_req_add_stop(&r, "END"), 0); /* already there */
    CHECK_INT_EQ(r.n_stop, 2);
    pms_req_free(&r);

    const char *b2 = "{\"prompt\":[1,2,299],\"stop\":\"x\"}";
    REQUIRE(pms_req_parse(&r, PMS_EP_COMPLETIONS, b2, strlen(b2), &pctx, &e) == 0);
    CHECK_INT_EQ(r.n_ids, 3);
    CHECK_INT_EQ(r.ids[2], 299);
    CHECK_INT_EQ(r.max_tokens, 0); /* the server's default applies */
    CHECK_NEAR(r.temperature, 1.0, 0);
    CHECK_INT_EQ(r.n_stop, 1);
    CHECK_INT_EQ(r.stream, 0);
    pms_req_free(&r);

    const char *b3 = "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":"
                     "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
                     "\"max_completion_tokens\":3,\"stop\":[\"1\",\"2\",\"3\",\"4\"]}";
    REQUIRE(pms_req_parse(&r, PMS_EP_CHAT, b3, strlen(b3), &pctx, &e) == 0);
    CHECK_STR_EQ(r.text, "S\n\nUser: ab\nAssistant:");
    CHECK_INT_EQ(r.max_tokens, 3);
    CHECK_INT_EQ(pms_req_add_stop(&r, "\nUser:"), 0); /* the implicit stop has its own slot */
    CHECK_INT_EQ(r.n_stop, 5);
    CHECK_STR_EQ(r.stop[4], "\nUser:");
    pms_req_free(&r);
    return pm_check_result();
}

typedef struct bad_case {
    pms_endpoint ep;
    const char *body;
    int status;
    const char *param; /* NULL: none expected */
} bad_case;

static const bad_case bad[] = {
    {PMS_EP_COMPLETIONS, "", 400, NULL},
    {PMS_EP_COMPLETIONS, "{", 400, NULL},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\"", 400, NULL},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\"} x", 400, NULL},
    {PMS_EP_COMPLETIONS, "[1,2]", 400, NULL},
    {PMS_EP_COMPLETIONS, "\"text\"", 400, NULL},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, NULL},
    {PMS_EP_COMPLETIONS, "{}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":null}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":5}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":[]}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":[[1,2]]}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":[1.5]}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":[-1]}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":[300]}", 400, "prompt"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "max_tokens"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":65}", 400, "max_tokens"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":\"5\"}", 400, "max_tokens"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":5.0}", 400, "max_tokens"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":99999999999999999999}", 400, NULL},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":-0.1}", 400, "temperature"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":2.5}", 400, "temperature"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "temperature"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"top_p\":0}", 400, "top_p"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"top_p\":1.01}", 400, "top_p"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"top_k\":-1}", 400, "top_k"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"seed\":-3}", 400, "seed"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"seed\":true}", 400, "seed"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":1}", 400, "stream"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stream_options\":[]}", 400, "stream_options"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":\"y\"}}", 400, "include_usage"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":5}", 400, "stop"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":\"\"}", 400, "stop"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stop\":[\"a\",1]}", 400, "stop"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"n\":2}", 400, "n"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"best_of\":3}", 400, "best_of"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"echo\":true}", 400, "echo"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"logprobs\":5}", 400, "logprobs"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"model\":7}", 400, "model"},
    {PMS_EP_COMPLETIONS, "{\"prompt\":\"a\",\"model\":\"gpt-4\"}", 404, "model"},
    {PMS_EP_CHAT, "{}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":[]}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":{}}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":[5]}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400, "messages"},
    {PMS_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":\"other\"}", 404, "model"},
};

static int case_request_errors(void)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pms_req r;
        pms_err e = {0};
        int rc = pms_req_parse(&r, bad[i].ep, bad[i].body, strlen(bad[i].body), &pctx, &e);
        if (rc != -1 || e.status != bad[i].status)
            fprintf(stderr, "case %zu (%s): rc %d status %d (%s)\n", i, bad[i].body, rc, e.status, e.msg);
        CHECK_INT_EQ(rc, -1);
        CHECK_INT_EQ(e.status, bad[i].status);
        CHECK(e.msg[0] != 0);
        CHECK(e.type != NULL);
        if (bad[i].param)
            CHECK_STR_EQ(e.param, bad[i].param);
        CHECK(r.text == NULL && r.ids == NULL && r.n_stop == 0); /* nothing leaks out of a failure */
    }
    /* Every prefix of a valid body is refused, never accepted half-read. */
    const char *full = "{\"prompt\":[1,2],\"max_tokens\":3}";
    for (size_t n = 0; n < strlen(full); n++) {
        pms_req r;
        pms_err e = {0};
        CHECK_INT_EQ(pms_req_parse(&r, PMS_EP_COMPLETIONS, full, n, &pctx, &e), -1);
        CHECK_INT_EQ(e.status, 400);
    }
    return pm_check_result();
}

/* ---- command line -------------------------------------------------------- */

static int parse(pms_config *c, const char *const *args, char *err, size_t errlen)
{
    char *argv[32] = {"pm-server"};
    int argc = 1;
    while (args[argc - 1])
        argv[argc] = (char *)args[argc - 1], argc++;
    pms_config_defaults(c);
    return pms_config_parse(c, argc, argv, err, errlen);
}

static int case_config(void)
{
    pms_config c;
    char err[256];
    const char *ok[] = {"-m", "x.gguf", "--port", "0", "--workers", "3", "--queue", "5", "--max-body", "100",
                        "--quiet", "--host", "::1", "--backend", "cpu", "--drain", "0", NULL};
    REQUIRE(parse(&c, ok, err, sizeof err) == 0);
    CHECK_STR_EQ(c.model_path, "x.gguf");
    CHECK_INT_EQ(c.port, 0);
    CHECK_INT_EQ(c.workers, 3);
    CHECK_INT_EQ(c.queue, 5);
    CHECK_INT_EQ(c.max_body, 100);
    CHECK_STR_EQ(c.host, "::1");
    CHECK_STR_EQ(c.backend, "cpu");
    CHECK_INT_EQ(c.drain_s, 0);
    CHECK_INT_EQ(c.max_tokens, 512); /* untouched default */
    CHECK_INT_EQ(c.quiet, 1);
    CHECK_INT_EQ(pms_config_check_engine(&c, err, sizeof err), 0);

    const char *help[] = {"--help", NULL};
    CHECK_INT_EQ(parse(&c, help, err, sizeof err), 1);
    const char *const bads[][5] = {
        {NULL},
        {"--port", "0", NULL},
        {"-m", "x", "--port", "65536", NULL},
        {"-m", "x", "--port", "12ab", NULL},
        {"-m", "x", "--workers", "0", NULL},
        {"-m", "x", "--queue", "", NULL},
        {"-m", "x", "--bogus", "1", NULL},
        {"-m", "x", "--port", NULL},
        {"-m", "x", "stray", NULL},
        {"-m", "x", "--model-id", "", NULL},
        {"-m", "x", "--host", "0.0.0.0", NULL},         /* not loopback, no key */
        {"-m", "x", "--api-key", "short", NULL},        /* under 16 characters */
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        err[0] = 0;
        CHECK_INT_EQ(parse(&c, bads[i], err, sizeof err), -1);
        CHECK(err[0] != 0);
    }
    /* A non-loopback bind needs a key, or --no-auth said explicitly. */
    const char *keyed[] = {"-m", "x", "--host", "0.0.0.0", "--api-key", "0123456789abcdef", NULL};
    CHECK_INT_EQ(parse(&c, keyed, err, sizeof err), 0);
    CHECK_STR_EQ(c.api_key, "0123456789abcdef");
    const char *open_[] = {"-m", "x", "--host", "0.0.0.0", "--no-auth", NULL};
    CHECK_INT_EQ(parse(&c, open_, err, sizeof err), 0);
    CHECK_INT_EQ(c.no_auth, 1);
    const char *nokey[] = {"-m", "x", "--host", "10.0.0.1", NULL};
    CHECK_INT_EQ(parse(&c, nokey, err, sizeof err), -1);
    CHECK_STR_EQ(err, "--host 10.0.0.1 is not loopback: give --api-key, or --no-auth to serve it "
                      "without authentication");
    const char *draft[] = {"-m", "x", "--draft", "d.gguf", "--draft-k", "6", "--placement", "0-3@local,4-7@spawn",
                           NULL};
    REQUIRE(parse(&c, draft, err, sizeof err) == 0);
    CHECK_STR_EQ(c.draft, "d.gguf");
    CHECK_INT_EQ(c.draft_k, 6);
    CHECK_STR_EQ(c.placement, "0-3@local,4-7@spawn");
    CHECK_INT_EQ(pms_config_check_engine(&c, err, sizeof err), 0);
    const char *lone_k[] = {"-m", "x", "--draft-k", "2", NULL};
    REQUIRE(parse(&c, lone_k, err, sizeof err) == 0);
    CHECK_INT_EQ(pms_config_check_engine(&c, err, sizeof err), -1);
    CHECK(strstr(err, "--draft-k") != NULL);
    const char *empty_place[] = {"-m", "x", "--placement", "", NULL};
    REQUIRE(parse(&c, empty_place, err, sizeof err) == 0);
    CHECK_INT_EQ(pms_config_check_engine(&c, err, sizeof err), -1);
    const char *bad_k[] = {"-m", "x", "--draft", "d", "--draft-k", "0", NULL};
    CHECK_INT_EQ(parse(&c, bad_k, err, sizeof err), -1);
    /* --draft-tree: 0..32, with the block drafter only. */
    const char *tree[] = {"-m", "x", "--draft-head", "h.gguf", "--draft-tree", "32", NULL};
    REQUIRE(parse(&c, tree, err, sizeof err) == 0);
    CHECK_INT_EQ(c.draft_tree, 32);
    CHECK_INT_EQ(pms_config_check_engine(&c, err, sizeof err), 0);
    const char *tree_big[] = {"-m", "x", "--draft-head", "h.gguf", "--draft-tree", "33", NULL};
    CHECK_INT_EQ(parse(&c, tree_big, err, sizeof err), -1);
    CHECK_STR_EQ(err, "--draft-tree needs an integer in 0..32 (got '33')");
    const char *tree_model[] = {"-m", "x", "--draft", "d.gguf", "--draft-tree", "4", NULL};
    REQUIRE(parse(&c, tree_model, err, sizeof err) == 0);
    CHECK_INT_EQ(pms_config_check_engine(&c, err, sizeof err), -1);
    CHECK_STR_EQ(err, "--draft-tree 4 needs the block drafter (--draft-head HEAD)");
    const char *tree_off[] = {"-m", "x", "--draft-tree", "0", NULL};
    REQUIRE(parse(&c, tree_off, err, sizeof err) == 0);
    CHECK_INT_EQ(pms_config_check_engine(&c, err, sizeof err), 0);

    /* Slow headers and admission: defaults, values, limits. */
    const char *plain[] = {"-m", "x", NULL};
    REQUIRE(parse(&c, plain, err, sizeof err) == 0);
    CHECK_INT_EQ(c.header_timeout_s, 5);
    CHECK_INT_EQ(c.reserve, -1); /* a quarter of --max-connections */
    CHECK_INT_EQ(c.http_nice, 19);
    const char *guard[] = {"-m", "x", "--header-timeout", "2", "--reserve", "3", "--http-nice", "0",
                           "--max-connections", "4", NULL};
    REQUIRE(parse(&c, guard, err, sizeof err) == 0);
    CHECK_INT_EQ(c.header_timeout_s, 2);
    CHECK_INT_EQ(c.reserve, 3);
    CHECK_INT_EQ(c.http_nice, 0);
    const char *all_reserved[] = {"-m", "x", "--reserve", "4", "--max-connections", "4", NULL};
    CHECK_INT_EQ(parse(&c, all_reserved, err, sizeof err), -1);
    CHECK_STR_EQ(err, "--reserve 4 must be below --max-connections 4");
    const char *nice20[] = {"-m", "x", "--http-nice", "20", NULL};
    CHECK_INT_EQ(parse(&c, nice20, err, sizeof err), -1);
    CHECK_STR_EQ(err, "--http-nice needs an integer in 0..19 (got '20')");
    const char *ht0[] = {"-m", "x", "--header-timeout", "0", NULL};
    CHECK_INT_EQ(parse(&c, ht0, err, sizeof err), -1);

    /* --device-loop: auto by default, the three modes, nothing else. */
    REQUIRE(parse(&c, plain, err, sizeof err) == 0);
    CHECK_INT_EQ(c.device_loop, PMS_DEVICE_LOOP_AUTO);
    /* Each after an "off", so that auto is a change the parse made. */
    const char *const modes[] = {"off", "on", "auto"};
    const int want[] = {PMS_DEVICE_LOOP_OFF, PMS_DEVICE_LOOP_ON, PMS_DEVICE_LOOP_AUTO};
    for (int i = 0; i < 3; i++) {
        const char *dl[] = {"-m", "x", "--device-loop", "off", "--device-loop", modes[i], NULL};
        REQUIRE(parse(&c, dl, err, sizeof err) == 0);
        CHECK_INT_EQ(c.device_loop, want[i]);
    }
    const char *dl_bad[] = {"-m", "x", "--device-loop", "yes", NULL};
    CHECK_INT_EQ(parse(&c, dl_bad, err, sizeof err), -1);
    CHECK_STR_EQ(err, "--device-loop must be auto, on or off (got 'yes')");
    const char *dl_none[] = {"-m", "x", "--device-loop", NULL};
    CHECK_INT_EQ(parse(&c, dl_none, err, sizeof err), -1);
    CHECK_STR_EQ(err, "option --device-loop needs a value (or is unknown)");
    return pm_check_result();
}

/* ---- metrics ------------------------------------------------------------- */

/* Every sample line's metric has a # TYPE line before it, every TYPE a
 * HELP, and every value parses as a number. */
static void check_exposition(const char *text)
{
    char typed[96][80];
    int n_typed = 0;
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        REQUIRE(e != NULL); /* every line ends in \n */
        size_t len = (size_t)(e - l);
        char line[256];
        REQUIRE(len < sizeof line);
        memcpy(line, l, len);
        line[len] = 0;
        char name[64];
        if (sscanf(line, "# TYPE %63s", name) == 1) {
            int hist = strstr(line, " histogram") != NULL;
            CHECK(strstr(line, " counter") || strstr(line, " gauge") || hist);
            if (hist && n_typed + 3 <= 96) { /* a histogram's samples carry suffixes */
                snprintf(typed[n_typed++], 80, "%s_bucket", name);
                snprintf(typed[n_typed++], 80, "%s_sum", name);
                snprintf(typed[n_typed++], 80, "%s_count", name);
            }
            if (n_typed < 96)
                snprintf(typed[n_typed++], 80, "%s", name);
        } else if (strncmp(line, "# HELP ", 7) != 0) {
            size_t nl = strcspn(line, "{ ");
            int found = 0;
            for (int i = 0; i < n_typed; i++)
                found |= strlen(typed[i]) == nl && strncmp(typed[i], line, nl) == 0;
            if (!found)
                fprintf(stderr, "untyped sample: %s\n", line);
            CHECK(found);
            const char *v = strrchr(line, ' ');
            char *end;
            REQUIRE(v != NULL);
            strtod(v + 1, &end);
            CHECK(*end == 0 && end != v + 1);
        }
        l = e + 1;
    }
}

static int case_metrics(void)
{
    pms_metrics m;
    pms_metrics_init(&m);
    pms_metrics_status(&m, 200);
    pms_metrics_status(&m, 200);
    pms_metrics_status(&m, 404);
    pms_metrics_status(&m, 418);
    atomic_fetch_add(&m.phase_tokens[PM_PHASE_DECODE], 5);
    atomic_fetch_add(&m.phase_ns[PM_PHASE_DECODE], 1500000000u);
    atomic_fetch_add(&m.prompt_tokens, 11);
    atomic_fetch_add(&m.drafted_tokens, 8);
    atomic_fetch_add(&m.accepted_tokens, 6);
    atomic_fetch_add(&m.tree_generations, 2);
    atomic_fetch_add(&m.tree_fallbacks, 1);
    atomic_fetch_add(&m.tree_rounds, 3);
    atomic_fetch_add(&m.tree_nodes, 24);
    atomic_fetch_add(&m.tree_accepted, 7);
    pms_metrics_duration(&m, 20000000u);    /* 0.02 s: bucket 0.025 */
    pms_metrics_duration(&m, 25000000u);    /* exactly 0.025: le is inclusive */
    pms_metrics_duration(&m, 3000000000u);  /* 3 s: bucket 5 */
    pms_metrics_duration(&m, 100000000000u); /* 100 s: +Inf only */
    pms_buf b;
    pms_buf_init(&b, 0);
    REQUIRE(pms_metrics_render(&m, 16, 2, &b) == 0);
    check_exposition(b.p);
    CHECK(strstr(b.p, "phasemark_http_requests_total{code=\"200\"} 2\n") != NULL);
    CHECK(strstr(b.p, "phasemark_http_requests_total{code=\"404\"} 1\n") != NULL);
    CHECK(strstr(b.p, "phasemark_http_requests_total{code=\"other\"} 1\n") != NULL);
    CHECK(strstr(b.p, "phasemark_phase_tokens_total{phase=\"decode\"} 5\n") != NULL);
    CHECK(strstr(b.p, "phasemark_phase_seconds_total{phase=\"decode\"} 1.500000000\n") != NULL);
    CHECK(strstr(b.p, "phasemark_phase_tokens_total{phase=\"exact\"} 0\n") != NULL);
    CHECK(strstr(b.p, "phasemark_phase_tokens_total{phase=\"verify\"} 0\n") != NULL);
    CHECK(strstr(b.p, "phasemark_prompt_tokens_total 11\n") != NULL);
    CHECK(strstr(b.p, "phasemark_draft_acceptance_ratio 0.750000\n") != NULL);
    CHECK(strstr(b.p, "\nphasemark_tree_generations_total 2\n") != NULL);
    CHECK(strstr(b.p, "\nphasemark_tree_fallbacks_total 1\n") != NULL);
    CHECK(strstr(b.p, "\nphasemark_tree_rounds_total 3\n") != NULL);
    CHECK(strstr(b.p, "\nphasemark_tree_nodes_total 24\n") != NULL);
    CHECK(strstr(b.p, "\nphasemark_tree_accepted_tokens_total 7\n") != NULL);
    CHECK(strstr(b.p, "# TYPE phasemark_tree_rounds_total counter\n") != NULL);
    CHECK(strstr(b.p, "phasemark_queue_capacity 16\n") != NULL);
    CHECK(strstr(b.p, "phasemark_workers 2\n") != NULL);
    CHECK(strstr(b.p, "# TYPE phasemark_draft_accepted_tokens_total counter\n") != NULL);
    CHECK(strstr(b.p, "# TYPE phasemark_request_duration_seconds histogram\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_bucket{le=\"0.01\"} 0\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_bucket{le=\"0.025\"} 2\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_bucket{le=\"2.5\"} 2\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_bucket{le=\"5\"} 3\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_bucket{le=\"60\"} 3\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_bucket{le=\"+Inf\"} 4\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_count 4\n") != NULL);
    CHECK(strstr(b.p, "phasemark_request_duration_seconds_sum 103.045000000\n") != NULL);
    pms_buf_free(&b);
    pms_buf_init(&b, 100);
    CHECK_INT_EQ(pms_metrics_render(&m, 16, 2, &b), -1); /* bounded output */
    pms_buf_free(&b);
    return pm_check_result();
}

/* ---- jobs and the queue -------------------------------------------------- */

static pms_job *job(uint64_t id)
{
    pms_req r;
    memset(&r, 0, sizeof r);
    r.text = strdup("x");
    r.text_len = 1;
    int32_t *ids = malloc(sizeof *ids);
    REQUIRE(ids != NULL);
    ids[0] = 1;
    pms_job *j = pms_job_new(id, &r, ids, 1);
    REQUIRE(j != NULL);
    CHECK(r.text == NULL); /* moved into the job */
    return j;
}

static int case_queue(void)
{
    pms_queue q;
    REQUIRE(pms_queue_init(&q, 2) == 0);
    pms_job *a = job(1), *b = job(2), *c = job(3), *shed = NULL;
    CHECK_INT_EQ(pms_queue_push(&q, a, &shed), 0);
    CHECK_INT_EQ(pms_queue_push(&q, b, &shed), 0);
    CHECK_INT_EQ(pms_queue_admits(&q, 0), 0);
    CHECK_INT_EQ(pms_queue_push(&q, c, &shed), -1); /* full, one client: refused at once */
    CHECK(shed == NULL);
    CHECK(pms_queue_pop(&q) == a);           /* first in, first out */
    CHECK_INT_EQ(pms_queue_push(&q, c, &shed), 0);  /* room again, across the ring's end */
    CHECK(pms_queue_take(&q) == b);
    pms_queue_close(&q);
    CHECK_INT_EQ(pms_queue_admits(&q, 0), 0);
    CHECK_INT_EQ(pms_queue_push(&q, a, &shed), -2); /* closed */
    CHECK(pms_queue_pop(&q) == c);           /* closed queues drain first */
    CHECK(pms_queue_pop(&q) == NULL);
    CHECK(pms_queue_take(&q) == NULL);
    pms_queue_destroy(&q);

    /* Two references each; a job ended unstarted says so; cancel forgets
     * the socket; the last release frees (ASan checks the rest). */
    c->fd = 5;
    pms_job_cancel(c);
    CHECK_INT_EQ(c->cancel, 1);
    CHECK_INT_EQ(c->fd, -1);
    pms_job_fail_unstarted(b, 503, "shutting_down", "bye");
    CHECK_INT_EQ(b->state, PMS_JOB_DONE);
    CHECK_INT_EQ(b->fail.status, 503);
    CHECK_STR_EQ(b->fail.code, "shutting_down");
    CHECK_STR_EQ(b->fail.msg, "bye");
    pms_job *all[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        pms_job_release(all[i]);
        CHECK_INT_EQ(all[i]->refs, 1);
        pms_job_release(all[i]);
    }
    pms_job_release(NULL);
    return pm_check_result();
}

/* Pushes a job of client; returns the push's status, *shed_id the id of
 * the job it shed (0: none; the shed job is released). */
static int push_as(pms_queue *q, uint64_t id, uint64_t client, uint64_t *shed_id)
{
    pms_job *j = job(id), *shed = NULL;
    j->client = client;
    int rc = pms_queue_push(q, j, &shed);
    *shed_id = shed ? shed->id : 0;
    if (shed) {
        pms_job_release(shed);
        pms_job_release(shed);
    }
    if (rc) {
        pms_job_release(j);
        pms_job_release(j);
    }
    return rc;
}

static int case_queue_fair(void)
{
    enum { A = 11, B = 22, C = 33 };
    pms_queue q;
    uint64_t shed;
    REQUIRE(pms_queue_init(&q, 4) == 0);
    for (uint64_t id = 1; id <= 4; id++)
        CHECK_INT_EQ(push_as(&q, id, A, &shed), 0);
    /* A alone filled the queue; B holds none: A's newest makes room. */
    CHECK_INT_EQ(pms_queue_admits(&q, A), 0);
    CHECK_INT_EQ(pms_queue_admits(&q, B), 1);
    CHECK_INT_EQ(push_as(&q, 5, B, &shed), 0);
    CHECK(shed == 4);
    CHECK_INT_EQ(push_as(&q, 6, A, &shed), -1); /* A: 3, the most: refused */
    CHECK(shed == 0);
    CHECK_INT_EQ(push_as(&q, 7, B, &shed), 0);  /* B: 1 + 2 <= 3 */
    CHECK(shed == 3);
    CHECK_INT_EQ(push_as(&q, 8, B, &shed), -1); /* 2 and 2: no shedding between equals */
    CHECK_INT_EQ(pms_queue_admits(&q, B), 0);
    CHECK_INT_EQ(push_as(&q, 9, C, &shed), 0);  /* the newest of a client holding 2: B's */
    CHECK(shed == 7);
    uint64_t order[] = {1, 2, 5, 9};
    for (int i = 0; i < 4; i++) {
        pms_job *j = pms_queue_take(&q);
        REQUIRE(j != NULL);
        CHECK(j->id == order[i]);
        pms_job_release(j);
        pms_job_release(j);
    }
    CHECK(pms_queue_take(&q) == NULL);
    /* Emptied, the counts are back to zero: one client may fill it again. */
    for (uint64_t id = 10; id <= 13; id++)
        CHECK_INT_EQ(push_as(&q, id, B, &shed), 0);
    CHECK_INT_EQ(push_as(&q, 14, B, &shed), -1);
    for (pms_job *j; (j = pms_queue_take(&q)) != NULL;) {
        pms_job_release(j);
        pms_job_release(j);
    }
    pms_queue_destroy(&q);
    return pm_check_result();
}

static int case_client_key(void)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET, "127.0.0.2", &v4.sin_addr);
    CHECK(pms_client_key((struct sockaddr *)&v4) == 0x17f000002ull);
    inet_pton(AF_INET6, "::ffff:127.0.0.2", &v6.sin6_addr);
    CHECK(pms_client_key((struct sockaddr *)&v6) == 0x17f000002ull); /* mapped: the IPv4 key */
    inet_pton(AF_INET6, "2001:db8::1", &v6.sin6_addr);
    uint64_t k1 = pms_client_key((struct sockaddr *)&v6);
    CHECK(k1 == 0xa0010db800000000ull);
    inet_pton(AF_INET6, "2001:db8::ffff:2", &v6.sin6_addr);
    CHECK(pms_client_key((struct sockaddr *)&v6) == k1); /* the same /64 */
    inet_pton(AF_INET6, "2001:db8:0:1::1", &v6.sin6_addr);
    CHECK(pms_client_key((struct sockaddr *)&v6) == 0xa0010db800000001ull);
    struct sockaddr un = {.sa_family = AF_UNIX};
    CHECK(pms_client_key(&un) == 0);
    CHECK(pms_client_key(NULL) == 0);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct { const char *name; int (*fn)(void); } cases[] = {
        {"utf8_complete", case_utf8_complete}, {"utf8_repair", case_utf8_repair},
        {"stop", case_stop},
        {"json_quote", case_json_quote},
        {"request_valid", case_request_valid}, {"request_errors", case_request_errors},
        {"config", case_config},               {"metrics", case_metrics},
        {"queue", case_queue},                 {"queue_fair", case_queue_fair},
        {"client_key", case_client_key},
    };
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_server_units CASE\n");
    return 2;
}
