/* test_codec.c — the codec without sockets: golden bytes, partial feeds,
 * every malformed header and metadata shape, and the hash primitives.
 *
 * Golden frames are written out by hand from the tables in docs/wire.md,
 * not produced by the encoder under test. Run as: test_wire_codec CASE.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "pm_check.h"
#include "phasemark/wire.h"

/* A forward request: phase verify, req 0x0102030405060708, base 7, two
 * tokens, want argmax, token ids 300 and -2, seq 5. */
static const uint8_t golden_forward[] = {
    /* header: magic "PMWF", version 1, kind 3, meta_len 38, body_len 8, seq 5, reserved */
    'P', 'M', 'W', 'F', 1, 0, 3, 0, 38, 0, 0, 0, 8, 0, 0, 0,
    5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    /* phase (1) len 1 = 3 */
    1, 0, 1, 0, 3,
    /* req_id (2) len 8 */
    2, 0, 8, 0, 8, 7, 6, 5, 4, 3, 2, 1,
    /* base_pos (3) len 4 = 7 */
    3, 0, 4, 0, 7, 0, 0, 0,
    /* n_tokens (4) len 4 = 2 */
    4, 0, 4, 0, 2, 0, 0, 0,
    /* want (6) len 1 = 4 */
    6, 0, 1, 0, 4,
    /* 38 bytes of metadata, 2 bytes of padding to 40 */
    0, 0,
    /* body: 300, -2 as int32 LE */
    0x2c, 0x01, 0, 0, 0xfe, 0xff, 0xff, 0xff};

static pmw_msg forward_msg(const int32_t *toks)
{
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward.phase = PM_PHASE_VERIFY;
    m.forward.req_id = 0x0102030405060708ull;
    m.forward.base_pos = 7;
    m.forward.n_tokens = 2;
    m.forward.want = PMW_OUT_ARGMAX;
    m.forward.tokens = toks;
    return m;
}

static int case_golden_encode(void)
{
    int32_t toks[2] = {300, -2};
    pmw_msg m = forward_msg(toks);
    uint8_t buf[256];
    long long n = pmw_msg_encode(&m, 5, buf, sizeof buf);
    CHECK_INT_EQ(n, sizeof golden_forward);
    CHECK(n == (long long)sizeof golden_forward && memcmp(buf, golden_forward, sizeof golden_forward) == 0);
    /* Too small a buffer: the size comes back, nothing is claimed written. */
    CHECK_INT_EQ(pmw_msg_encode(&m, 5, buf, 10), sizeof golden_forward);
    return pm_check_result();
}

static pmw_decoder *decoder(uint32_t meta, uint32_t body, uint32_t entries)
{
    pmw_limits lim = {meta, body, entries};
    pmw_decoder *d = NULL;
    REQUIRE(pmw_decoder_create(&lim, &d) == 0 && d);
    return d;
}

static int case_golden_decode(void)
{
    pmw_decoder *d = decoder(4096, 1 << 20, 32);
    pmw_frame f;
    pmw_msg m;
    pmw_diag diag;
    CHECK_INT_EQ(pmw_decoder_feed(d, golden_forward, sizeof golden_forward), 0);
    REQUIRE(pmw_decoder_next(d, &f) == 1);
    CHECK_INT_EQ(f.kind, 3);
    CHECK_U64_EQ(f.seq, 5);
    CHECK_INT_EQ(f.meta_len, 38);
    CHECK_INT_EQ(f.body_len, 8);
    CHECK_INT_EQ(((uintptr_t)f.body) & 7u, 0);
    REQUIRE(pmw_msg_parse(&f, NULL, 0, &m, &diag) == 0);
    CHECK_INT_EQ(m.forward.phase, PM_PHASE_VERIFY);
    CHECK_U64_EQ(m.forward.req_id, 0x0102030405060708ull);
    CHECK_INT_EQ(m.forward.base_pos, 7);
    CHECK_INT_EQ(m.forward.n_tokens, 2);
    CHECK_INT_EQ(m.forward.dim, 0);
    CHECK_INT_EQ(m.forward.want, PMW_OUT_ARGMAX);
    REQUIRE(m.forward.tokens != NULL);
    CHECK_INT_EQ(m.forward.tokens[0], 300);
    CHECK_INT_EQ(m.forward.tokens[1], -2);
    CHECK(m.forward.activations == NULL);
    CHECK_INT_EQ(pmw_decoder_next(d, &f), 0);
    pmw_decoder_destroy(d);
    return pm_check_result();
}

/* Encodes one message of every kind into buf; returns the total size. */
static size_t all_kinds(uint8_t *buf, size_t cap)
{
    static const int32_t toks[3] = {1, 2, 3};
    static const float acts[6] = {0.5f, -1, 2, 3.25f, 4, 5};
    static const float logits[6] = {9, 8, 7, 6, 5, 4};
    static const int32_t ids[2] = {11, 12};
    pmw_msg m[10];
    memset(m, 0, sizeof m);
    m[0].kind = PMW_MSG_HELLO;
    m[0].hello.transport = PMW_TRANSPORT_SHARED;
    m[0].hello.limits = (pmw_limits){4096, 1000, 32};
    m[0].hello.shm_size = 8192;
    m[0].hello.auth = 1;
    memset(m[0].hello.nonce, 0xab, PMW_NONCE_SIZE);
    m[1].kind = PMW_MSG_AUTH;
    memset(m[1].auth.mac, 0x5a, PMW_MAC_SIZE);
    m[2].kind = PMW_MSG_FORWARD;
    m[2].forward = (pmw_forward){PM_PHASE_EXACT, 9, 0, 3, 0, PMW_OUT_LOGITS, toks, NULL, 0, 0, {0}, 0, {0}};
    m[3].kind = PMW_MSG_FORWARD;
    m[3].forward = (pmw_forward){PM_PHASE_DECODE, 9, 3, 2, 3, PMW_OUT_ACTIVATIONS, NULL, acts, 0, 0, {0}, 0, {0}};
    m[4].kind = PMW_MSG_REPLY;
    m[4].reply = (pmw_reply){9, 2, PMW_OUT_LOGITS | PMW_OUT_ARGMAX, 3, logits, ids, 0, 0, 0, NULL};
    m[5].kind = PMW_MSG_RESET;
    m[5].reset.req_id = 9;
    m[6].kind = PMW_MSG_TRUNCATE;
    m[6].truncate.req_id = 9;
    m[6].truncate.position = 77;
    m[7].kind = PMW_MSG_ACK;
    m[7].ack.req_id = 9;
    m[8].kind = PMW_MSG_ERROR;
    m[8].error.code = PMW_E_PHASE;
    m[8].error.tag = PMW_TAG_PHASE;
    memcpy(m[8].error.text, "bad phase", 10);
    m[9].kind = PMW_MSG_SHUTDOWN;
    size_t off = 0;
    for (int i = 0; i < 10; i++) {
        long long n = pmw_msg_encode(&m[i], (uint64_t)i + 1, buf + off, cap - off);
        REQUIRE(n > 0 && (size_t)n <= cap - off);
        off += (size_t)n;
    }
    return off;
}

/* Decodes everything in d, writing a textual summary of each message. */
static void summarize(pmw_decoder *d, char *out, size_t cap)
{
    pmw_frame f;
    pmw_msg m;
    pmw_diag diag;
    size_t used = strlen(out);
    while (pmw_decoder_next(d, &f) == 1) {
        REQUIRE(pmw_msg_parse(&f, NULL, 0, &m, &diag) == 0);
        int n = snprintf(out + used, cap - used, "%d/%llu/%u/%u", m.kind,
                         (unsigned long long)m.seq, f.meta_len, f.body_len);
        used += (size_t)n;
        if (m.kind == PMW_MSG_REPLY)
            used += (size_t)snprintf(out + used, cap - used, "[%g,%g;%d,%d]", m.reply.values[0],
                                     m.reply.values[5], m.reply.argmax[0], m.reply.argmax[1]);
        if (m.kind == PMW_MSG_FORWARD && m.forward.dim)
            used += (size_t)snprintf(out + used, cap - used, "[%g]", m.forward.activations[3]);
        if (m.kind == PMW_MSG_TRUNCATE)
            used += (size_t)snprintf(out + used, cap - used, "[%u]", m.truncate.position);
        if (m.kind == PMW_MSG_ERROR)
            used += (size_t)snprintf(out + used, cap - used, "[%d,%u,%s]", m.error.code,
                                     m.error.tag, m.error.text);
        used += (size_t)snprintf(out + used, cap - used, " ");
    }
}

static int case_partial_feed(void)
{
    uint8_t buf[4096];
    size_t n = all_kinds(buf, sizeof buf);
    char whole[2048] = "", bytes[2048] = "", odd[2048] = "";
    pmw_decoder *d = decoder(4096, 1 << 20, 32);
    CHECK_INT_EQ(pmw_decoder_feed(d, buf, n), 0);
    summarize(d, whole, sizeof whole);
    pmw_decoder_destroy(d);
    d = decoder(4096, 1 << 20, 32);
    for (size_t i = 0; i < n; i++) {
        CHECK_INT_EQ(pmw_decoder_feed(d, buf + i, 1), 0);
        summarize(d, bytes, sizeof bytes);
    }
    CHECK_INT_EQ(pmw_decoder_pending(d), 0);
    pmw_decoder_destroy(d);
    /* Chunks of 7 bytes: frames start at odd offsets inside the buffer. */
    d = decoder(4096, 1 << 20, 32);
    for (size_t i = 0; i < n; i += 7) {
        CHECK_INT_EQ(pmw_decoder_feed(d, buf + i, n - i < 7 ? n - i : 7), 0);
        summarize(d, odd, sizeof odd);
    }
    pmw_decoder_destroy(d);
    CHECK_STR_EQ(bytes, whole);
    CHECK_STR_EQ(odd, whole);
    /* Independent expectations: kinds 1..9 with seqs, meta/body lengths
     * from the tag widths in docs/wire.md. */
    CHECK_STR_EQ(whole, "1/1/82/0 2/2/36/0 3/3/38/12 3/4/46/24[3.25] "
                        "4/5/33/32[9,4;11,12] 5/6/12/0 6/7/20/0[77] 7/8/12/0 "
                        "8/9/27/0[-24,1,bad phase] 9/10/0/0 ");
    return pm_check_result();
}

/* ---- headers ------------------------------------------------------------ */

