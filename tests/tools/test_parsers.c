/* test_parsers.c — the tools' decoders on valid, malformed and partial
 * input: CSV, JSON, the range-name grammar, --expect, microsecond text,
 * raw recorder files, and SHA-256 against FIPS 180-4's example vectors.
 * usage: test_parsers CASE
 */
#define _GNU_SOURCE
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
    CHECK_INT_EQ(nm.shard, 1);
    CHECK_INT_EQ(nm.first_layer, 12);
    CHECK_INT_EQ(nm.last_layer, 23);
    CHECK_INT_EQ(nm.req, 3);
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

/* Builds a raw file: header, one chunk (push "pm.draft req=1 tokens=2",
 * pop), then `tail` extra bytes of a second, cut chunk. */
static size_t make_raw(unsigned char *buf, size_t tail)
{
    pmr_file_hdr fh;
    memset(&fh, 0, sizeof fh);
    memcpy(fh.magic, PMR_FILE_MAGIC, 8);
    fh.pid = 42;
    memcpy(fh.comm, "engine", 6);
    const char *name = "pm.draft req=1 tokens=2";
    uint32_t nl = (uint32_t)strlen(name);
    pmr_event push = {PMR_PUSH, PMR_DOMAIN_ROCTX, (uint16_t)nl, 0, 1000};
    pmr_event pop = {PMR_POP, PMR_DOMAIN_ROCTX, 0, 0, 1500};
    pmr_chunk_hdr ch;
    memset(&ch, 0, sizeof ch);
    ch.magic = PMR_CHUNK_MAGIC;
    ch.tid = 43;
    ch.bytes = (uint32_t)(2 * sizeof(pmr_event) + pmr_padded(nl));
    size_t o = 0;
    memcpy(buf + o, &fh, sizeof fh), o += sizeof fh;
    memcpy(buf + o, &ch, sizeof ch), o += sizeof ch;
    memcpy(buf + o, &push, sizeof push), o += sizeof push;
    memset(buf + o, 0, pmr_padded(nl));
    memcpy(buf + o, name, nl), o += pmr_padded(nl);
    memcpy(buf + o, &pop, sizeof pop), o += sizeof pop;
    memcpy(buf + o, &ch, tail < sizeof ch ? tail : sizeof ch), o += tail < sizeof ch ? tail : sizeof ch;
    return o;
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
        size_t n = make_raw(buf, tail);
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
    size_t full = make_raw(buf, 0);
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

static int case_raw_malformed(void)
{
    unsigned char buf[512];
    char err[300];
    size_t n = make_raw(buf, 0);
    pmt_trace t;
    pmt_trace_init(&t);
    buf[0] = 'X';
    CHECK_INT_EQ(load_raw_bytes(buf, n, &t, err, sizeof err), -1);
    CHECK(strstr(err, "not a phasemark raw file") != NULL);
    make_raw(buf, 0);
    pmr_event ev;
    size_t at = sizeof(pmr_file_hdr) + sizeof(pmr_chunk_hdr);
    memcpy(&ev, buf + at, sizeof ev);
    ev.len = 4000; /* longer than its chunk */
    memcpy(buf + at, &ev, sizeof ev);
    CHECK_INT_EQ(load_raw_bytes(buf, n, &t, err, sizeof err), -1);
    CHECK(strstr(err, "malformed events") != NULL);
    make_raw(buf, 0);
    ev.len = 0;
    ev.type = 99;
    memcpy(buf + at, &ev, sizeof ev);
    CHECK_INT_EQ(load_raw_bytes(buf, n, &t, err, sizeof err), -1);
    /* A start/stop event too short for its range id. */
    make_raw(buf, 0);
    size_t pop_at = at + sizeof ev + pmr_padded((uint32_t)strlen("pm.draft req=1 tokens=2"));
    memcpy(&ev, buf + pop_at, sizeof ev);
    ev.type = PMR_STOP;
    memcpy(buf + pop_at, &ev, sizeof ev);
    CHECK_INT_EQ(load_raw_bytes(buf, n, &t, err, sizeof err), -1);
    pmt_trace_free(&t);
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
    };
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: test_parsers CASE\n");
    return 2;
}
