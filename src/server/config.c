/* config.c — pm-server's command line (see server.h, docs/server.md).
 *
 * Numbers are parsed with strtol/strtoull, an end-pointer check and a
 * range per option; any problem is a usage error naming the option.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasemark/spec.h"
#include "chat.h"
#include "server.h"

void pms_config_defaults(pms_config *c)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->workers = 1;
    c->queue = 16;
    c->max_tokens = 512;
    c->max_body = 1u << 20;
    c->timeout_s = 30;
    c->body_timeout_s = 30;
    c->drain_s = 30;
    c->retry_after_s = 1;
    c->max_connections = 64;
    c->header_timeout_s = 5;
    c->reserve = -1;
    c->http_nice = 19;
    c->device_loop = PMS_DEVICE_LOOP_AUTO;
}

const char *pms_config_usage(void)
{
    return "usage: pm-server -m MODEL [options]\n"
           "  -m, --model PATH        GGUF model (or llama2.c .bin with --tokenizer)\n"
           "  --model-id ID           id served in /v1/models (default: file name)\n"
           "  --tokenizer PATH        llama2.c tokenizer.bin\n"
           "  --host ADDR             listen address (default 127.0.0.1)\n"
           "  --port N                TCP port; 0 picks a free one (default 8080)\n"
           "  --workers N             worker threads, one engine session each (default 1)\n"
           "  --queue N               requests that may wait for a worker (default 16)\n"
           "  --threads N             engine compute threads (default: all CPUs)\n"
           "  --ctx N                 context positions per session (default: the model's)\n"
           "  --batch N               tokens per forward (default: the engine's)\n"
           "  --max-tokens N          most tokens one request may generate (default 512)\n"
           "  --max-body BYTES        request body limit (default 1048576)\n"
           "  --timeout S             idle connection timeout (default 30)\n"
           "  --body-timeout S        a request body must arrive within S (default 30)\n"
           "  --drain S               on SIGTERM, in-flight requests get S seconds (default 30)\n"
           "  --retry-after S         Retry-After of a 503 when the queue is full (default 1)\n"
           "  --max-connections N     concurrent connections (default 64)\n"
           "  --header-timeout S      a request's headers must arrive within S (default 5)\n"
           "  --reserve N             connections kept for clients whose headers are in\n"
           "                          (default: a quarter of --max-connections)\n"
           "  --http-nice N           nice value, 0..19, of a connection refused with 503\n"
           "                          (default 19: generation first)\n"
           "  --backend NAME          engine backend (cpu, cuda when built)\n"
           "  --placement SPEC        layer split over local and remote shards, e.g.\n"
           "                          0-3@local,4-7@spawn (docs/split.md)\n"
           "  --draft PATH            draft model: speculative decoding (same vocabulary)\n"
           "  --draft-k N             tokens drafted per round (default 4)\n"
           "  --api-key KEY           require \"Authorization: Bearer KEY\" (all but /health)\n"
           "  --no-auth               allow a non-loopback --host without --api-key\n"
           "  --no-mmap               read the model into memory instead of mapping it\n"
           "  --drafter D             model (default with --draft), ngram (prompt lookup,\n"
           "                          no draft model), hybrid (n-gram, else the draft) or\n"
           "                          block (the --draft-head head on the target's features)\n"
           "  --draft-head PATH       the block drafter's head (a phasemark-block GGUF made\n"
           "                          for this model; implies --drafter block)\n"
           "  --draft-tree N          greedy requests verify a tree of up to N (1..32) block\n"
           "                          drafted nodes per round in one target forward (a\n"
           "                          CPU target, any placement); sampled requests run chains\n"
           "  --device-loop MODE      auto (default): the CUDA device loop for the requests\n"
           "                          it takes; on: it or a refusal; off: never\n"
           "  --chat-template NAME    render chat in this format instead of the model's\n"
           "                          template: plain, chatml, qwen2.5, llama3, llama3.1,\n"
           "                          llama3.2, mistral-v0, mistral-v1, mistral-v3, phi3,\n"
           "                          phi3.5, phi3-v0, gemma, gemma2\n"
           "  --quiet                 no access log line per request on stderr\n";
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

typedef struct int_opt {
    const char *name;
    long lo, hi;
    int *dst;
} int_opt;

static int set_int(pms_config *c, const char *opt, const char *val, int *matched, char *err, size_t errlen)
{
    const int_opt table[] = {
        {"--port", 0, 65535, &c->port},          {"--workers", 1, 64, &c->workers},
        {"--queue", 1, 65536, &c->queue},        {"--threads", 0, 1024, &c->threads},
        {"--ctx", 0, 1 << 24, &c->ctx},          {"--batch", 0, 1 << 16, &c->batch},
        {"--max-tokens", 1, 1 << 24, &c->max_tokens}, {"--timeout", 1, 86400, &c->timeout_s},
        {"--body-timeout", 1, 86400, &c->body_timeout_s}, {"--drain", 0, 86400, &c->drain_s},
        {"--retry-after", 0, 86400, &c->retry_after_s}, {"--max-connections", 1, 65536, &c->max_connections},
        {"--draft-k", 1, 4096, &c->draft_k},     {"--header-timeout", 1, 86400, &c->header_timeout_s},
        {"--reserve", 0, 65535, &c->reserve},    {"--http-nice", 0, 19, &c->http_nice},
        {"--draft-tree", 0, 32, &c->draft_tree},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(opt, table[i].name) != 0)
            continue;
        long v;
        *matched = 1;
        if (parse_int(val, table[i].lo, table[i].hi, &v)) {
            snprintf(err, errlen, "%s needs an integer in %ld..%ld (got '%s')", opt, table[i].lo, table[i].hi, val);
            return -1;
        }
        *table[i].dst = (int)v;
        return 0;
    }
    return 0;
}

static int set_option(pms_config *c, const char *opt, const char *val, char *err, size_t errlen)
{
    const struct { const char *name; const char **dst; } strs[] = {
        {"-m", &c->model_path},   {"--model", &c->model_path}, {"--model-id", &c->model_id},
        {"--tokenizer", &c->tokenizer}, {"--host", &c->host}, {"--backend", &c->backend},
        {"--draft", &c->draft},   {"--placement", &c->placement}, {"--api-key", &c->api_key},
        {"--drafter", &c->drafter}, {"--chat-template", &c->chat_template},
        {"--draft-head", &c->draft_head},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (strcmp(opt, strs[i].name) == 0) {
            *strs[i].dst = val;
            return 0;
        }
    if (strcmp(opt, "--device-loop") == 0) {
        static const struct { const char *name; int mode; } modes[] = {
            {"auto", PMS_DEVICE_LOOP_AUTO}, {"on", PMS_DEVICE_LOOP_ON}, {"off", PMS_DEVICE_LOOP_OFF}};
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            if (strcmp(val, modes[i].name) == 0) {
                c->device_loop = modes[i].mode;
                return 0;
            }
        snprintf(err, errlen, "--device-loop must be auto, on or off (got '%s')", val);
        return -1;
    }
    if (strcmp(opt, "--max-body") == 0) {
        long v;
        if (parse_int(val, 1, 1L << 30, &v)) {
            snprintf(err, errlen, "--max-body needs a byte count in 1..%ld (got '%s')", 1L << 30, val);
            return -1;
        }
        c->max_body = (size_t)v;
        return 0;
    }
    int matched = 0;
    if (set_int(c, opt, val, &matched, err, errlen))
        return -1;
    if (!matched) {
        snprintf(err, errlen, "unknown option '%s'", opt);
        return -1;
    }
    return 0;
}

int pms_config_parse(pms_config *c, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "-h") || !strcmp(o, "--help"))
            return 1;
        if (!strcmp(o, "--quiet")) {
            c->quiet = 1;
            continue;
        }
        if (!strcmp(o, "--no-auth")) {
            c->no_auth = 1;
            continue;
        }
        if (!strcmp(o, "--no-mmap")) {
            c->no_mmap = 1;
            continue;
        }
        if (o[0] != '-') {
            snprintf(err, errlen, "unexpected argument '%s'", o);
            return -1;
        }
        if (i + 1 >= argc) {
            snprintf(err, errlen, "option %s needs a value (or is unknown)", o);
            return -1;
        }
        if (set_option(c, o, argv[++i], err, errlen))
            return -1;
    }
    if (!c->model_path || !*c->model_path) {
        snprintf(err, errlen, "a model is required (-m MODEL)");
        return -1;
    }
    if (c->reserve >= c->max_connections) {
        snprintf(err, errlen, "--reserve %d must be below --max-connections %d", c->reserve, c->max_connections);
        return -1;
    }
    if (c->model_id && !*c->model_id) {
        snprintf(err, errlen, "--model-id must not be empty");
        return -1;
    }
    if (c->api_key && strlen(c->api_key) < 16) {
        snprintf(err, errlen, "--api-key must have at least 16 characters");
        return -1;
    }
    if (c->chat_template && pms_chat_format_parse(c->chat_template) == PMS_CHAT_UNKNOWN) {
        snprintf(err, errlen, "--chat-template must be one of %s (got '%s')", pms_chat_format_names(),
                 c->chat_template);
        return -1;
    }
    int loopback = strncmp(c->host, "127.", 4) == 0 || strcmp(c->host, "::1") == 0;
    if (!loopback && !c->api_key && !c->no_auth) {
        snprintf(err, errlen, "--host %s is not loopback: give --api-key, or --no-auth to serve "
                 "it without authentication", c->host);
        return -1;
    }
    return 0;
}

int pms_config_check_engine(const pms_config *c, char *err, size_t errlen)
{
    int kind = c->drafter ? llm_drafter_kind_parse(c->drafter) : -1;
    if (c->drafter && kind < 0) {
        snprintf(err, errlen, "--drafter must be model, ngram, hybrid or block (got '%s')",
                 c->drafter);
        return -1;
    }
    int block = c->drafter ? kind == LLM_DRAFTER_BLOCK : c->draft_head != NULL;
    int hybrid = kind == LLM_DRAFTER_HYBRID;
    if (c->draft_head && !block && !hybrid) {
        snprintf(err, errlen, "--draft-head goes with --drafter block or hybrid");
        return -1;
    }
    if (block && !c->draft_head) {
        snprintf(err, errlen, "--drafter block needs --draft-head");
        return -1;
    }
    if (hybrid && (c->draft != NULL) == (c->draft_head != NULL)) {
        snprintf(err, errlen, "--drafter hybrid needs --draft or --draft-head, one of them");
        return -1;
    }
    if (kind == LLM_DRAFTER_MODEL && !c->draft) {
        snprintf(err, errlen, "--drafter model needs --draft");
        return -1;
    }
    if (c->draft_k && !c->draft && !c->drafter && !c->draft_head) {
        snprintf(err, errlen, "--draft-k needs --draft");
        return -1;
    }
    if (c->draft_tree > 0 && !block) {
        snprintf(err, errlen, "--draft-tree %d needs the block drafter (--draft-head HEAD)", c->draft_tree);
        return -1;
    }
    if (c->placement && !*c->placement) {
        snprintf(err, errlen, "--placement must not be empty");
        return -1;
    }
    return 0;
}