static void header(uint8_t *h, uint32_t magic, uint16_t version, uint16_t kind, uint32_t meta,
                   uint32_t body)
{
    pmw__put32(h, magic);
    pmw__put16(h + 4, version);
    pmw__put16(h + 6, kind);
    pmw__put32(h + 8, meta);
    pmw__put32(h + 12, body);
    pmw__put64(h + 16, 1);
    pmw__put64(h + 24, 0);
}

/* Feeds a 32-byte header byte by byte; the decoder must fail with `want`
 * exactly when the offending bytes are in (at byte `at`: 4 for magic, 6
 * for version, 32 for the rest), before any body, and stay failed. */
static void expect_header_error(const uint8_t *h, int want, const char *text)
{
    size_t at = want == PMW_E_MAGIC ? 4 : want == PMW_E_VERSION ? 6 : 32;
    pmw_decoder *d = decoder(1024, 4096, 32);
    pmw_frame f;
    for (size_t i = 0; i + 1 < at; i++) {
        CHECK_INT_EQ(pmw_decoder_feed(d, h + i, 1), 0);
        CHECK_INT_EQ(pmw_decoder_next(d, &f), 0);
    }
    CHECK_INT_EQ(pmw_decoder_feed(d, h + at - 1, 1), 0);
    CHECK_INT_EQ(pmw_decoder_next(d, &f), want);
    CHECK(strstr(pmw_decoder_error(d), text) != NULL);
    /* Sticky: every later call fails the same way. */
    CHECK_INT_EQ(pmw_decoder_next(d, &f), want);
    CHECK_INT_EQ(pmw_decoder_feed(d, golden_forward, sizeof golden_forward), want);
    pmw_decoder_destroy(d);
}

static int case_bad_headers(void)
{
    uint8_t h[32];
    header(h, 0x46574D51u, 1, 3, 0, 0);
    expect_header_error(h, PMW_E_MAGIC, "bad magic");
    header(h, PMW_MAGIC, 2, 3, 0, 0);
    expect_header_error(h, PMW_E_VERSION, "version 2");
    header(h, PMW_MAGIC, 0, 3, 0, 0);
    expect_header_error(h, PMW_E_VERSION, "version 0");
    header(h, PMW_MAGIC, 1, 3, 1025, 0);
    expect_header_error(h, PMW_E_META_LIMIT, "1025 over the limit 1024");
    header(h, PMW_MAGIC, 1, 3, 0xffffffffu, 0xffffffffu);
    expect_header_error(h, PMW_E_META_LIMIT, "over the limit");
    header(h, PMW_MAGIC, 1, 3, 0, 4097);
    expect_header_error(h, PMW_E_BODY_LIMIT, "4097 over the limit 4096");
    header(h, PMW_MAGIC, 1, 3, 0, 0);
    h[30] = 1;
    expect_header_error(h, PMW_E_HEADER, "reserved");
    /* At the limits exactly: accepted, and incomplete until the bytes come. */
    header(h, PMW_MAGIC, 1, 3, 1024, 4096);
    pmw_decoder *d = decoder(1024, 4096, 32);
    pmw_frame f;
    CHECK_INT_EQ(pmw_decoder_feed(d, h, 32), 0);
    CHECK_INT_EQ(pmw_decoder_next(d, &f), 0);
    CHECK_INT_EQ(pmw_decoder_pending(d), 32);
    pmw_decoder_destroy(d);
    return pm_check_result();
}

/* ---- metadata ----------------------------------------------------------- */

typedef struct fwd_opts {
    int phase;        /* byte value, -1: omit */
    int dup_phase;
    int unknown_tag;  /* nonzero: add this tag */
    int want;
    uint32_t n_tokens;
    uint32_t body_len;
} fwd_opts;

static size_t forward_frame(uint8_t *buf, size_t cap, const fwd_opts *o)
{
    uint8_t meta[256];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    if (o->phase >= 0)
        pmw_meta_u8(&w, PMW_TAG_PHASE, (uint8_t)o->phase);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    pmw_meta_u32(&w, PMW_TAG_BASE_POS, 0);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, o->n_tokens);
    pmw_meta_u8(&w, PMW_TAG_WANT, (uint8_t)o->want);
    if (o->dup_phase)
        pmw_meta_u8(&w, PMW_TAG_PHASE, 1);
    if (o->unknown_tag)
        pmw_meta_u32(&w, (uint16_t)o->unknown_tag, 0);
    REQUIRE(!w.overflow);
    uint32_t pad = pmw_meta_pad((uint32_t)w.len);
    size_t total = 32 + w.len + pad + o->body_len;
    REQUIRE(total <= cap);
    pmw_header_encode(buf, PMW_MSG_FORWARD, 1, (uint32_t)w.len, o->body_len);
    memcpy(buf + 32, meta, w.len);
    memset(buf + 32 + w.len, 0, pad + o->body_len);
    return total;
}

static int parse_one(const uint8_t *buf, size_t n, pmw_diag *diag)
{
    pmw_decoder *d = decoder(4096, 1 << 20, 8);
    pmw_frame f;
    pmw_msg m;
    memset(diag, 0, sizeof *diag);
    REQUIRE(pmw_decoder_feed(d, buf, n) == 0);
    REQUIRE(pmw_decoder_next(d, &f) == 1);
    pmw_limits lim = {4096, 1 << 20, 8};
    int rc = pmw_msg_parse(&f, &lim, 0, &m, diag);
    pmw_decoder_destroy(d);
    return rc;
}

static void expect_fwd(fwd_opts o, int code, unsigned tag, const char *text)
{
    uint8_t buf[512];
    pmw_diag diag;
    size_t n = forward_frame(buf, sizeof buf, &o);
    CHECK_INT_EQ(parse_one(buf, n, &diag), code);
    CHECK_INT_EQ(diag.code, code);
    CHECK_INT_EQ(diag.tag, tag);
    if (!strstr(diag.text, text))
        fprintf(stderr, "diag text \"%s\" lacks \"%s\"\n", diag.text, text);
    CHECK(strstr(diag.text, text) != NULL);
}

static int case_bad_metadata(void)
{
    fwd_opts ok = {1, 0, 0, PMW_OUT_ARGMAX, 2, 8};
    uint8_t buf[512];
    pmw_diag diag;
    size_t n = forward_frame(buf, sizeof buf, &ok);
    CHECK_INT_EQ(parse_one(buf, n, &diag), 0);
    fwd_opts o = ok;
    o.phase = -1;
    expect_fwd(o, PMW_E_MISSING, 1, "forward: required tag 1 (phase) missing");
    o = ok;
    o.dup_phase = 1;
    expect_fwd(o, PMW_E_REPEATED, 1, "forward: tag 1 (phase) repeated");
    o = ok;
    o.unknown_tag = 99;
    expect_fwd(o, PMW_E_UNKNOWN_TAG, 99, "tag 99 (unknown) unknown");
    o = ok;
    o.unknown_tag = PMW_TAG_POSITION; /* defined, but not for forward */
    expect_fwd(o, PMW_E_UNKNOWN_TAG, 9, "tag 9 (position) unknown");
    o = ok;
    o.phase = 0;
    expect_fwd(o, PMW_E_PHASE, 1, "value 0 out of range");
    o.phase = 5;
    expect_fwd(o, PMW_E_PHASE, 1, "value 5 out of range");
    o.phase = 255;
    expect_fwd(o, PMW_E_PHASE, 1, "value 255 out of range");
    o.phase = 4;
    expect_fwd(o, PMW_E_PHASE, 1, "(batched) is not a shard phase");
    o = ok;
    o.body_len = 12;
    expect_fwd(o, PMW_E_LENGTH, 0, "body is 12 bytes, metadata implies 8");
    o = ok;
    o.n_tokens = 0;
    o.body_len = 0;
    expect_fwd(o, PMW_E_VALUE, 4, "n_tokens) is 0");
    o = ok;
    o.want = 0;
    expect_fwd(o, PMW_E_VALUE, 6, "not a nonzero set");
    o.want = 3;
    expect_fwd(o, PMW_E_VALUE, 6, "both activations and logits");
    o.want = 16;
    expect_fwd(o, PMW_E_VALUE, 6, "not a nonzero set");
    o.want = 8; /* features, with no layers named */
    expect_fwd(o, PMW_E_VALUE, 29, "comes with want bit 8 and only with it");
    return pm_check_result();
}

/* Raw metadata bytes in a forward frame. */
static int raw_meta(const uint8_t *meta, uint32_t len, uint16_t kind, pmw_diag *diag)
{
    uint8_t buf[512];
    uint32_t pad = pmw_meta_pad(len);
    pmw_header_encode(buf, kind, 1, len, 0);
    if (len)
        memcpy(buf + 32, meta, len);
    memset(buf + 32 + len, 0, pad);
    return parse_one(buf, 32 + len + pad, diag);
}

