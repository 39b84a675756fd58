/* synthetic_request.c — the phase ranges of one request, without a model.
 *
 * Walks the shape of a request the way an engine does (prompt prefilled in
 * chunks, then autoregressive decode steps or speculative rounds, every
 * forward split over layer spans on shards) and emits exactly the ranges
 * the engine would, through the public marker API only. Run it under a
 * profiler or `phasemark capture` with PHASEMARK=1 to see the ranges; with
 * markers off it still prints how many ranges the shape implies, which is
 * the number the checker expects:
 *
 *   chunks*(1+S) + (draft ? rounds*(2+S) : (tokens-1)*(1+S))
 *
 * where chunks = ceil(prompt/chunk), rounds = ceil((tokens-1)/(accept+1)).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <phasemark/mark.h>

typedef struct shape {
    long prompt, chunk, tokens, layers, shards, draft, accept, req;
} shape;

static long ranges_emitted;

/* One forward call split over the shards: one leaf per shard's span. */
static void forward(const shape *s, pm_phase phase, long pos, long n_tokens)
{
    (void)pos;
    for (long k = 0; k < s->shards; k++) {
        pm_layer_attr a = PM_LAYER_ATTR_INIT;
        a.phase = phase; /* PM_PHASE_NONE: inherit the step's phase */
        a.first_layer = (int32_t)(k * s->layers / s->shards);
        a.last_layer = (int32_t)((k + 1) * s->layers / s->shards - 1);
        a.shard = (int32_t)k;
        a.where = k == 0 ? PM_WHERE_LOCAL : PM_WHERE_REMOTE;
        a.backend = "cpu";
        a.req = (uint64_t)s->req;
        a.tokens = (uint32_t)n_tokens;
        PM_SCOPED_LAYER_RANGE(&a);
        ranges_emitted++;
    }
}

static long prefill(const shape *s)
{
    for (long pos = 0; pos < s->prompt; pos += s->chunk) {
        long n = s->prompt - pos < s->chunk ? s->prompt - pos : s->chunk;
        PM_SCOPED_PREFILL((uint64_t)s->req, (uint32_t)pos, (uint32_t)n);
        ranges_emitted++;
        forward(s, PM_PHASE_NONE, pos, n);
    }
    return s->prompt;
}

static void decode(const shape *s, long pos)
{
    for (long t = 1; t < s->tokens; t++, pos++) {
        PM_SCOPED_DECODE((uint64_t)s->req, (uint32_t)pos);
        ranges_emitted++;
        forward(s, PM_PHASE_NONE, pos, 1);
    }
}

static void speculate(const shape *s, long pos)
{
    for (long made = 1; made < s->tokens; made += s->accept + 1) {
        PM_SCOPED_SPEC_DECODE((uint64_t)s->req, (uint32_t)s->draft);
        ranges_emitted++;
        {
            PM_SCOPED_DRAFT((uint64_t)s->req, (uint32_t)s->draft);
            ranges_emitted++;
        }
        forward(s, PM_PHASE_VERIFY, pos, s->draft + 1);
        pos += s->accept + 1;
    }
}

static int parse_long(const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int usage(FILE *f, int code)
{
    fprintf(f, "usage: phasemark-example [--prompt N] [--chunk N] [--tokens N] [--layers N]\n"
               "                         [--shards N] [--draft K] [--accept A] [--req ID]\n"
               "Emits the marker ranges of one synthetic request (PHASEMARK=1 to send them\n"
               "to a profiler) and prints how many ranges the shape implies.\n");
    return code;
}

int main(int argc, char **argv)
{
    shape s = {11, 8, 8, 24, 2, 0, 0, 1};
    static const struct { const char *flag; size_t off; long lo, hi; } opts[] = {
        {"--prompt", offsetof(shape, prompt), 1, 1 << 20},
        {"--chunk", offsetof(shape, chunk), 1, 1 << 20},
        {"--tokens", offsetof(shape, tokens), 1, 1 << 20},
        {"--layers", offsetof(shape, layers), 1, 4096},
        {"--shards", offsetof(shape, shards), 1, 64},
        {"--draft", offsetof(shape, draft), 0, 64},
        {"--accept", offsetof(shape, accept), 0, 64},
        {"--req", offsetof(shape, req), 0, 1L << 40},
    };
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return usage(stdout, 0);
        size_t k = 0;
        while (k < sizeof opts / sizeof opts[0] && strcmp(argv[i], opts[k].flag))
            k++;
        if (k == sizeof opts / sizeof opts[0] || i + 1 >= argc ||
            parse_long(argv[i + 1], opts[k].lo, opts[k].hi, (long *)((char *)&s + opts[k].off))) {
            fprintf(stderr, "phasemark-example: bad argument '%s'\n", argv[i]);
            return usage(stderr, 2);
        }
    }
    if (s.shards > s.layers || s.accept > s.draft) {
        fprintf(stderr, "phasemark-example: need shards <= layers and accept <= draft\n");
        return 2;
    }
    long pos = prefill(&s);
    if (s.draft)
        speculate(&s, pos);
    else
        decode(&s, pos);
    printf("ranges=%ld markers=%s\n", ranges_emitted, pm_enabled() ? pm_backend_name() : "off");
    return 0;
}
