/* test_parsers.c — the tools' decoders on valid, malformed and partial
 * input: CSV, JSON, the range-name grammar, --expect, microsecond text,
 * raw recorder files (and their TSC-to-ns conversion), and SHA-256 against FIPS 180-4's example vectors.
 * usage: test_parsers CASE
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pmraw.h"
#include "pmt.h"

static int csv_all(const char *text, char *fields_out, size_t cap, char *err, size_t errlen)
{
    pmt_csv c;
    if (pmt_csv_open_text(&c, "t.csv", text, strlen(text), err, errlen) < 0)
        return -1;
    char *f[PMT_CSV_MAX_FIELDS];
    size_t nf, used = 0;
    int rc;
    fields_out[0] = 0;
    while ((rc = pmt_csv_next(&c, f, &nf, err, errlen)) > 0)
        for (size_t i = 0; i < nf; i++)
            used += (size_t)snprintf(fields_out + used, cap - used, "[%s]", f[i]);
    pmt_csv_close(&c);
    return rc;
}

static int case_csv_valid(void)
{
    char out[512], err[200];
    CHECK_INT_EQ(csv_all("a,b\n\"x,1\",\"say \"\"hi\"\"\"\r\n\n3,\n", out, sizeof out, err, sizeof err), 0);
    CHECK_STR_EQ(out, "[x,1][say \"hi\"][3][]");
    CHECK_INT_EQ(csv_all("a\n\"two\nlines\"\n", out, sizeof out, err, sizeof err), 0);
    CHECK_STR_EQ(out, "[two\nlines]");
    CHECK_INT_EQ(csv_all("a,b", out, sizeof out, err, sizeof err), 0); /* header only */
    CHECK_STR_EQ(out, "");
    pmt_csv c;
    REQUIRE(pmt_csv_open_text(&c, "h", "\"Guid\",\"Function\"\n", 19, err, sizeof err) == 0);
    CHECK_INT_EQ(pmt_csv_col(&c, "Function"), 1);
    CHECK_INT_EQ(pmt_csv_col(&c, "Guid"), 0);
    CHECK_INT_EQ(pmt_csv_col(&c, "Missing"), -1);
    pmt_csv_close(&c);
    return pm_check_result();
}

static int case_csv_malformed(void)
{
    char out[512], err[200];
    CHECK_INT_EQ(csv_all("a\n\"open\n", out, sizeof out, err, sizeof err), -1);
    CHECK_STR_EQ(err, "t.csv:2: unterminated quoted field");
    CHECK_INT_EQ(csv_all("a\nx\"y\n", out, sizeof out, err, sizeof err), -1);
    CHECK_STR_EQ(err, "t.csv:2: quote inside an unquoted field");
    CHECK_INT_EQ(csv_all("a\n\"x\"y\n", out, sizeof out, err, sizeof err), -1);
    CHECK_STR_EQ(err, "t.csv:2: text after a closing quote");
    CHECK_INT_EQ(csv_all("a\nx\ry\n", out, sizeof out, err, sizeof err), -1);
    CHECK_STR_EQ(err, "t.csv:2: stray carriage return");
    CHECK_INT_EQ(csv_all("", out, sizeof out, err, sizeof err), -1);
    CHECK_STR_EQ(err, "t.csv: empty file (no header)");
    return pm_check_result();
}