static int case_bad_entries(void)
{
    pmw_diag diag;
    /* An entry header cut short (3 bytes). */
    const uint8_t cut[] = {1, 0, 1};
    CHECK_INT_EQ(raw_meta(cut, sizeof cut, PMW_MSG_FORWARD, &diag), PMW_E_LENGTH);
    CHECK(strstr(diag.text, "inside an entry header") != NULL);
    /* A value running past the end. */
    const uint8_t over[] = {1, 0, 9, 0, 3};
    CHECK_INT_EQ(raw_meta(over, sizeof over, PMW_MSG_FORWARD, &diag), PMW_E_LENGTH);
    CHECK_INT_EQ(diag.tag, 1);
    /* Wrong width for phase (2 bytes). */
    const uint8_t wide[] = {1, 0, 2, 0, 3, 0};
    CHECK_INT_EQ(raw_meta(wide, sizeof wide, PMW_MSG_FORWARD, &diag), PMW_E_LENGTH);
    CHECK(strstr(diag.text, "tag 1 (phase) has length 2 (want 1)") != NULL);
    /* Nine entries against a limit of 8 (checked before tag knowledge). */
    uint8_t many[9 * 5];
    for (int i = 0; i < 9; i++) {
        many[i * 5] = 1;
        many[i * 5 + 1] = 0;
        many[i * 5 + 2] = 1;
        many[i * 5 + 3] = 0;
        many[i * 5 + 4] = 1;
    }
    CHECK_INT_EQ(raw_meta(many, 9 * 5, PMW_MSG_SHUTDOWN, &diag), PMW_E_ENTRIES);
    /* Unknown kinds. */
    CHECK_INT_EQ(raw_meta(NULL, 0, 0, &diag), PMW_E_KIND);
    CHECK_INT_EQ(raw_meta(NULL, 0, 14, &diag), PMW_E_KIND);
    CHECK(strstr(diag.text, "unknown message kind 14") != NULL);
    /* Nonzero padding after the metadata. */
    uint8_t buf[64];
    const uint8_t reset[] = {2, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0}; /* 12 bytes: pad 4 */
    pmw_header_encode(buf, PMW_MSG_RESET, 1, sizeof reset, 0);
    memcpy(buf + 32, reset, sizeof reset);
    memset(buf + 44, 0, 4);
    CHECK_INT_EQ(parse_one(buf, 48, &diag), 0);
    buf[46] = 1;
    CHECK_INT_EQ(parse_one(buf, 48, &diag), PMW_E_LENGTH);
    CHECK(strstr(diag.text, "padding") != NULL);
    /* An error reply whose text carries a newline. */
    const uint8_t err[] = {11, 0, 4, 0, 0xe8, 0xff, 0xff, 0xff, 13, 0, 3, 0, 'a', '\n', 'b'};
    CHECK_INT_EQ(raw_meta(err, sizeof err, PMW_MSG_ERROR, &diag), PMW_E_VALUE);
    CHECK_INT_EQ(diag.tag, 13);
    const uint8_t nul[] = {11, 0, 4, 0, 0xe8, 0xff, 0xff, 0xff, 13, 0, 3, 0, 'a', 0, 'b'};
    CHECK_INT_EQ(raw_meta(nul, sizeof nul, PMW_MSG_ERROR, &diag), PMW_E_VALUE);
    CHECK(strstr(diag.text, "NUL") != NULL);
    /* A dim tag of 0. */
    const uint8_t dim0[] = {1, 0, 1, 0, 1, 2, 0, 8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0,
                            4, 0, 4, 0, 1, 0, 0, 0, 6, 0, 1, 0, 4, 5, 0, 4, 0, 0, 0, 0, 0};
    CHECK_INT_EQ(raw_meta(dim0, sizeof dim0, PMW_MSG_FORWARD, &diag), PMW_E_VALUE);
    CHECK(strstr(diag.text, "tag 5 (dim) is 0") != NULL);
    /* A shared reference on a stream frame. */
    uint8_t ref[4 + 24] = {10, 0, 24, 0};
    CHECK_INT_EQ(raw_meta(ref, sizeof ref, PMW_MSG_RESET, &diag), PMW_E_UNKNOWN_TAG);
    return pm_check_result();
}

static int case_ref_check(void)
{
    pmw_diag d;
    pmw_shm_ref r = {0, 4096, 7};
    CHECK_INT_EQ(pmw__ref_check(&r, 4096, 7, 7, PMW_MSG_FORWARD, &d), 0);
    r = (pmw_shm_ref){8, 4096, 7};
    CHECK_INT_EQ(pmw__ref_check(&r, 4096, 7, 7, PMW_MSG_FORWARD, &d), PMW_E_SHM_REF);
    r = (pmw_shm_ref){UINT64_MAX - 7, 16, 7}; /* offset + length wraps */
    CHECK_INT_EQ(pmw__ref_check(&r, 4096, 7, 7, PMW_MSG_FORWARD, &d), PMW_E_SHM_REF);
    r = (pmw_shm_ref){4, 8, 7};
    CHECK_INT_EQ(pmw__ref_check(&r, 4096, 7, 7, PMW_MSG_FORWARD, &d), PMW_E_SHM_REF);
    CHECK(strstr(d.text, "aligned") != NULL);
    r = (pmw_shm_ref){0, 8, 6};
    CHECK_INT_EQ(pmw__ref_check(&r, 4096, 7, 7, PMW_MSG_FORWARD, &d), PMW_E_SEQUENCE);
    r = (pmw_shm_ref){0, 8, 7};
    CHECK_INT_EQ(pmw__ref_check(&r, 4096, 7, 6, PMW_MSG_FORWARD, &d), PMW_E_SEQUENCE);
    return pm_check_result();
}

static int case_send_check(void)
{
    pmw_msg m;
    pmw_diag d;
    size_t n;
    int32_t toks[1] = {1};
    m = forward_msg(toks);
    m.forward.n_tokens = 1;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), 0);
    CHECK_INT_EQ(n, 4);
    m.forward.phase = PM_PHASE_BATCHED;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_PHASE);
    m.forward.phase = PM_PHASE_NONE;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_PHASE);
    m = forward_msg(NULL);
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_ARG);
    /* 2^32-1 tokens x 2^32-1 dims cannot be framed (and must not wrap). */
    m = forward_msg(toks);
    m.forward.n_tokens = UINT32_MAX;
    m.forward.base_pos = 0;
    m.forward.dim = UINT32_MAX;
    m.forward.activations = (const float *)toks;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_BODY_LIMIT);
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_REPLY;
    m.reply.n_tokens = 1;
    m.reply.outputs = PMW_OUT_LOGITS;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_MISSING);
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_ERROR;
    m.error.code = 5;
    memcpy(m.error.text, "x", 2);
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    return pm_check_result();
}

/* ---- the rows tag ---------------------------------------------------------- */

/* golden_forward asking for the last row only: the same header fields but
 * meta_len 46, the same entries, then rows (22) len 4 = 1, 2 bytes of
 * padding to 48, the same body. */
static const uint8_t golden_rows[] = {
    'P', 'M', 'W', 'F', 1, 0, 3, 0, 46, 0, 0, 0, 8, 0, 0, 0,
    5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 0, 1, 0, 3,
    2, 0, 8, 0, 8, 7, 6, 5, 4, 3, 2, 1,
    3, 0, 4, 0, 7, 0, 0, 0,
    4, 0, 4, 0, 2, 0, 0, 0,
    6, 0, 1, 0, 4,
    22, 0, 4, 0, 1, 0, 0, 0,
    0, 0,
    0x2c, 0x01, 0, 0, 0xfe, 0xff, 0xff, 0xff};

static int parse_bytes(const uint8_t *buf, size_t n, pmw_msg *m, pmw_diag *diag)
{
    pmw_decoder *d = decoder(4096, 1 << 20, 32);
    pmw_frame f;
    memset(diag, 0, sizeof *diag);
    REQUIRE(pmw_decoder_feed(d, buf, n) == 0);
    REQUIRE(pmw_decoder_next(d, &f) == 1);
    int rc = pmw_msg_parse(&f, NULL, 0, m, diag);
    pmw_decoder_destroy(d);
    return rc;
}

/* Encoding a forward with rows writes the tag after want (and dim); rows 0
 * leaves it out, which a receiver reads as every row. */
static int case_rows_golden(void)
{
    int32_t toks[2] = {300, -2};
    pmw_msg m = forward_msg(toks);
    m.forward.rows = 1;
    uint8_t buf[256];
    long long n = pmw_msg_encode(&m, 5, buf, sizeof buf);
    CHECK_INT_EQ(n, sizeof golden_rows);
    CHECK(n == (long long)sizeof golden_rows && memcmp(buf, golden_rows, sizeof golden_rows) == 0);
    pmw_msg got;
    pmw_diag diag;
    REQUIRE(parse_bytes(golden_rows, sizeof golden_rows, &got, &diag) == 0);
    CHECK_INT_EQ(got.forward.rows, 1);
    CHECK_INT_EQ(got.forward.n_tokens, 2);
    CHECK_INT_EQ(got.forward.want, PMW_OUT_ARGMAX);
    /* Without the tag: every row. */
    REQUIRE(parse_bytes(golden_forward, sizeof golden_forward, &got, &diag) == 0);
    CHECK_INT_EQ(got.forward.rows, 2);
    m.forward.rows = 0;
    n = pmw_msg_encode(&m, 5, buf, sizeof buf);
    CHECK(n == (long long)sizeof golden_forward && memcmp(buf, golden_forward, sizeof golden_forward) == 0);
    /* rows == n_tokens is written too when asked for explicitly. */
    m.forward.rows = 2;
    CHECK_INT_EQ(pmw_msg_encode(&m, 5, buf, sizeof buf), sizeof golden_rows);
    REQUIRE(parse_bytes(buf, sizeof golden_rows, &got, &diag) == 0);
    CHECK_INT_EQ(got.forward.rows, 2);
    return pm_check_result();
}

/* A forward frame of two token ids with a rows entry of `width` bytes
 * holding `value` (once, or twice), on kind `kind`. */
static size_t rows_frame(uint8_t *buf, uint16_t kind, uint16_t width, uint32_t value, int twice)
{
    uint8_t meta[128], v[8] = {0};
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    uint32_t body = 0;
    if (kind == PMW_MSG_FORWARD) {
        pmw_meta_u8(&w, PMW_TAG_PHASE, PM_PHASE_DECODE);
        pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
        pmw_meta_u32(&w, PMW_TAG_BASE_POS, 0);
        pmw_meta_u32(&w, PMW_TAG_N_TOKENS, 2);
        pmw_meta_u8(&w, PMW_TAG_WANT, PMW_OUT_LOGITS);
        body = 8;
    } else {
        pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    }
    pmw__put32(v, value);
    for (int i = 0; i < 1 + twice; i++)
        pmw_meta_put(&w, PMW_TAG_ROWS, v, width);
    REQUIRE(!w.overflow);
    uint32_t pad = pmw_meta_pad((uint32_t)w.len);
    pmw_header_encode(buf, kind, 1, (uint32_t)w.len, body);
    memcpy(buf + 32, meta, w.len);
    memset(buf + 32 + w.len, 0, pad + body);
    return 32 + w.len + pad + body;
}

static void expect_rows(uint16_t kind, uint16_t width, uint32_t value, int twice, int code,
                        const char *text)
{
    uint8_t buf[256];
    pmw_msg m;
    pmw_diag diag;
    size_t n = rows_frame(buf, kind, width, value, twice);
    CHECK_INT_EQ(parse_bytes(buf, n, &m, &diag), code);
    CHECK_INT_EQ(diag.code, code);
    CHECK_INT_EQ(diag.tag, code ? PMW_TAG_ROWS : 0);
    if (!strstr(diag.text, text))
        fprintf(stderr, "diag text \"%s\" lacks \"%s\"\n", diag.text, text);
    CHECK(strstr(diag.text, text) != NULL);
    if (code == 0)
        CHECK_INT_EQ(m.forward.rows, value);
}

/* Every malformed rows entry is refused naming tag 22, by the receiver and
 * (for values) by the sender before anything is written. */
