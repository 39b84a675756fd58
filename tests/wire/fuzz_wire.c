/* fuzz_wire.c — libFuzzer target for the wire decoder and message parser.
 *
 * Input: byte 0 picks the feed chunk size (1..64 bytes, so partial feeds
 * are exercised) and whether frames are parsed as shared-transport frames;
 * the rest is the byte stream. Every decoded frame is parsed; a shared
 * reference is checked against a fake 4 KiB area; every body view is read
 * in full (so ASan sees any bad bound). A message that parses is encoded
 * again, decoded and parsed again, and must encode to the same bytes: the
 * encoder and the parser agree on every message the parser accepts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "phasemark/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { AREA = 4096, MAX_BODY = 64 * 1024 };

static uint8_t area[AREA] __attribute__((aligned(8)));
static uint8_t enc1[MAX_BODY + 2048] __attribute__((aligned(8)));
static uint8_t enc2[MAX_BODY + 2048] __attribute__((aligned(8)));

static volatile float sink;

static void touch(const pmw_msg *m)
{
    float acc = 0;
    if (m->kind == PMW_MSG_FORWARD) {
        const pmw_forward *f = &m->forward;
        size_t n = (size_t)f->n_tokens * (f->dim ? f->dim : 1);
        for (size_t i = 0; i < n; i++)
            acc += f->dim ? f->activations[i] : (float)f->tokens[i];
    } else if (m->kind == PMW_MSG_REPLY) {
        const pmw_reply *r = &m->reply;
        for (size_t i = 0; r->values && i < (size_t)r->n_tokens * r->width; i++)
            acc += r->values[i];
        for (size_t i = 0; r->argmax && i < r->n_tokens; i++)
            acc += (float)r->argmax[i];
    }
    sink = acc;
}

/* encode(m) must equal encode(parse(encode(m))). */
static void roundtrip(const pmw_msg *m)
{
    long long n1 = pmw_msg_encode(m, m->seq, enc1, sizeof enc1);
    if (n1 < 0 || (size_t)n1 > sizeof enc1)
        abort(); /* a parsed message must be encodable */
    pmw_limits lim = {4096, MAX_BODY, 64};
    pmw_decoder *d = NULL;
    if (pmw_decoder_create(&lim, &d) != 0)
        abort();
    pmw_frame f;
    pmw_msg m2;
    pmw_diag diag;
    if (pmw_decoder_feed(d, enc1, (size_t)n1) != 0 || pmw_decoder_next(d, &f) != 1 ||
        pmw_msg_parse(&f, &lim, 0, &m2, &diag) != 0)
        abort();
    long long n2 = pmw_msg_encode(&m2, m2.seq, enc2, sizeof enc2);
    if (n2 != n1 || memcmp(enc1, enc2, (size_t)n1) != 0)
        abort();
    pmw_decoder_destroy(d);
}

static void handle(const pmw_frame *f, const pmw_limits *lim, int shared)
{
    pmw_msg m;
    pmw_diag diag;
    if (pmw_msg_parse(f, lim, shared, &m, &diag) != 0)
        return;
    if (m.has_ref) {
        if (pmw__ref_check(&m.ref, AREA, f->seq, f->seq, m.kind, &diag) != 0 ||
            pmw_msg_bind_body(&m, area + m.ref.offset, (size_t)m.ref.length, &diag) != 0)
            return;
    }
    touch(&m);
    roundtrip(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = 1 + (data[0] & 63u);
    int shared = (data[0] & 64u) != 0;
    data++;
    size--;
    pmw_limits lim = {4096, MAX_BODY, 64};
    pmw_decoder *d = NULL;
    if (pmw_decoder_create(&lim, &d) != 0)
        return 0;
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (pmw_decoder_feed(d, data + off, n) != 0)
            break;
        pmw_frame f;
        int rc;
        while ((rc = pmw_decoder_next(d, &f)) == 1)
            handle(&f, &lim, shared);
        if (rc < 0)
            break;
    }
    pmw_decoder_destroy(d);
    return 0;
}