/* A marker CSV with missing columns, short rows, bad numbers. */
static int case_marker_csv_malformed(void)
{
    static const char *const bad[][2] = {
        {"\"Function\",\"Start_Timestamp\"\n\"a\",1\n",
         "m.csv: not a marker trace (needs Function, Start_Timestamp, End_Timestamp columns)"},
        {"\"Function\",\"Start_Timestamp\",\"End_Timestamp\"\n\"a\",1\n", "m.csv:2: 2 fields, the header has 3"},
        {"\"Function\",\"Start_Timestamp\",\"End_Timestamp\"\n\"a\",1x,2\n",
         "m.csv:2: Start_Timestamp is not an unsigned integer"},
        {"\"Function\",\"Start_Timestamp\",\"End_Timestamp\"\n\"a\",-1,2\n",
         "m.csv:2: Start_Timestamp is not an unsigned integer"},
        {"\"Function\",\"Start_Timestamp\",\"End_Timestamp\"\n\"a\",,\n", "m.csv:2: neither start nor end"},
        {"\"Function\",\"Process_Id\",\"Start_Timestamp\",\"End_Timestamp\"\n\"a\",4294967296,1,2\n",
         "m.csv:2: Process_Id is not an unsigned integer"},
        {"\"Function\",\"Start_Timestamp\",\"End_Timestamp\"\n\"a\",1,99999999999999999999\n",
         "m.csv:2: End_Timestamp is not an unsigned integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmt_trace t;
        char err[200] = "";
        pmt_trace_init(&t);
        CHECK_INT_EQ(pmt_trace_load_csv_text(&t, "m.csv", bad[i][0], strlen(bad[i][0]), err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
        pmt_trace_free(&t);
    }
    return pm_check_result();
}

static int case_json_valid(void)
{
    const char *text = "{\"a\":[1,-2.5e3,true,false,null,\"x\\u00e9\\ud83d\\ude00\\n\"],\"b\":{}}";
    pmt_json j;
    REQUIRE(pmt_json_parse(&j, text, strlen(text), NULL, 0) == 0);
    const pmt_jnode *a = pmt_json_get(&j, &j.nodes[0], "a");
    REQUIRE(a && a->type == PMT_JARR);
    const pmt_jnode *v = pmt_json_child(&j, a);
    CHECK(v->type == PMT_JNUM && v->len == 1 && v->str[0] == '1');
    v = pmt_json_next(&j, v);
    CHECK(v->type == PMT_JNUM && v->len == 6 && memcmp(v->str, "-2.5e3", 6) == 0);
    v = pmt_json_next(&j, v);
    CHECK(v->type == PMT_JBOOL && v->boolean == 1);
    v = pmt_json_next(&j, pmt_json_next(&j, pmt_json_next(&j, v)));
    CHECK(v->type == PMT_JSTR);
    CHECK_STR_EQ(v->str, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    CHECK(pmt_json_get(&j, &j.nodes[0], "b")->type == PMT_JOBJ);
    CHECK(pmt_json_get(&j, &j.nodes[0], "c") == NULL);
    pmt_json_free(&j);
    return pm_check_result();
}

static int case_json_malformed(void)
{
    static const char *const bad[][2] = {
        {"", "offset 0: unexpected end"},
        {"{", "offset 1: expected a member name"},
        {"[1,]", "offset 3: bad number"},
        {"[1 2]", "offset 3: expected ',' or ']'"},
        {"{\"a\" 1}", "offset 5: expected ':'"},
        {"\"abc", "offset 4: unterminated string"},
        {"\"\\x\"", "offset 3: bad escape"},
        {"\"\\ud800\"", "offset 7: unpaired surrogate"},
        {"01", "offset 1: text after the value"},
        {"-", "offset 1: bad number"},
        {"1.", "offset 2: bad number"},
        {"tru", "offset 0: unexpected text"},
        {"\"a\tb\"", "offset 2: control character in string"},
        {"[1] x", "offset 4: text after the value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmt_json j;
        char err[200] = "";
        CHECK_INT_EQ(pmt_json_parse(&j, bad[i][0], strlen(bad[i][0]), err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
    }
    /* Nesting past the bound. */
    char deep[200];
    memset(deep, '[', 100);
    deep[100] = 0;
    pmt_json j;
    char err[200];
    CHECK_INT_EQ(pmt_json_parse(&j, deep, 100, err, sizeof err), -1);
    CHECK_STR_EQ(err, "offset 64: nested too deeply");
    return pm_check_result();
}

static int case_json_trace_malformed(void)
{
    static const char *const bad[][2] = {
        {"{\"x\":1}", "j: no traceEvents array"},
        {"[{\"ph\":\"X\",\"pid\":\"p\",\"tid\":1,\"ts\":1,\"dur\":1}]", "j: event 0: not an object with numeric pid/tid"},
        {"[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1}]", "j: event 0: missing or bad ts/dur"},
        {"[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":-1,\"dur\":1}]", "j: event 0: missing or bad ts/dur"},
        {"[{\"ph\":\"i\",\"pid\":1,\"tid\":1,\"ts\":1,\"args\":{\"corr\":\"x\"}}]",
         "j: event 0: args.corr is not an unsigned integer"},
        {"[1]", "j: event 0: not an object with numeric pid/tid"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmt_trace t;
        char err[200] = "";
        pmt_trace_init(&t);
        CHECK_INT_EQ(pmt_trace_load_json_text(&t, "j", bad[i][0], strlen(bad[i][0]), err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
        pmt_trace_free(&t);
    }
    return pm_check_result();
}

static int case_us_to_ns(void)
{
    static const struct {
        const char *s;
        int64_t ns;
    } ok[] = {{"0", 0}, {"1", 1000}, {"1.5", 1500}, {"1.05", 1050}, {"12.345", 12345},
              {"1520113899312.225", 1520113899312225}, {"1e3", 1000000}, {"0.0004", 0},
              {"0.0006", 1}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t v = -1;
        CHECK_INT_EQ(pmt_parse_us_to_ns(ok[i].s, strlen(ok[i].s), &v), 0);
        CHECK_INT_EQ(v, ok[i].ns);
    }
    static const char *const bad[] = {"", "-1", "1.", "x", "1e999", ".5x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t v;
        CHECK_INT_EQ(pmt_parse_us_to_ns(bad[i], strlen(bad[i]), &v), -1);
    }
    uint64_t u;
    CHECK_INT_EQ(pmt_parse_u64("18446744073709551615", 20, &u), 0);
    CHECK(u == UINT64_MAX);
    CHECK_INT_EQ(pmt_parse_u64("18446744073709551616", 20, &u), -1);
    CHECK_INT_EQ(pmt_parse_u64("+1", 2, &u), -1);
    return pm_check_result();
}

static int case_names_valid(void)
{
    static const char *const ok[] = {
        "pm.prefill mode=exact req=3 pos=0 tokens=11",
        "pm.decode mode=decode req=3 pos=12",
        "pm.spec_decode mode=batched req=3 draft=4",
        "pm.draft req=3 tokens=4",
        "pm.layer_range mode=verify layers=12-23 shard=1 where=remote backend=cuda:0 req=3",
        "pm.layer_range mode=exact layers=0-0 shard=0 future_key=x",
        "pm.prefill mode=exact", /* truncation may cut trailing attributes */
        "hipMemcpy", "before hipLaunchKernel", "",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pmt_name nm;
        char err[200] = "";
        CHECK_INT_EQ(pmt_name_parse(ok[i], &nm, err, sizeof err), 0);
        if (err[0])
            fprintf(stderr, "%s: %s\n", ok[i], err);
    }
    pmt_name nm;
    REQUIRE(pmt_name_parse(ok[4], &nm, NULL, 0) == 0);
    CHECK_INT_EQ(nm.kind, PMT_K_LAYER_RANGE);
    CHECK_STR_EQ(nm.mode, "verify");
    CHECK_INT_EQ(nm.attr[PM__KEY_SHARD].u, 1);
    CHECK_INT_EQ(nm.attr[PM__KEY_LAYERS].u, 12);
    CHECK_INT_EQ(nm.attr[PM__KEY_LAYERS].last, 23);
    CHECK_INT_EQ(nm.attr[PM__KEY_REQ].u, 3);
    return pm_check_result();
}

static int case_names_invalid(void)
{
    static const char *const bad[][2] = {
        {"pm.prefil mode=exact", "unknown kind 'pm.prefil'"},
        {"pm.", "unknown kind 'pm.'"},
        {"pm.prefill", "pm.prefill without mode"},
        {"pm.prefill mode=decode", "mode=decode is not a mode of pm.prefill"},
        {"pm.layer_range mode=none layers=0-3", "mode=none is not a mode of pm.layer_range (the shard was told no phase)"},
        {"pm.draft mode=exact req=1", "pm.draft takes no mode"},
        {"pm.decode  mode=decode", "empty attribute (two spaces, or a trailing space)"},
        {"pm.decode mode=decode ", "empty attribute (two spaces, or a trailing space)"},
        {"pm.decode mode", "attribute 'mode' is not key=value"},
        {"pm.decode mode=", "attribute 'mode=' is not key=value"},
        {"pm.decode =x", "attribute '=x' is not key=value"},
        {"pm.decode Mode=decode", "attribute key 'Mode' has a character outside [a-z0-9_]"},
        {"pm.decode mode=decode req=1 req=2", "attribute 'req' repeated"},
        {"pm.decode mode=decode req=x", "req=x is not an unsigned integer"},
        {"pm.decode mode=decode pos=-1", "pos=-1 is not an unsigned integer"},
        {"pm.layer_range mode=exact layers=5-2", "layers=5-2 is not a span A-B with A <= B"},
        {"pm.layer_range mode=exact layers=5", "layers=5 is not a span A-B with A <= B"},
        {"pm.layer_range mode=exact where=far", "where=far is neither local nor remote"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pmt_name nm;
        char err[200] = "";
        CHECK_INT_EQ(pmt_name_parse(bad[i][0], &nm, err, sizeof err), -1);
        CHECK_STR_EQ(err, bad[i][1]);
    }
    return pm_check_result();
}

static int case_expect_parse(void)
{
    pmt_expect ex[PMT_EXPECT_MAX];
    size_t n;
    char err[200];
    REQUIRE(pmt_expect_parse("prefill=1,layer_range:exact=11,decode=5,other=2", ex, &n, err, sizeof err) == 0);
    CHECK_INT_EQ(n, 4);
    CHECK_INT_EQ(ex[1].kind, PMT_K_LAYER_RANGE);
    CHECK_STR_EQ(ex[1].mode, "exact");
    CHECK_INT_EQ(ex[1].count, 11);
    CHECK_INT_EQ(ex[3].kind, PMT_K_COUNT);
    static const char *const bad[] = {"prefill", "prefil=1", "prefill=x", "prefill=", "layer_range:=1",
                                      "decode=1,", ",", "a:b:c=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_INT_EQ(pmt_expect_parse(bad[i], ex, &n, err, sizeof err), -1);
    return pm_check_result();
}

/* FIPS 180-4 example vectors (and the empty message). */
static int case_sha256(void)
{
    char hex[65];
    pmt_sha256_hex("abc", 3, hex);
    CHECK_STR_EQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    pmt_sha256_hex("", 0, hex);
    CHECK_STR_EQ(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    pmt_sha256_hex(m, strlen(m), hex);
    CHECK_STR_EQ(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* One million 'a' (several thousand blocks). */
    size_t million = 1000000;
    char *many = malloc(million);
    REQUIRE(many != NULL);
    memset(many, 'a', million);
    pmt_sha256_hex(many, million, hex);
    free(many);
    CHECK_STR_EQ(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    return pm_check_result();
}

/* Raw recorder files are built here byte by byte, as pmraw.h defines
 * them, so the reader is checked against the format, not against the
 * recorder's encoder. */
static size_t put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return 8;
}

static size_t put_file_hdr(unsigned char *buf, uint32_t pid, const char *comm, uint32_t clock)
{
    pmr_file_hdr fh;
    memset(&fh, 0, sizeof fh);
    memcpy(fh.magic, PMR_FILE_MAGIC, 8);
    fh.pid = pid;
    memcpy(fh.comm, comm, strlen(comm));
    fh.clock = clock;
    memcpy(buf, &fh, sizeof fh);
    return sizeof fh;
}

/* A chunk of thread tid with the given event bytes and header point. */
static size_t put_chunk(unsigned char *buf, uint32_t tid, uint64_t cal_tsc, uint64_t cal_ns,
                        const unsigned char *events, size_t n)
{
    pmr_chunk_hdr ch;
    memset(&ch, 0, sizeof ch);
    ch.magic = PMR_CHUNK_MAGIC;
    ch.tid = tid;
    ch.bytes = (uint32_t)n;
    ch.cal_tsc = cal_tsc;
    ch.cal_ns = cal_ns;
    memcpy(buf, &ch, sizeof ch);
    memcpy(buf + sizeof ch, events, n);
    return sizeof ch + n;
}

/* A calibration event: tag 7, tsc and ns little-endian. */
static size_t put_cal(unsigned char *p, uint64_t tsc, uint64_t ns)
{
    p[0] = PMR_CAL;
    return 1 + put_le64(p + 1, tsc) + put_le64(p + 9, ns);
}

#define RAW_CAL_AT 0               /* offsets in make_raw's events */
#define RAW_PUSH_AT 17
#define RAW_POP_AT (RAW_PUSH_AT + 4 + 23)

/* A BOOTTIME-clock file: header, one chunk (base 900, push "pm.draft
 * req=1 tokens=2" at 1000, pop at 1500), then `tail` bytes of a second,
 * cut chunk. `events` (when not NULL) receives where the events begin. */
static size_t make_raw(unsigned char *buf, size_t tail, size_t *events)
{
    unsigned char ev[64];
    size_t n = put_cal(ev, 900, 900);
    static const unsigned char push[] = {PMR_PUSH, 100, 0, 23};
    memcpy(ev + n, push, sizeof push), n += sizeof push;
    memcpy(ev + n, "pm.draft req=1 tokens=2", 23), n += 23;
    static const unsigned char pop[] = {PMR_POP, 0xf4, 0x03}; /* 500 */
    memcpy(ev + n, pop, sizeof pop), n += sizeof pop;
    size_t o = put_file_hdr(buf, 42, "engine", PMR_CLOCK_BOOTTIME);
    if (events)
        *events = o + sizeof(pmr_chunk_hdr);
    size_t first = put_chunk(buf + o, 43, 0, 0, ev, n);
    memcpy(buf + o + first, buf + o, tail < first ? tail : first);
    return o + first + (tail < first ? tail : first);
}

static int load_raw_bytes(const unsigned char *buf, size_t len, pmt_trace *t, char *err, size_t errlen)
{
    char path[] = "/tmp/pm-raw-test.XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, buf, len) == (ssize_t)len);
    close(fd);
    int rc = pmt_raw_load(t, path, err, errlen);
    unlink(path);
    return rc;
}

static int case_raw_partial(void)
{
    unsigned char buf[512];
    char err[300];
    for (size_t tail = 0; tail <= 10; tail += 5) {
        pmt_trace t;
        pmt_trace_init(&t);
        size_t n = make_raw(buf, tail, NULL);
        CHECK_INT_EQ(load_raw_bytes(buf, n, &t, err, sizeof err), tail ? 1 : 0);
        REQUIRE(t.n == 1);
        CHECK_STR_EQ(t.r[0].name, "pm.draft req=1 tokens=2");
        CHECK_STR_EQ(t.r[0].domain, "MARKER_CORE_API");
        CHECK_INT_EQ(t.r[0].pid, 42);
        CHECK_INT_EQ(t.r[0].tid, 43);
        CHECK_INT_EQ(t.r[0].corr, 1);
        CHECK_INT_EQ(t.r[0].start, 1000);
        CHECK_INT_EQ(t.r[0].end, 1500);
        CHECK_INT_EQ(t.r[0].flags, 0);
        CHECK_STR_EQ(pmt_trace_label_of(&t, 42, 0), "engine");
        pmt_trace_free(&t);
    }
    /* Every shorter prefix: never a crash, whole chunks only. */
    size_t full = make_raw(buf, 0, NULL);
    for (size_t n = 0; n < full; n++) {
        pmt_trace t;
        pmt_trace_init(&t);
        int rc = load_raw_bytes(buf, n, &t, err, sizeof err);
        CHECK(rc == (n < sizeof(pmr_file_hdr) ? -1 : n == sizeof(pmr_file_hdr) ? 0 : 1));
        CHECK_INT_EQ(t.n, 0);
        pmt_trace_free(&t);
    }
    return pm_check_result();
}

/* Loads buf after one change and expects the "malformed events" error. */
static void expect_malformed(unsigned char *buf, size_t n, const char *why)
{
    pmt_trace t;
    char err[300] = "";
    pmt_trace_init(&t);
    int rc = load_raw_bytes(buf, n, &t, err, sizeof err);
    if (rc != -1 || !strstr(err, "malformed events"))
        fprintf(stderr, "case %s: rc %d, err \"%s\"\n", why, rc, err);
    CHECK_INT_EQ(rc, -1);
    CHECK(strstr(err, "malformed events") != NULL);
    pmt_trace_free(&t);
}

static int case_raw_malformed(void)
{
    unsigned char buf[512];
    char err[300];
    size_t at;
    size_t n = make_raw(buf, 0, &at);
    pmt_trace t;
    pmt_trace_init(&t);
    buf[0] = 'X';
    CHECK_INT_EQ(load_raw_bytes(buf, n, &t, err, sizeof err), -1);
    CHECK(strstr(err, "not a phasemark raw file") != NULL);
    make_raw(buf, 0, NULL);
    buf[offsetof(pmr_file_hdr, clock)] = 2;
    CHECK_INT_EQ(load_raw_bytes(buf, n, &t, err, sizeof err), -1);
    CHECK(strstr(err, "unknown clock 2") != NULL);
    pmt_trace_free(&t);

    make_raw(buf, 0, NULL);
    buf[at + RAW_PUSH_AT + 3] = 127; /* a name longer than its chunk */
    expect_malformed(buf, n, "name past the chunk");
    make_raw(buf, 0, NULL);
    buf[at + RAW_CAL_AT] = 0; /* no event type 0 */
    expect_malformed(buf, n, "type 0");
    make_raw(buf, 0, NULL);
    buf[at + RAW_POP_AT + 2] = 0x83; /* a varint the chunk cuts */
    expect_malformed(buf, n, "cut varint");
    make_raw(buf, 0, NULL);
    buf[at + RAW_PUSH_AT + 2] = 5; /* a prefix of a name never seen */
    expect_malformed(buf, n, "prefix without a name");
    make_raw(buf, 0, NULL);
    buf[at + RAW_PUSH_AT] = PMR_STOP; /* a stop whose id the chunk cuts */
    buf[at + RAW_PUSH_AT + 2] = 0x80;
    memset(buf + at + RAW_PUSH_AT + 3, 0x80, n - (at + RAW_PUSH_AT + 3));
    expect_malformed(buf, n, "stop without an id");

    /* A varint of more than 64 bits; a TSC stream without a base point. */
    unsigned char ev[16] = {PMR_POP, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    size_t o = put_file_hdr(buf, 1, "x", PMR_CLOCK_BOOTTIME);
    o += put_chunk(buf + o, 2, 0, 0, ev, 11);
    expect_malformed(buf, o, "65-bit varint");
    ev[10] = 0x01; /* exactly 64 bits: fine */
    o = put_file_hdr(buf, 1, "x", PMR_CLOCK_BOOTTIME);
    o += put_chunk(buf + o, 2, 0, 0, ev, 11);
    CHECK_INT_EQ(load_raw_bytes(buf, o, &t, err, sizeof err), 0);
    CHECK_INT_EQ(t.n, 1); /* a pop with nothing open, at 2^64-1 */
    CHECK(t.n == 1 && t.r[0].end == UINT64_MAX && (t.r[0].flags & PMT_F_ORPHAN));
    pmt_trace_free(&t);
    o = put_file_hdr(buf, 1, "x", PMR_CLOCK_TSC);
    o += put_chunk(buf + o, 2, 5000, 5000, (const unsigned char[]){PMR_POP, 0}, 2);
    expect_malformed(buf, o, "TSC event before a calibration point");
    return pm_check_result();
}

/* A TSC-clock stream over four chunks of one thread: ticks become ns on
 * the line through the calibration points around them. Expected values
 * are floor(a.ns + (tick - a.tsc) * (b.ns - a.ns) / (b.tsc - a.tsc)),
 * worked out by hand (and in Python). */
static int case_raw_tsc(void)
{
    static unsigned char buf[1024];
    unsigned char ev[128];
    size_t o = put_file_hdr(buf, 7, "tsc", PMR_CLOCK_TSC), n;

    /* Chunk 1, points (10000, 5000) and its header's (22000, 9000): 1/3 ns
     * per tick. Push at 13000, pop 13300, push 13330, pop 16000. */
    n = put_cal(ev, 10000, 5000);
    static const unsigned char c1[] = {PMR_PUSH, 0xb8, 0x17, 0, 33};
    memcpy(ev + n, c1, sizeof c1), n += sizeof c1;
    memcpy(ev + n, "pm.decode mode=decode req=1 pos=9", 33), n += 33;
    static const unsigned char c1b[] = {PMR_POP, 0xac, 0x02, PMR_PUSH, 30, 32, 2, '1', '0',
                                        PMR_POP, 0xee, 0x14};
    memcpy(ev + n, c1b, sizeof c1b), n += sizeof c1b;
    o += put_chunk(buf + o, 43, 22000, 9000, ev, n);

    /* Chunk 2: push at 26000, then a point (40000, 13000), pop at 40500;
     * header (70000, 23000). */
    static const unsigned char c2[] = {PMR_PUSH, 0x90, 0x4e, 32, 2, '1', '1'};
    memcpy(ev, c2, sizeof c2), n = sizeof c2;
    n += put_cal(ev + n, 40000, 13000);
    static const unsigned char c2b[] = {PMR_POP, 0xf4, 0x03};
    memcpy(ev + n, c2b, sizeof c2b), n += sizeof c2b;
    o += put_chunk(buf + o, 43, 70000, 23000, ev, n);

    /* Chunk 3: a push at 40600, before the latest point (as an event
     * stamped just before another thread's flush took its point, recorded
     * after it): the segment before, although a later point exists. A pop
     * at 70100 on the segment to the header's (100000, 36000). */
    static const unsigned char c3[] = {PMR_PUSH, 100, 32, 2, '1', '2', PMR_POP, 0xbc, 0xe6, 0x01};
    o += put_chunk(buf + o, 43, 100000, 36000, c3, sizeof c3);

    /* Chunk 4: a mark at 101000, the domain 40 named "mine" (its id takes
     * a second byte), a push and pop in it at 101000. The header's point
     * (95000, 40000) runs backwards and is dropped, so they extrapolate
     * the last segment. */
    static const unsigned char c4[] = {PMR_MARK, 0xb4, 0xf1, 0x01, 0, 1, 'm',
                                       PMR_DOMAIN | 0xf8, 40, 0, 4, 'm', 'i', 'n', 'e',
                                       PMR_PUSH | 0xf8, 40, 0, 0, 1, 'd',
                                       PMR_POP | 0xf8, 40, 0};
    o += put_chunk(buf + o, 43, 95000, 40000, c4, sizeof c4);

    pmt_trace t;
    char err[300];
    pmt_trace_init(&t);
    CHECK_INT_EQ(load_raw_bytes(buf, o, &t, err, sizeof err), 0);
    static const struct {
        const char *name, *domain;
        uint64_t start, end;
        unsigned flags;
    } want[] = {
        {"pm.decode mode=decode req=1 pos=9", "MARKER_CORE_API", 6000, 6100, 0},
        {"pm.decode mode=decode req=1 pos=10", "MARKER_CORE_API", 6110, 7000, 0},
        {"pm.decode mode=decode req=1 pos=11", "MARKER_CORE_API", 9888, 13166, 0},
        {"pm.decode mode=decode req=1 pos=12", "MARKER_CORE_API", 13200, 23043, 0},
        {"m", "MARKER_CORE_API", 36433, 36433, PMT_F_MARK},
        {"d", "mine", 36433, 36433, 0},
    };
    REQUIRE(t.n == sizeof want / sizeof want[0]);
    for (size_t i = 0; i < t.n; i++) {
        CHECK_STR_EQ(t.r[i].name, want[i].name);
        CHECK_STR_EQ(t.r[i].domain, want[i].domain);
        CHECK_U64_EQ(t.r[i].start, want[i].start);
        CHECK_U64_EQ(t.r[i].end, want[i].end);
        CHECK_INT_EQ(t.r[i].flags, want[i].flags);
        CHECK_INT_EQ(t.r[i].corr, i + 1);
        CHECK_INT_EQ(t.r[i].pid, 7);
        CHECK_INT_EQ(t.r[i].tid, 43);
    }
    pmt_trace_free(&t);
    return pm_check_result();
}

/* pmr_tick_to_ns against values worked out with Python's integers. */
static int case_tick_to_ns(void)
{
    pmr_cal a = {1000, 5000}, b = {4000, 6000};
    CHECK_U64_EQ(pmr_tick_to_ns(2500, a, b), 5500);
    CHECK_U64_EQ(pmr_tick_to_ns(1000, a, b), 5000);
    CHECK_U64_EQ(pmr_tick_to_ns(4000, a, b), 6000);
    CHECK_U64_EQ(pmr_tick_to_ns(7000, a, b), 7000); /* past b */
    CHECK_U64_EQ(pmr_tick_to_ns(999, a, b), 4999);  /* floor(-1/3) */
    CHECK_U64_EQ(pmr_tick_to_ns(997, a, b), 4999);
    CHECK_U64_EQ(pmr_tick_to_ns(996, a, b), 4998);
    /* An hour at 3 GHz high in the counter: the product needs 128 bits. */
    pmr_cal h0 = {UINT64_C(1) << 63, UINT64_C(1000000000000000000)};
    pmr_cal h1 = {(UINT64_C(1) << 63) + UINT64_C(10800000000000),
                  UINT64_C(1000003600000000000)};
    CHECK_U64_EQ(pmr_tick_to_ns(h1.tsc + 12345, h0, h1), UINT64_C(1000003600000004115));
    /* A rate that is not a whole ratio. */
    pmr_cal z = {0, 0}, r = {UINT64_C(2899999999), UINT64_C(1000000000)};
    CHECK_U64_EQ(pmr_tick_to_ns(1, z, r), 0);
    CHECK_U64_EQ(pmr_tick_to_ns(UINT64_C(14500000002), z, r), UINT64_C(5000000002));
    CHECK_U64_EQ(pmr_tick_to_ns(UINT64_C(123456789012345678), z, r), UINT64_C(42571306570661029));
    /* The whole 64-bit range, and saturation at both ends. */
    pmr_cal m = {UINT64_MAX, UINT64_MAX};
    CHECK_U64_EQ(pmr_tick_to_ns(UINT64_MAX - 1, z, m), UINT64_MAX - 1);
    CHECK_U64_EQ(pmr_tick_to_ns(0, (pmr_cal){10, 5}, (pmr_cal){11, 1000}), 0);
    CHECK_U64_EQ(pmr_tick_to_ns(UINT64_MAX, z, (pmr_cal){1, 2}), UINT64_MAX);
    /* Non-decreasing across a calibration point where the rate changes. */
    pmr_cal p0 = {0, 0}, p1 = {3000, 1000}, p2 = {6000, 1003};
    uint64_t last = 0;
    for (uint64_t tick = 2990; tick < 3010; tick++) {
        uint64_t ns = tick < p1.tsc ? pmr_tick_to_ns(tick, p0, p1) : pmr_tick_to_ns(tick, p1, p2);
        CHECK(ns >= last);
        last = ns;
    }
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"csv_valid", case_csv_valid}, {"csv_malformed", case_csv_malformed},
        {"marker_csv_malformed", case_marker_csv_malformed}, {"json_valid", case_json_valid},
        {"json_malformed", case_json_malformed}, {"json_trace_malformed", case_json_trace_malformed},
        {"us_to_ns", case_us_to_ns}, {"names_valid", case_names_valid},
        {"names_invalid", case_names_invalid}, {"expect_parse", case_expect_parse},
        {"sha256", case_sha256}, {"raw_partial", case_raw_partial}, {"raw_malformed", case_raw_malformed},
        {"raw_tsc", case_raw_tsc}, {"tick_to_ns", case_tick_to_ns},
    };
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_parsers CASE\n");
    return 2;
}