static int case_rows_bad(void)
{
    expect_rows(PMW_MSG_FORWARD, 4, 1, 0, 0, "");
    expect_rows(PMW_MSG_FORWARD, 4, 2, 0, 0, "");
    expect_rows(PMW_MSG_FORWARD, 4, 0, 0, PMW_E_VALUE,
                "forward: tag 22 (rows) value 0 is not in 1..n_tokens (2)");
    expect_rows(PMW_MSG_FORWARD, 4, 3, 0, PMW_E_VALUE,
                "forward: tag 22 (rows) value 3 is not in 1..n_tokens (2)");
    expect_rows(PMW_MSG_FORWARD, 4, UINT32_MAX, 0, PMW_E_VALUE, "value 4294967295 is not in");
    expect_rows(PMW_MSG_FORWARD, 2, 1, 0, PMW_E_LENGTH, "forward: tag 22 (rows) has length 2 (want 4)");
    expect_rows(PMW_MSG_FORWARD, 8, 1, 0, PMW_E_LENGTH, "has length 8 (want 4)");
    expect_rows(PMW_MSG_FORWARD, 4, 1, 1, PMW_E_REPEATED, "forward: tag 22 (rows) repeated");
    expect_rows(PMW_MSG_RESET, 4, 1, 0, PMW_E_UNKNOWN_TAG, "reset: tag 22 (rows) unknown");
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_ROWS), "rows");
    int32_t toks[2] = {1, 2};
    pmw_msg m = forward_msg(toks);
    pmw_diag d;
    size_t n;
    m.forward.rows = 3;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    CHECK_INT_EQ(d.tag, PMW_TAG_ROWS);
    uint8_t buf[128];
    CHECK_INT_EQ(pmw_msg_encode(&m, 1, buf, sizeof buf), PMW_E_VALUE);
    m.forward.rows = 2;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), 0);
    return pm_check_result();
}

/* ---- target features ------------------------------------------------------------ */

/* golden_forward asking for the features of layers 1 and 3 beside the
 * argmax: want 4|8 = 12, then feat_layers (29) len 4 = u16 1, 3; meta_len
 * 46, 2 bytes of padding to 48, the same body. */
static const uint8_t golden_feat_forward[] = {
    'P', 'M', 'W', 'F', 1, 0, 3, 0, 46, 0, 0, 0, 8, 0, 0, 0,
    5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 0, 1, 0, 3,
    2, 0, 8, 0, 8, 7, 6, 5, 4, 3, 2, 1,
    3, 0, 4, 0, 7, 0, 0, 0,
    4, 0, 4, 0, 2, 0, 0, 0,
    6, 0, 1, 0, 12,
    29, 0, 4, 0, 1, 0, 3, 0,
    0, 0,
    0x2c, 0x01, 0, 0, 0xfe, 0xff, 0xff, 0xff};

/* Its reply (seq 6): req 9, one argmax row (id 7), features of 2 layers x
 * 2 rows x dim 1 (1.0, 2.0, -1.0, 0.5): outputs 12, feat_shape (30) len
 * 12 = 2, 2, 1; meta_len 41, 7 bytes of padding to 48; body 4 + 16. */
static const uint8_t golden_feat_reply[] = {
    'P', 'M', 'W', 'F', 1, 0, 4, 0, 41, 0, 0, 0, 20, 0, 0, 0,
    6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 8, 0, 9, 0, 0, 0, 0, 0, 0, 0,
    4, 0, 4, 0, 1, 0, 0, 0,
    7, 0, 1, 0, 12,
    30, 0, 12, 0, 2, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0,
    7, 0, 0, 0,
    0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x80, 0xbf, 0, 0, 0, 0x3f};

static int case_features_golden(void)
{
    int32_t toks[2] = {300, -2};
    pmw_msg m = forward_msg(toks);
    m.forward.want = PMW_OUT_ARGMAX | PMW_OUT_FEATURES;
    m.forward.n_feat = 2;
    m.forward.feat[0] = 1;
    m.forward.feat[1] = 3;
    uint8_t buf[256];
    long long n = pmw_msg_encode(&m, 5, buf, sizeof buf);
    CHECK_INT_EQ(n, sizeof golden_feat_forward);
    CHECK(n == (long long)sizeof golden_feat_forward &&
          memcmp(buf, golden_feat_forward, sizeof golden_feat_forward) == 0);
    pmw_msg got;
    pmw_diag diag;
    REQUIRE(parse_bytes(golden_feat_forward, sizeof golden_feat_forward, &got, &diag) == 0);
    CHECK_INT_EQ(got.forward.want, 12);
    CHECK_INT_EQ(got.forward.n_feat, 2);
    CHECK_INT_EQ(got.forward.feat[0], 1);
    CHECK_INT_EQ(got.forward.feat[1], 3);
    /* Without features the tag is absent and n_feat reads 0. */
    REQUIRE(parse_bytes(golden_forward, sizeof golden_forward, &got, &diag) == 0);
    CHECK_INT_EQ(got.forward.n_feat, 0);
    static const int32_t id[1] = {7};
    static const float feat[4] = {1.0f, 2.0f, -1.0f, 0.5f};
    pmw_msg r;
    memset(&r, 0, sizeof r);
    r.kind = PMW_MSG_REPLY;
    r.reply = (pmw_reply){9, 1, PMW_OUT_ARGMAX | PMW_OUT_FEATURES, 0, NULL, id, 2, 2, 1, feat};
    n = pmw_msg_encode(&r, 6, buf, sizeof buf);
    CHECK_INT_EQ(n, sizeof golden_feat_reply);
    CHECK(n == (long long)sizeof golden_feat_reply &&
          memcmp(buf, golden_feat_reply, sizeof golden_feat_reply) == 0);
    /* The body views live in the decoder: keep it until they are read. */
    pmw_decoder *dec = decoder(4096, 1 << 20, 32);
    pmw_frame f;
    REQUIRE(pmw_decoder_feed(dec, golden_feat_reply, sizeof golden_feat_reply) == 0);
    REQUIRE(pmw_decoder_next(dec, &f) == 1);
    REQUIRE(pmw_msg_parse(&f, NULL, 0, &got, &diag) == 0);
    CHECK_INT_EQ(got.reply.outputs, 12);
    CHECK_INT_EQ(got.reply.feat_layers, 2);
    CHECK_INT_EQ(got.reply.feat_rows, 2);
    CHECK_INT_EQ(got.reply.feat_dim, 1);
    REQUIRE(got.reply.argmax != NULL && got.reply.features != NULL);
    CHECK_INT_EQ(got.reply.argmax[0], 7);
    CHECK(memcmp(got.reply.features, feat, sizeof feat) == 0);
    CHECK(got.reply.values == NULL);
    pmw_decoder_destroy(dec);
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_FEAT_LAYERS), "feat_layers");
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_FEAT_SHAPE), "feat_shape");
    return pm_check_result();
}

/* A frame of `kind` with the given metadata and a zero body of body_len. */
static size_t raw_frame(uint8_t *buf, uint16_t kind, const pmw_meta *w, uint32_t body_len)
{
    uint32_t pad = pmw_meta_pad((uint32_t)w->len);
    pmw_header_encode(buf, kind, 1, (uint32_t)w->len, body_len);
    memcpy(buf + 32, w->buf, w->len);
    memset(buf + 32 + w->len, 0, pad + body_len);
    return 32 + w->len + pad + body_len;
}

/* A two-token forward wanting `want`, with a feat_layers entry of len
 * bytes from layers (none when len is 0; twice when twice). */
static void expect_feat_fwd(uint8_t want, const uint8_t *layers, uint16_t len, int twice,
                            int code, unsigned tag, const char *text)
{
    uint8_t meta[128], buf[256];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u8(&w, PMW_TAG_PHASE, PM_PHASE_DECODE);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    pmw_meta_u32(&w, PMW_TAG_BASE_POS, 0);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, 2);
    pmw_meta_u8(&w, PMW_TAG_WANT, want);
    for (int i = 0; len && i < 1 + twice; i++)
        pmw_meta_put(&w, PMW_TAG_FEAT_LAYERS, layers, len);
    REQUIRE(!w.overflow);
    size_t n = raw_frame(buf, PMW_MSG_FORWARD, &w, 8);
    pmw_msg m;
    pmw_diag diag;
    CHECK_INT_EQ(parse_bytes(buf, n, &m, &diag), code);
    CHECK_INT_EQ(diag.tag, code ? tag : 0);
    if (strcmp(diag.text, text) != 0)
        fprintf(stderr, "diag text \"%s\", want \"%s\"\n", diag.text, text);
    CHECK_STR_EQ(diag.text, text);
}

/* A one-row argmax reply with outputs `outputs`, a feat_shape entry of len
 * bytes (layers, rows, dim; none when len is 0) and a body of body_len. */
static void expect_feat_reply(uint8_t outputs, uint16_t len, uint32_t layers, uint32_t rows,
                              uint32_t dim, uint32_t body_len, int code, unsigned tag,
                              const char *text)
{
    uint8_t meta[128], buf[512], v[16] = {0};
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, 1);
    pmw_meta_u8(&w, PMW_TAG_OUTPUTS, outputs);
    pmw__put32(v, layers);
    pmw__put32(v + 4, rows);
    pmw__put32(v + 8, dim);
    if (len)
        pmw_meta_put(&w, PMW_TAG_FEAT_SHAPE, v, len);
    REQUIRE(!w.overflow);
    size_t n = raw_frame(buf, PMW_MSG_REPLY, &w, body_len);
    pmw_msg m;
    pmw_diag diag;
    CHECK_INT_EQ(parse_bytes(buf, n, &m, &diag), code);
    CHECK_INT_EQ(diag.tag, code ? tag : 0);
    if (strcmp(diag.text, text) != 0)
        fprintf(stderr, "diag text \"%s\", want \"%s\"\n", diag.text, text);
    CHECK_STR_EQ(diag.text, text);
}

/* Every malformed features entry is refused naming its tag; the sender
 * refuses the same values before writing anything. */
static int case_features_bad(void)
{
    static const uint8_t l13[] = {1, 0, 3, 0}, l31[] = {3, 0, 1, 0}, l22[] = {2, 0, 2, 0};
    static const uint8_t l9[18] = {0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8, 0};
    const uint8_t a = PMW_OUT_ARGMAX, af = PMW_OUT_ARGMAX | PMW_OUT_FEATURES;
    expect_feat_fwd(af, l13, 4, 0, 0, 0, "");
    expect_feat_fwd(af, l9, 16, 0, 0, 0, "");
    expect_feat_fwd(af, l13, 3, 0, PMW_E_LENGTH, PMW_TAG_FEAT_LAYERS,
                    "forward: tag 29 (feat_layers) has length 3 (want 2..16, even)");
    expect_feat_fwd(af, l9, 18, 0, PMW_E_LENGTH, PMW_TAG_FEAT_LAYERS,
                    "forward: tag 29 (feat_layers) has length 18 (want 2..16, even)");
    expect_feat_fwd(af, l13, 0, 0, PMW_E_VALUE, PMW_TAG_FEAT_LAYERS,
                    "forward: tag 29 (feat_layers) comes with want bit 8 and only with it");
    expect_feat_fwd(a, l13, 4, 0, PMW_E_VALUE, PMW_TAG_FEAT_LAYERS,
                    "forward: tag 29 (feat_layers) comes with want bit 8 and only with it");
    expect_feat_fwd(af, l31, 4, 0, PMW_E_VALUE, PMW_TAG_FEAT_LAYERS,
                    "forward: tag 29 (feat_layers) layer 1 at 1 is not a u16 above the one before");
    expect_feat_fwd(af, l22, 4, 0, PMW_E_VALUE, PMW_TAG_FEAT_LAYERS,
                    "forward: tag 29 (feat_layers) layer 2 at 1 is not a u16 above the one before");
    expect_feat_fwd(af, l13, 4, 1, PMW_E_REPEATED, PMW_TAG_FEAT_LAYERS,
                    "forward: tag 29 (feat_layers) repeated");
    expect_feat_fwd(16 | a, l13, 4, 0, PMW_E_VALUE, PMW_TAG_WANT,
                    "forward: tag 6 (want) value 20 is not a nonzero set of bits 1|2|4|8");
    /* Replies: 4 bytes of id, then layers x rows x dim floats. */
    expect_feat_reply(af, 12, 2, 3, 5, 4 + 2 * 3 * 5 * 4, 0, 0, "");
    expect_feat_reply(af, 12, 2, 3, 5, 4 + 2 * 3 * 5 * 4 - 4, PMW_E_LENGTH, 0,
                      "reply: body is 120 bytes, metadata implies 124");
    expect_feat_reply(af, 12, 2, 3, 5, 4 + 2 * 3 * 5 * 4 + 4, PMW_E_LENGTH, 0,
                      "reply: body is 128 bytes, metadata implies 124");
    expect_feat_reply(af, 12, 2, 3, 5, 4, PMW_E_LENGTH, 0,
                      "reply: body is 4 bytes, metadata implies 124");
    expect_feat_reply(af, 8, 2, 3, 5, 124, PMW_E_LENGTH, PMW_TAG_FEAT_SHAPE,
                      "reply: tag 30 (feat_shape) has length 8 (want 12)");
    expect_feat_reply(af, 0, 0, 0, 0, 4, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                      "reply: tag 30 (feat_shape) comes with outputs bit 8 and only with it");
    expect_feat_reply(a, 12, 2, 3, 5, 124, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                      "reply: tag 30 (feat_shape) comes with outputs bit 8 and only with it");
    expect_feat_reply(af, 12, 0, 3, 5, 4, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                      "reply: tag 30 (feat_shape) names 0 layers");
    expect_feat_reply(af, 12, 9, 1, 1, 4 + 36, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                      "reply: tag 30 (feat_shape) 9 layers x 1 rows x 1 is not 1..8 x >= 1 x >= 1");
    expect_feat_reply(af, 12, 1, 0, 1, 4, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                      "reply: tag 30 (feat_shape) 1 layers x 0 rows x 1 is not 1..8 x >= 1 x >= 1");
    expect_feat_reply(af, 12, 1, 1, 0, 4, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                      "reply: tag 30 (feat_shape) 1 layers x 1 rows x 0 is not 1..8 x >= 1 x >= 1");
    /* A shape too large to exist is refused, not wrapped. */
    expect_feat_reply(af, 12, 8, UINT32_MAX, UINT32_MAX, 4, PMW_E_LENGTH, 0,
                      "reply: body is 4 bytes, metadata implies 18446744073709551615");
    /* The sender's checks. */
    int32_t toks[2] = {1, 2};
    pmw_msg m = forward_msg(toks);
    pmw_diag d;
    size_t n;
    m.forward.want = af;
    m.forward.n_feat = 9;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    CHECK_STR_EQ(d.text, "forward: tag 29 (feat_layers) names 9 layers, at most 8");
    m.forward.n_feat = 1;
    m.forward.feat[0] = 70000;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    CHECK_INT_EQ(d.tag, PMW_TAG_FEAT_LAYERS);
    m.forward.feat[0] = 65535;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), 0);
    return pm_check_result();
}

/* ---- tree verify: the tree tag and the keep message ------------------------------ */

/* Written from docs/wire.md's tables: a verify forward (seq 4) of ids 5, 6,
 * 7 at base_pos 7, req 9, argmax of all 3 rows, whose nodes 1 and 2 are
 * both children of the root: ... rows (22) len 4 = 3, tree (31) len 3 =
 * ff 00 00; meta_len 53, 3 bytes of padding to 56, a 12-byte body. */
static const uint8_t golden_tree_forward[] = {
    'P', 'M', 'W', 'F', 1, 0, 3, 0, 53, 0, 0, 0, 12, 0, 0, 0,
    4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 0, 1, 0, 3,
    2, 0, 8, 0, 9, 0, 0, 0, 0, 0, 0, 0,
    3, 0, 4, 0, 7, 0, 0, 0,
    4, 0, 4, 0, 3, 0, 0, 0,
    6, 0, 1, 0, 4,
    22, 0, 4, 0, 3, 0, 0, 0,
    31, 0, 3, 0, 0xff, 0, 0,
    0, 0, 0,
    5, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0};

/* The keep that follows (kind 13, seq 5): req 9, base_pos 7, keep_rows
 * (32) len 2 = 0, 2; meta_len 26, 6 bytes of padding, no body. */
static const uint8_t golden_keep[] = {
    'P', 'M', 'W', 'F', 1, 0, 13, 0, 26, 0, 0, 0, 0, 0, 0, 0,
    5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 8, 0, 9, 0, 0, 0, 0, 0, 0, 0,
    3, 0, 4, 0, 7, 0, 0, 0,
    32, 0, 2, 0, 0, 2,
    0, 0, 0, 0, 0, 0};

static int case_tree_golden(void)
{
    static const int32_t toks[3] = {5, 6, 7};
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward.phase = PM_PHASE_VERIFY;
    m.forward.req_id = 9;
    m.forward.base_pos = 7;
    m.forward.n_tokens = 3;
    m.forward.want = PMW_OUT_ARGMAX;
    m.forward.tokens = toks;
    m.forward.rows = 3;
    m.forward.n_tree = 3;
    m.forward.tree_parent[0] = -1;
    uint8_t buf[256];
    long long n = pmw_msg_encode(&m, 4, buf, sizeof buf);
    CHECK_INT_EQ(n, sizeof golden_tree_forward);
    CHECK(n == (long long)sizeof golden_tree_forward &&
          memcmp(buf, golden_tree_forward, sizeof golden_tree_forward) == 0);
    pmw_msg got;
    pmw_diag diag;
    REQUIRE(parse_bytes(golden_tree_forward, sizeof golden_tree_forward, &got, &diag) == 0);
    CHECK_INT_EQ(got.forward.n_tree, 3);
    CHECK_INT_EQ(got.forward.tree_parent[0], -1);
    CHECK_INT_EQ(got.forward.tree_parent[1], 0);
    CHECK_INT_EQ(got.forward.tree_parent[2], 0);
    /* A chain has no tree tag and reads n_tree 0. */
    REQUIRE(parse_bytes(golden_forward, sizeof golden_forward, &got, &diag) == 0);
    CHECK_INT_EQ(got.forward.n_tree, 0);
    pmw_msg k;
    memset(&k, 0, sizeof k);
    k.kind = PMW_MSG_KEEP;
    k.keep.req_id = 9;
    k.keep.base_pos = 7;
    k.keep.n_rows = 2;
    k.keep.rows[1] = 2;
    n = pmw_msg_encode(&k, 5, buf, sizeof buf);
    CHECK_INT_EQ(n, sizeof golden_keep);
    CHECK(n == (long long)sizeof golden_keep && memcmp(buf, golden_keep, sizeof golden_keep) == 0);
    REQUIRE(parse_bytes(golden_keep, sizeof golden_keep, &got, &diag) == 0);
    CHECK_INT_EQ(got.kind, PMW_MSG_KEEP);
    CHECK(got.keep.req_id == 9);
    CHECK_INT_EQ(got.keep.base_pos, 7);
    CHECK_INT_EQ(got.keep.n_rows, 2);
    CHECK_INT_EQ(got.keep.rows[0], 0);
    CHECK_INT_EQ(got.keep.rows[1], 2);
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_TREE), "tree");
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_KEEP_ROWS), "keep_rows");
    return pm_check_result();
}

/* A forward of n ids in phase `phase` with a tree entry of len bytes (none
 * when len is 0; twice when twice), parsed; the code, tag and text. */
static void expect_tree_fwd(uint8_t phase, uint32_t n, const uint8_t *tree, uint16_t len, int twice,
                            int code, unsigned tag, const char *text)
{
    uint8_t meta[128], buf[512];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u8(&w, PMW_TAG_PHASE, phase);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    pmw_meta_u32(&w, PMW_TAG_BASE_POS, 0);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, n);
    pmw_meta_u8(&w, PMW_TAG_WANT, PMW_OUT_ARGMAX);
    for (int i = 0; len && i < 1 + twice; i++)
        pmw_meta_put(&w, PMW_TAG_TREE, tree, len);
    REQUIRE(!w.overflow);
    size_t nb = raw_frame(buf, PMW_MSG_FORWARD, &w, 4 * n);
    pmw_msg m;
    pmw_diag diag;
    CHECK_INT_EQ(parse_bytes(buf, nb, &m, &diag), code);
    CHECK_INT_EQ(diag.tag, code ? tag : 0);
    if (strcmp(diag.text, text) != 0)
        fprintf(stderr, "diag text \"%s\", want \"%s\"\n", diag.text, text);
    CHECK_STR_EQ(diag.text, text);
}

/* A keep of req 1 at base_pos pos with a keep_rows entry of len bytes
 * (none when len is 0), or, with reset set, the entry on a reset. */
static void expect_keep(uint32_t pos, const uint8_t *rows, uint16_t len, int reset, int code,
                        unsigned tag, const char *text)
{
    uint8_t meta[128], buf[256];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 1);
    if (!reset)
        pmw_meta_u32(&w, PMW_TAG_BASE_POS, pos);
    if (len)
        pmw_meta_put(&w, PMW_TAG_KEEP_ROWS, rows, len);
    REQUIRE(!w.overflow);
    size_t nb = raw_frame(buf, reset ? PMW_MSG_RESET : PMW_MSG_KEEP, &w, 0);
    pmw_msg m;
    pmw_diag diag;
    CHECK_INT_EQ(parse_bytes(buf, nb, &m, &diag), code);
    CHECK_INT_EQ(diag.tag, code ? tag : 0);
    if (strcmp(diag.text, text) != 0)
        fprintf(stderr, "diag text \"%s\", want \"%s\"\n", diag.text, text);
    CHECK_STR_EQ(diag.text, text);
}

/* Every malformed tree or keep is refused naming its tag; the sender
 * refuses the same values before writing anything. */
static int case_tree_bad(void)
{
    const uint8_t v = 3, dec = 2; /* wire phase bytes: verify, decode */
    static const uint8_t ok[3] = {0xff, 0, 0}, chain[3] = {0xff, 0, 1}, root0[3] = {0, 0, 0},
                         self[3] = {0xff, 1, 0}, later[3] = {0xff, 2, 0}, orphan[3] = {0xff, 0, 0xff};
    static uint8_t big[34];
    big[0] = 0xff;
    expect_tree_fwd(v, 3, ok, 3, 0, 0, 0, "");
    expect_tree_fwd(v, 3, chain, 3, 0, 0, 0, "");
    expect_tree_fwd(v, 33, big, 33, 0, 0, 0, "");
    expect_tree_fwd(dec, 3, ok, 3, 0, PMW_E_VALUE, PMW_TAG_TREE,
                    "forward: tag 31 (tree) on a decode forward (verify only)");
    expect_tree_fwd(v, 3, ok, 2, 0, PMW_E_LENGTH, PMW_TAG_TREE,
                    "forward: tag 31 (tree) has 2 nodes (want n_tokens 3, at most 33)");
    expect_tree_fwd(v, 2, ok, 3, 0, PMW_E_LENGTH, PMW_TAG_TREE,
                    "forward: tag 31 (tree) has 3 nodes (want n_tokens 2, at most 33)");
    expect_tree_fwd(v, 34, big, 34, 0, PMW_E_LENGTH, PMW_TAG_TREE,
                    "forward: tag 31 (tree) has length 34 (want 1..33)");
    expect_tree_fwd(v, 3, root0, 3, 0, PMW_E_VALUE, PMW_TAG_TREE,
                    "forward: tag 31 (tree) node 0 has parent 0 (want none, 0xff)");
    expect_tree_fwd(v, 3, self, 3, 0, PMW_E_VALUE, PMW_TAG_TREE,
                    "forward: tag 31 (tree) node 1 has parent 1 (want an earlier node)");
    expect_tree_fwd(v, 3, later, 3, 0, PMW_E_VALUE, PMW_TAG_TREE,
                    "forward: tag 31 (tree) node 1 has parent 2 (want an earlier node)");
    expect_tree_fwd(v, 3, orphan, 3, 0, PMW_E_VALUE, PMW_TAG_TREE,
                    "forward: tag 31 (tree) node 2 has parent -1 (want an earlier node)");
    expect_tree_fwd(v, 3, ok, 3, 1, PMW_E_REPEATED, PMW_TAG_TREE, "forward: tag 31 (tree) repeated");
    /* Keeps. */
    static const uint8_t k02[2] = {0, 2}, k10[2] = {1, 0}, k00[2] = {0, 0}, k033[2] = {0, 33},
                         k1[1] = {1};
    static uint8_t k34[34];
    expect_keep(7, k02, 2, 0, 0, 0, "");
    expect_keep(7, k1, 1, 0, 0, 0, "");
    expect_keep(7, k10, 2, 0, PMW_E_VALUE, PMW_TAG_KEEP_ROWS,
                "keep: tag 32 (keep_rows) row 0 at 1 is not ascending, at least its index and below 33");
    expect_keep(7, k00, 2, 0, PMW_E_VALUE, PMW_TAG_KEEP_ROWS,
                "keep: tag 32 (keep_rows) row 0 at 1 is not ascending, at least its index and below 33");
    expect_keep(7, k033, 2, 0, PMW_E_VALUE, PMW_TAG_KEEP_ROWS,
                "keep: tag 32 (keep_rows) row 33 at 1 is not ascending, at least its index and below 33");
    expect_keep(7, k34, 34, 0, PMW_E_LENGTH, PMW_TAG_KEEP_ROWS,
                "keep: tag 32 (keep_rows) has length 34 (want 1..33)");
    expect_keep(7, k02, 0, 0, PMW_E_MISSING, PMW_TAG_KEEP_ROWS, "keep: required tag 32 (keep_rows) missing");
    expect_keep(UINT32_MAX - 10, k02, 2, 0, PMW_E_VALUE, PMW_TAG_BASE_POS,
                "keep: tag 3 (base_pos) 4294967285 is too large");
    expect_keep(7, k02, 2, 1, PMW_E_UNKNOWN_TAG, PMW_TAG_KEEP_ROWS,
                "reset: tag 32 (keep_rows) unknown for this kind");
    /* The sender's checks. */
    static const int32_t toks[3] = {5, 6, 7};
    pmw_msg m;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_FORWARD;
    m.forward.phase = PM_PHASE_VERIFY;
    m.forward.n_tokens = 3;
    m.forward.want = PMW_OUT_ARGMAX;
    m.forward.tokens = toks;
    m.forward.n_tree = 4;
    m.forward.tree_parent[0] = -1;
    pmw_diag d;
    size_t n;
    uint8_t buf[256];
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_LENGTH);
    CHECK_INT_EQ(d.tag, PMW_TAG_TREE);
    m.forward.n_tree = 3;
    m.forward.tree_parent[2] = 5;
    CHECK_INT_EQ(pmw_msg_encode(&m, 1, buf, sizeof buf), PMW_E_VALUE);
    m.forward.tree_parent[2] = 1;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), 0);
    m.forward.phase = PM_PHASE_EXACT;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    CHECK_STR_EQ(d.text, "forward: tag 31 (tree) on a exact forward (verify only)");
    pmw_msg k;
    memset(&k, 0, sizeof k);
    k.kind = PMW_MSG_KEEP;
    CHECK_INT_EQ(pmw_msg_check(&k, &n, &d), PMW_E_LENGTH);
    CHECK_STR_EQ(d.text, "keep: tag 32 (keep_rows) has 0 rows (want 1..33)");
    k.keep.n_rows = 34;
    CHECK_INT_EQ(pmw_msg_check(&k, &n, &d), PMW_E_LENGTH);
    k.keep.n_rows = 1;
    CHECK_INT_EQ(pmw_msg_check(&k, &n, &d), 0);
    return pm_check_result();
}

/* ---- clock alignment ---------------------------------------------------------- */

/* Written from docs/wire.md's tables: a probe of round 3 (seq 2), its
 * reply (round 3, received at 5000000500, sent at 5000000600; seq 2) and
 * the set message (offset -4999999400, bound 100, 8 rounds; seq 11).
 * Metadata of 8 and 32 bytes needs no padding. */
static const uint8_t golden_clock[] = {
    'P', 'M', 'W', 'F', 1, 0, 10, 0, 8, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    23, 0, 4, 0, 3, 0, 0, 0};
static const uint8_t golden_clock_reply[] = {
    'P', 'M', 'W', 'F', 1, 0, 11, 0, 32, 0, 0, 0, 0, 0, 0, 0,
    2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    23, 0, 4, 0, 3, 0, 0, 0,
    24, 0, 8, 0, 244, 243, 5, 42, 1, 0, 0, 0,
    25, 0, 8, 0, 88, 244, 5, 42, 1, 0, 0, 0};
static const uint8_t golden_clock_set[] = {
    'P', 'M', 'W', 'F', 1, 0, 12, 0, 32, 0, 0, 0, 0, 0, 0, 0,
    11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    26, 0, 8, 0, 88, 16, 250, 213, 254, 255, 255, 255,
    27, 0, 8, 0, 100, 0, 0, 0, 0, 0, 0, 0,
    23, 0, 4, 0, 8, 0, 0, 0};

/* golden_clock_set with the client's boot id 00 01 .. 0f (tag 28, 16
 * bytes): meta_len 52, then 4 bytes of padding. */
static const uint8_t golden_clock_set_boot[] = {
    'P', 'M', 'W', 'F', 1, 0, 12, 0, 52, 0, 0, 0, 0, 0, 0, 0,
    11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    26, 0, 8, 0, 88, 16, 250, 213, 254, 255, 255, 255,
    27, 0, 8, 0, 100, 0, 0, 0, 0, 0, 0, 0,
    23, 0, 4, 0, 8, 0, 0, 0,
    28, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    0, 0, 0, 0};

static void expect_bytes(const pmw_msg *m, uint64_t seq, const uint8_t *want, size_t n)
{
    uint8_t buf[128];
    long long got = pmw_msg_encode(m, seq, buf, sizeof buf);
    CHECK_INT_EQ(got, (long long)n);
    CHECK(got == (long long)n && memcmp(buf, want, n) == 0);
}

static int case_clock_golden(void)
{
    pmw_msg m, got;
    pmw_diag diag;
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_CLOCK;
    m.clock.round = 3;
    expect_bytes(&m, 2, golden_clock, sizeof golden_clock);
    REQUIRE(parse_bytes(golden_clock, sizeof golden_clock, &got, &diag) == 0);
    CHECK_INT_EQ(got.kind, PMW_MSG_CLOCK);
    CHECK_INT_EQ(got.clock.round, 3);

    m.kind = PMW_MSG_CLOCK_REPLY;
    m.clock.recv_ns = 5000000500u;
    m.clock.send_ns = 5000000600u;
    expect_bytes(&m, 2, golden_clock_reply, sizeof golden_clock_reply);
    REQUIRE(parse_bytes(golden_clock_reply, sizeof golden_clock_reply, &got, &diag) == 0);
    CHECK_INT_EQ(got.clock.round, 3);
    CHECK_U64_EQ(got.clock.recv_ns, 5000000500u);
    CHECK_U64_EQ(got.clock.send_ns, 5000000600u);

    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_CLOCK_SET;
    m.clock_set = (pmw_clock_set){-4999999400, 100, 8, {0}};
    expect_bytes(&m, 11, golden_clock_set, sizeof golden_clock_set);
    REQUIRE(parse_bytes(golden_clock_set, sizeof golden_clock_set, &got, &diag) == 0);
    CHECK(got.clock_set.offset_ns == -4999999400);
    CHECK_U64_EQ(got.clock_set.bound_ns, 100);
    CHECK_INT_EQ(got.clock_set.rounds, 8);
    for (int i = 0; i < 16; i++)
        CHECK_INT_EQ(got.clock_set.boot_id[i], 0);
    for (int i = 0; i < 16; i++)
        m.clock_set.boot_id[i] = (uint8_t)i;
    expect_bytes(&m, 11, golden_clock_set_boot, sizeof golden_clock_set_boot);
    REQUIRE(parse_bytes(golden_clock_set_boot, sizeof golden_clock_set_boot, &got, &diag) == 0);
    CHECK(memcmp(got.clock_set.boot_id, m.clock_set.boot_id, 16) == 0);
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_BOOT_ID), "boot_id");
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_ROUND), "round");
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_CLOCK_BOUND), "clock_bound");
    return pm_check_result();
}

/* A clock frame of `kind` from entries (tag, width, value) given as
 * triples; the value is written in `width` little-endian bytes. */
static int clock_frame(uint16_t kind, const uint64_t *e, size_t n, pmw_diag *diag)
{
    uint8_t meta[256];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    for (size_t i = 0; i < n; i++) {
        uint8_t v[8];
        pmw__put64(v, e[3 * i + 2]);
        pmw_meta_put(&w, (uint16_t)e[3 * i], v, (uint16_t)e[3 * i + 1]);
    }
    REQUIRE(!w.overflow);
    return raw_meta(meta, (uint32_t)w.len, kind, diag);
}

static void expect_clock(uint16_t kind, const uint64_t *e, size_t n, int code, unsigned tag,
                         const char *text)
{
    pmw_diag diag;
    memset(&diag, 0, sizeof diag);
    CHECK_INT_EQ(clock_frame(kind, e, n, &diag), code);
    CHECK_INT_EQ(diag.tag, tag);
    if (!strstr(diag.text, text))
        fprintf(stderr, "diag text \"%s\" lacks \"%s\"\n", diag.text, text);
    CHECK(strstr(diag.text, text) != NULL);
}

#define E3(...) ((const uint64_t[]){__VA_ARGS__}), (sizeof((const uint64_t[]){__VA_ARGS__}) / 24)

/* Every malformed clock entry is refused naming its tag, and the sender
 * refuses the same values before writing anything. */
static int case_clock_bad(void)
{
    const uint64_t L62 = UINT64_C(1) << 62;
    expect_clock(PMW_MSG_CLOCK, E3(23, 4, 1), 0, 0, "");
    expect_clock(PMW_MSG_CLOCK, E3(23, 4, 64), 0, 0, "");
    expect_clock(PMW_MSG_CLOCK, E3(23, 4, 0), PMW_E_VALUE, 23, "clock: tag 23 (round) value 0 is not in 1..64");
    expect_clock(PMW_MSG_CLOCK, E3(23, 4, 65), PMW_E_VALUE, 23, "value 65 is not in 1..64");
    expect_clock(PMW_MSG_CLOCK, E3(23, 2, 1), PMW_E_LENGTH, 23, "clock: tag 23 (round) has length 2 (want 4)");
    expect_clock(PMW_MSG_CLOCK, E3(23, 8, 1), PMW_E_LENGTH, 23, "has length 8 (want 4)");
    expect_clock(PMW_MSG_CLOCK, E3(23, 4, 1, 23, 4, 2), PMW_E_REPEATED, 23, "clock: tag 23 (round) repeated");
    expect_clock(PMW_MSG_CLOCK, NULL, 0, PMW_E_MISSING, 23, "clock: required tag 23 (round) missing");
    expect_clock(PMW_MSG_CLOCK, E3(23, 4, 1, 24, 8, 5), PMW_E_UNKNOWN_TAG, 24,
                 "clock: tag 24 (clock_recv) unknown for this kind");
    /* Replies: send may equal recv, never precede it. */
    expect_clock(PMW_MSG_CLOCK_REPLY, E3(23, 4, 1, 24, 8, 7, 25, 8, 7), 0, 0, "");
    expect_clock(PMW_MSG_CLOCK_REPLY, E3(23, 4, 1, 24, 8, 7, 25, 8, 6), PMW_E_VALUE, 25,
                 "clock_reply: tag 25 (clock_send) 6 is before tag 24 (clock_recv) 7");
    expect_clock(PMW_MSG_CLOCK_REPLY, E3(23, 4, 1, 24, 8, 7), PMW_E_MISSING, 25,
                 "clock_reply: required tag 25 (clock_send) missing");
    expect_clock(PMW_MSG_CLOCK_REPLY, E3(23, 4, 1, 24, 4, 7, 25, 8, 7), PMW_E_LENGTH, 24,
                 "clock_reply: tag 24 (clock_recv) has length 4 (want 8)");
    expect_clock(PMW_MSG_CLOCK_REPLY, E3(23, 4, 0, 24, 8, 7, 25, 8, 7), PMW_E_VALUE, 23,
                 "clock_reply: tag 23 (round) value 0");
    /* Set: offset within +-2^62 (exclusive), bound below 2^62, rounds 1..64. */
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 8, (uint64_t)-5, 27, 8, 9, 23, 4, 8), 0, 0, "");
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 8, L62 - 1, 27, 8, L62 - 1, 23, 4, 64), 0, 0, "");
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 8, L62, 27, 8, 9, 23, 4, 8), PMW_E_VALUE, 26,
                 "clock_set: tag 26 (clock_offset) 4611686018427387904 is not within +-2^62");
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 8, (uint64_t)0 - L62, 27, 8, 9, 23, 4, 8), PMW_E_VALUE,
                 26, "(clock_offset) -4611686018427387904 is not within");
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 8, 1, 27, 8, L62, 23, 4, 8), PMW_E_VALUE, 27,
                 "clock_set: tag 27 (clock_bound) 4611686018427387904 is not below 2^62");
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 8, 1, 27, 8, 1, 23, 4, 0), PMW_E_VALUE, 23,
                 "clock_set: tag 23 (round) value 0");
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 8, 1, 23, 4, 8), PMW_E_MISSING, 27,
                 "clock_set: required tag 27 (clock_bound) missing");
    expect_clock(PMW_MSG_CLOCK_SET, E3(26, 7, 1, 27, 8, 1, 23, 4, 8), PMW_E_LENGTH, 26,
                 "clock_set: tag 26 (clock_offset) has length 7 (want 8)");
    /* The boot id: 16 bytes, never all zero, only on a clock_set. */
    {
        uint8_t meta[128], id[16] = {0};
        pmw_meta w;
        pmw_diag d;
        for (int k = 0; k < 3; k++) {
            pmw_meta_init(&w, meta, sizeof meta);
            pmw_meta_u64(&w, PMW_TAG_CLOCK_OFFSET, 1);
            pmw_meta_u64(&w, PMW_TAG_CLOCK_BOUND, 1);
            pmw_meta_u32(&w, PMW_TAG_ROUND, 8);
            id[3] = k == 2;
            pmw_meta_put(&w, PMW_TAG_BOOT_ID, id, k == 1 ? 15 : 16);
            memset(&d, 0, sizeof d);
            int rc = raw_meta(meta, (uint32_t)w.len, PMW_MSG_CLOCK_SET, &d);
            CHECK_INT_EQ(rc, k == 0 ? PMW_E_VALUE : k == 1 ? PMW_E_LENGTH : 0);
            CHECK_INT_EQ(d.tag, k == 2 ? 0 : PMW_TAG_BOOT_ID);
            CHECK(strstr(d.text, k == 0 ? "clock_set: tag 28 (boot_id) is all zero"
                                 : k == 1 ? "clock_set: tag 28 (boot_id) has length 15 (want 16)"
                                          : "") != NULL);
        }
        pmw_meta_init(&w, meta, sizeof meta);
        pmw_meta_u32(&w, PMW_TAG_ROUND, 1);
        pmw_meta_put(&w, PMW_TAG_BOOT_ID, id, 16);
        CHECK_INT_EQ(raw_meta(meta, (uint32_t)w.len, PMW_MSG_CLOCK, &d), PMW_E_UNKNOWN_TAG);
        CHECK(strstr(d.text, "clock: tag 28 (boot_id) unknown for this kind") != NULL);
    }
    /* The sender's checks. */
    pmw_msg m;
    pmw_diag d;
    size_t n;
    uint8_t buf[128];
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_CLOCK_REPLY;
    m.clock = (pmw_clock){1, 10, 9};
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    CHECK_INT_EQ(d.tag, PMW_TAG_CLOCK_SEND);
    CHECK_INT_EQ(pmw_msg_encode(&m, 1, buf, sizeof buf), PMW_E_VALUE);
    m.kind = PMW_MSG_CLOCK;
    m.clock.round = 65;
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    CHECK_INT_EQ(d.tag, PMW_TAG_ROUND);
    memset(&m, 0, sizeof m);
    m.kind = PMW_MSG_CLOCK_SET;
    m.clock_set = (pmw_clock_set){INT64_MIN, 0, 1, {0}};
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), PMW_E_VALUE);
    CHECK_INT_EQ(d.tag, PMW_TAG_CLOCK_OFFSET);
    m.clock_set = (pmw_clock_set){0, 0, 1, {0}};
    CHECK_INT_EQ(pmw_msg_check(&m, &n, &d), 0);
    CHECK_INT_EQ(n, 0);
    return pm_check_result();
}

static void expect_estimate(const pmw_clock_round *r, size_t n, int64_t offset, uint64_t bound,
                            uint64_t rtt, uint32_t rounds, uint32_t best)
{
    pmw_clock_estimate e;
    CHECK_INT_EQ(pmw_clock_estimate_rounds(r, n, &e), 0);
    if (e.offset_ns != offset)
        fprintf(stderr, "offset %lld, want %lld\n", (long long)e.offset_ns, (long long)offset);
    CHECK(e.offset_ns == offset);
    CHECK_U64_EQ(e.bound_ns, bound);
    CHECK_U64_EQ(e.rtt_ns, rtt);
    CHECK_INT_EQ(e.rounds, rounds);
    CHECK_INT_EQ(e.best, best);
}

/* The arithmetic with numbers worked by hand. Client minus server lies in
 * [t0 - t1, t3 - t2]; the estimate is its midpoint rounded down, the bound
 * the distance to its far end. */
static int case_clock_estimate(void)
{
    /* Server 5 s ahead: [1000 - 5000000500, 1300 - 5000000600] =
     * [-4999999500, -4999999300]; rtt 300 - 100 = 200. */
    pmw_clock_round one = {1000, 5000000500u, 5000000600u, 1300};
    expect_estimate(&one, 1, -4999999400, 100, 200, 1, 0);
    /* rtt 201: midpoint -4999999399.5 rounds down to -4999999400; the far
     * end -4999999299 is 101 away. */
    one.t3 = 1301;
    expect_estimate(&one, 1, -4999999400, 101, 201, 1, 0);
    /* Server behind: [5e9 - 100, 5000000060 - 120] = [4999999900,
     * 4999999940]; rtt 60 - 20 = 40. */
    pmw_clock_round behind = {5000000000u, 100, 120, 5000000060u};
    expect_estimate(&behind, 1, 4999999920, 20, 40, 1, 0);
    /* [-3, 0]: -1.5 rounds down to -2, 2 from 0 and 1 from -3. */
    pmw_clock_round odd = {0, 3, 3, 3};
    expect_estimate(&odd, 1, -2, 2, 3, 1, 0);
    /* The smallest round trip wins: rtt 350, 90, unusable (the server took
     * 100 of a 50 ns round trip), 95. Round 1: [-100, -10] -> -55 +- 45. */
    pmw_clock_round many[] = {{0, 100, 150, 400},
                              {1000, 1100, 1110, 1100},
                              {2000, 2100, 2200, 2050},
                              {3000, 3105, 3110, 3100}};
    expect_estimate(many, 4, -55, 45, 90, 3, 1);
    /* A tie keeps the earliest: [-10, 10] -> 0, not [-5, 15] -> 5. */
    pmw_clock_round tie[] = {{0, 10, 10, 20}, {100, 105, 105, 120}};
    expect_estimate(tie, 2, 0, 10, 20, 2, 0);
    /* Unusable rounds: time running backwards on either side, a server
     * time over the round trip, a difference of 2^62 or more. */
    pmw_clock_round bad[] = {{100, 0, 0, 99},
                             {0, 10, 9, 20},
                             {0, 10, 31, 20},
                             {0, UINT64_C(1) << 62, UINT64_C(1) << 62, 10}};
    pmw_clock_estimate e;
    for (size_t i = 0; i < 4; i++)
        CHECK_INT_EQ(pmw_clock_estimate_rounds(&bad[i], 1, &e), PMW_E_VALUE);
    CHECK_INT_EQ(pmw_clock_estimate_rounds(bad, 4, &e), PMW_E_VALUE);
    CHECK_INT_EQ(e.rounds, 0);
    CHECK_INT_EQ(pmw_clock_estimate_rounds(bad, 0, &e), PMW_E_ARG);
    CHECK_INT_EQ(pmw_clock_estimate_rounds(NULL, 1, &e), PMW_E_ARG);
    /* Just under the limit still counts: t0 - t1 = -(2^62 - 1). */
    pmw_clock_round edge = {0, (UINT64_C(1) << 62) - 1, (UINT64_C(1) << 62) - 1, 0};
    expect_estimate(&edge, 1, -((INT64_C(1) << 62) - 1), 0, 0, 1, 0);
    return pm_check_result();
}

/* ---- addresses ---------------------------------------------------------------- */

/* The one address parser: what it accepts, how it splits it, what it
 * refuses (pmw_connect and pmw_listen use it; so do placements). */
static int case_address_parse(void)
{
    static const struct { const char *in; int is_unix; const char *where; int given; int port; } ok[] = {
        {"unix:/run/s.sock", 1, "/run/s.sock", 0, 0},
        {"/tmp/x/s", 1, "/tmp/x/s", 0, 0},
        {"tcp:127.0.0.1:7001", 0, "127.0.0.1", 1, 7001},
        {"tcp:host.example:9", 0, "host.example", 1, 9},
        {"tcp:[::1]:9", 0, "::1", 1, 9},
        {"tcp:[fe80::1%eth0]:65535", 0, "fe80::1%eth0", 1, 65535},
        {"tcp::0", 0, "127.0.0.1", 0, 0},
        {"tcp:8080", 0, "127.0.0.1", 0, 8080},
        {"tcp:0.0.0.0:0", 0, "0.0.0.0", 1, 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pmw_address a;
        char err[300] = "";
        int rc = pmw_address_parse(ok[i].in, &a, err, sizeof err);
        if (rc)
            fprintf(stderr, "'%s': %s\n", ok[i].in, err);
        CHECK_INT_EQ(rc, 0);
        CHECK_INT_EQ(a.is_unix, ok[i].is_unix);
        CHECK_STR_EQ(ok[i].is_unix ? a.path : a.host, ok[i].where);
        if (!ok[i].is_unix) {
            CHECK_INT_EQ(a.host_given, ok[i].given);
            CHECK_INT_EQ(a.port, ok[i].port);
        }
    }
    char long_path[140] = "unix:/";
    memset(long_path + 6, 'p', 107); /* a path of 108 bytes */
    long_path[113] = '\0';
    const char *const bad[] = {"", "nowhere", "unix:", "tcp:", "tcp:host", "tcp:h:",
                                      "tcp:h:70000", "tcp:h:-1", "tcp:h:+1", "tcp:h: 1",
                                      "tcp:h:12x", "tcp:[::1:7000", "tcp:[::1]7000",
                                      "tcp:[]:1", "tcp:::1:7000", "tcp:a:b:1", "tcp:a]:1",
                                      "tcp:[a]b]:1", long_path};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmw_address a;
        char err[300] = "";
        CHECK_INT_EQ(pmw_address_parse(bad[i], &a, err, sizeof err), PMW_E_ARG);
        if (!strstr(err, "address"))
            fprintf(stderr, "'%s': '%s'\n", bad[i], err);
        CHECK(strstr(err, "address") != NULL && strchr(err, '\n') == NULL);
    }
    long_path[112] = '\0'; /* 107 bytes: the longest a socket takes */
    pmw_address a;
    CHECK_INT_EQ(pmw_address_parse(long_path, &a, NULL, 0), 0);
    CHECK_INT_EQ(pmw_address_parse(NULL, &a, NULL, 0), PMW_E_ARG);
    return pm_check_result();
}

/* ---- hashes: FIPS 180-4 examples and RFC 4231 test cases ----------------- */

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void check_sha(const char *msg, size_t len, const char *want)
{
    uint8_t out[32];
    char h[65];
    const void *parts[1] = {msg};
    pmw__sha256(parts, &len, 1, out);
    hex(out, 32, h);
    CHECK_STR_EQ(h, want);
}

static void check_hmac(const uint8_t *key, size_t klen, const void *data, size_t dlen,
                       const char *want)
{
    uint8_t out[32];
    char h[65];
    const void *parts[1] = {data};
    pmw__hmac_sha256(key, klen, parts, &dlen, 1, out);
    hex(out, 32, h);
    CHECK_STR_EQ(h, want);
}

static int case_hashes(void)
{
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    uint8_t key[131];
    memset(key, 0x0b, 20);
    check_hmac(key, 20, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    check_hmac((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(key, 0xaa, 20);
    uint8_t data[50];
    memset(data, 0xdd, sizeof data);
    check_hmac(key, 20, data, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    memset(key, 0xaa, 131);
    const char *big = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(key, 131, big, strlen(big),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    /* Split input must hash like the whole. */
    uint8_t a[32], b[32];
    const void *p1[1] = {two};
    size_t l1 = strlen(two);
    const void *p2[3] = {two, two + 5, two + 40};
    size_t l2[3] = {5, 35, l1 - 40};
    pmw__sha256(p1, &l1, 1, a);
    pmw__sha256(p2, l2, 3, b);
    CHECK(memcmp(a, b, 32) == 0);
    CHECK(pmw__ct_equal(a, b, 32));
    b[31] ^= 1;
    CHECK(!pmw__ct_equal(a, b, 32));
    return pm_check_result();
}

static int case_strerror(void)
{
    CHECK_STR_EQ(pmw_strerror(PMW_E_PHASE), "PMW_E_PHASE: invalid phase");
    CHECK_STR_EQ(pmw_strerror(-100), "application error");
    CHECK_STR_EQ(pmw_strerror(-99), "unknown status");
    CHECK(pmw_status_is_drainable(PMW_E_PHASE));
    CHECK(pmw_status_is_drainable(PMW_E_SEQUENCE));
    CHECK(pmw_status_is_drainable(PMW_E_KIND));
    CHECK(!pmw_status_is_drainable(PMW_E_MAGIC));
    CHECK(!pmw_status_is_drainable(PMW_E_TIMEOUT));
    CHECK(!pmw_status_is_drainable(PMW_E_AUTH));
    CHECK_STR_EQ(pmw_tag_name(PMW_TAG_PHASE), "phase");
    CHECK_STR_EQ(pmw_tag_name(99), "unknown");
    /* The codes are wire values: they must never move. */
    CHECK_INT_EQ(PMW_E_PHASE, -24);
    CHECK_INT_EQ(PMW_E_SEQUENCE, -29);
    CHECK_INT_EQ(PMW_E_META_LIMIT, -12);
    return pm_check_result();
}

static int case_decoder_bound(void)
{
    pmw_decoder *d = decoder(512, 1024, 8);
    /* One frame at the limits is at most 32+512+7+1024; with 64 KiB of
     * look-ahead the decoder refuses to buffer more than that. */
    static uint8_t junk[70 * 1024];
    pmw_header_encode(junk, PMW_MSG_SHUTDOWN, 1, 0, 0);
    CHECK_INT_EQ(pmw_decoder_feed(d, junk, sizeof junk), PMW_E_BODY_LIMIT);
    pmw_decoder_destroy(d);
    CHECK_INT_EQ(pmw_decoder_create(NULL, NULL), PMW_E_ARG);
    pmw_decoder_destroy(NULL);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"golden_encode", case_golden_encode}, {"golden_decode", case_golden_decode},
        {"partial_feed", case_partial_feed},   {"bad_headers", case_bad_headers},
        {"bad_metadata", case_bad_metadata},   {"bad_entries", case_bad_entries},
        {"ref_check", case_ref_check},         {"send_check", case_send_check},
        {"hashes", case_hashes},               {"strerror", case_strerror},
        {"decoder_bound", case_decoder_bound}, {"rows_golden", case_rows_golden},
        {"rows_bad", case_rows_bad},  {"features_golden", case_features_golden},
        {"features_bad", case_features_bad},           {"tree_golden", case_tree_golden},
        {"tree_bad", case_tree_bad},           {"address_parse", case_address_parse},
        {"clock_golden", case_clock_golden},   {"clock_bad", case_clock_bad},
        {"clock_estimate", case_clock_estimate}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: %s CASE\n", argv[0]);
    return 2;
}
