/* test_clock.c — process clocks in the tools: the offset map with numbers
 * worked by hand, raw files with clock records built byte by byte from
 * pmraw.h (not by the recorder), clock.csv written and read back, and the
 * lines report and check print (exact text).
 * usage: test_clock CASE
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pm_check.h"
#include "pmraw.h"
#include "pmt.h"

/* ---- the map ---------------------------------------------------------------- */

static int case_map(void)
{
    /* One record: the same offset everywhere. */
    pmt_clock_point one = {1000, -400, 7};
    CHECK_U64_EQ(pmt_clock_map(&one, 1, 0), 0); /* saturates at 0 */
    CHECK_U64_EQ(pmt_clock_map(&one, 1, 1000), 600);
    CHECK_U64_EQ(pmt_clock_map(&one, 1, 5000000000u), 4999999600u);
    one.offset_ns = 5;
    CHECK_U64_EQ(pmt_clock_map(&one, 1, UINT64_MAX - 2), UINT64_MAX); /* and at the top */
    /* Two: -100 at 1000 and -300 at 2000. Between, the line: at 1500
     * -200; at 1001 -100.2 rounds down to -101; at 1999 -299.8 to -300. */
    pmt_clock_point two[] = {{1000, -100, 3}, {2000, -300, 9}};
    CHECK_U64_EQ(pmt_clock_map(two, 2, 500), 400);    /* before: the first's */
    CHECK_U64_EQ(pmt_clock_map(two, 2, 1000), 900);
    CHECK_U64_EQ(pmt_clock_map(two, 2, 1001), 900);   /* 1001 - 101 */
    CHECK_U64_EQ(pmt_clock_map(two, 2, 1500), 1300);
    CHECK_U64_EQ(pmt_clock_map(two, 2, 1999), 1699);  /* 1999 - 300 */
    CHECK_U64_EQ(pmt_clock_map(two, 2, 2000), 1700);
    CHECK_U64_EQ(pmt_clock_map(two, 2, 9000), 8700);  /* after: the last's */
    /* Rising: +10 at 0, +13 at 4: at 1 10.75 rounds down to 10, at 3 12.25
     * to 12. */
    pmt_clock_point up[] = {{0, 10, 0}, {4, 13, 0}};
    CHECK_U64_EQ(pmt_clock_map(up, 2, 1), 11);
    CHECK_U64_EQ(pmt_clock_map(up, 2, 3), 15);
    /* Sorting: by time, equal times keeping their order, so the later
     * record of one instant is the one the map uses after it. */
    pmt_clock_point p[] = {{30, 3, 0}, {10, 1, 0}, {20, 2, 0}, {10, 4, 0}};
    pmt_clock_sort(p, 4);
    CHECK_U64_EQ(p[0].at_ns, 10);
    CHECK(p[0].offset_ns == 1 && p[1].offset_ns == 4 && p[2].offset_ns == 2 && p[3].offset_ns == 3);
    CHECK_U64_EQ(pmt_clock_map(p, 4, 10), 14);
    CHECK_U64_EQ(pmt_clock_map(p, 4, 5), 6);
    return pm_check_result();
}

/* ---- raw files ---------------------------------------------------------------- */

static size_t put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return 8;
}

static const uint8_t k_boot[16] = {0x6f, 0x1c, 0x2b, 0x3a, 0x49, 0x58, 0x67, 0x76,
                                   0x85, 0x94, 0xa3, 0xb2, 0xc1, 0xd0, 0xef, 0xfe};

/* A BOOTTIME file of pid 42 ("pm-shardd"), magic as given, boot k_boot:
 * one chunk of thread 43 with a push of "pm.draft req=1 tokens=2" at 1000
 * and its pop at 1500, then the clock records recs[0..n). */
static size_t make_file(unsigned char *buf, const char *magic, const pmr_clock_rec *recs, size_t n)
{
    pmr_file_hdr fh;
    memset(&fh, 0, sizeof fh);
    memcpy(fh.magic, magic, 8);
    fh.pid = 42;
    memcpy(fh.comm, "pm-shardd", 9);
    fh.clock = PMR_CLOCK_BOOTTIME;
    memcpy(fh.boot_id, k_boot, 16);
    memcpy(buf, &fh, sizeof fh);
    size_t o = sizeof fh;
    unsigned char ev[64];
    size_t e = 0;
    ev[e++] = PMR_CAL;
    e += put_le64(ev + e, 900);
    e += put_le64(ev + e, 900);
    static const unsigned char push[] = {PMR_PUSH, 100, 0, 23};
    memcpy(ev + e, push, sizeof push), e += sizeof push;
    memcpy(ev + e, "pm.draft req=1 tokens=2", 23), e += 23;
    static const unsigned char pop[] = {PMR_POP, 0xf4, 0x03}; /* 500 */
    memcpy(ev + e, pop, sizeof pop), e += sizeof pop;
    pmr_chunk_hdr ch;
    memset(&ch, 0, sizeof ch);
    ch.magic = PMR_CHUNK_MAGIC;
    ch.tid = 43;
    ch.bytes = (uint32_t)e;
    memcpy(buf + o, &ch, sizeof ch);
    memcpy(buf + o + sizeof ch, ev, e);
    o += sizeof ch + e;
    for (size_t i = 0; i < n; i++) {
        memset(&ch, 0, sizeof ch);
        ch.magic = PMR_CLOCK_MAGIC;
        ch.tid = 43;
        ch.bytes = sizeof recs[i];
        memcpy(buf + o, &ch, sizeof ch);
        memcpy(buf + o + sizeof ch, &recs[i], sizeof recs[i]);
        o += sizeof ch + sizeof recs[i];
    }
    return o;
}

static int load_bytes(const unsigned char *buf, size_t len, pmt_trace *t, char *err, size_t errlen)
{
    char path[] = "/tmp/pm-clock-test.XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, buf, len) == (ssize_t)len);
    close(fd);
    int rc = pmt_raw_load(t, path, err, errlen);
    unlink(path);
    return rc;
}

static int case_raw_records(void)
{
    unsigned char buf[1024];
    char err[300] = "";
    pmt_trace t;
    /* No record: times as recorded, the boot noted, not shifted. */
    pmt_trace_init(&t);
    REQUIRE(load_bytes(buf, make_file(buf, PMR_FILE_MAGIC, NULL, 0), &t, err, sizeof err) == 0);
    REQUIRE(t.n == 1 && t.nclocks == 1);
    CHECK_U64_EQ(t.r[0].start, 1000);
    CHECK_U64_EQ(t.r[0].end, 1500);
    CHECK_INT_EQ(t.clocks[0].pid, 42);
    CHECK_INT_EQ(t.clocks[0].shifted, 0);
    CHECK(memcmp(t.clocks[0].boot_id, k_boot, 16) == 0);
    pmt_trace_free(&t);
    /* One record: offset -400 everywhere. */
    pmr_clock_rec r1 = {-400, 7, 1200, 8, 0, {0}};
    pmt_trace_init(&t);
    REQUIRE(load_bytes(buf, make_file(buf, PMR_FILE_MAGIC, &r1, 1), &t, err, sizeof err) == 0);
    REQUIRE(t.n == 1 && t.nclocks == 1);
    CHECK_U64_EQ(t.r[0].start, 600);
    CHECK_U64_EQ(t.r[0].end, 1100);
    CHECK_INT_EQ(t.clocks[0].shifted, 1);
    CHECK(t.clocks[0].offset_min == -400 && t.clocks[0].offset_max == -400);
    CHECK_U64_EQ(t.clocks[0].bound_ns, 7);
    CHECK_INT_EQ(t.clocks[0].records, 1);
    pmt_trace_free(&t);
    /* Two, written out of order: -300 at 2000, -100 at 1000. The push
     * (1000) moves by -100, the pop (1500) by -200. The bound is the
     * larger. */
    pmr_clock_rec r2[] = {{-300, 9, 2000, 8, 0, {0}}, {-100, 3, 1000, 8, 0, {1}}};
    pmt_trace_init(&t);
    REQUIRE(load_bytes(buf, make_file(buf, PMR_FILE_MAGIC, r2, 2), &t, err, sizeof err) == 0);
    REQUIRE(t.n == 1 && t.nclocks == 1);
    CHECK_U64_EQ(t.r[0].start, 900);
    CHECK_U64_EQ(t.r[0].end, 1300);
    CHECK(t.clocks[0].offset_min == -300 && t.clocks[0].offset_max == -100);
    CHECK_U64_EQ(t.clocks[0].bound_ns, 9);
    CHECK_INT_EQ(t.clocks[0].records, 2);
    pmt_trace_free(&t);
    /* A record from a driver of our own boot moves nothing (its offset is
     * the measurement's error); one of another boot still applies. */
    pmr_clock_rec r3[] = {{-300, 9, 2000, 8, 0, {0}}, {-100, 3, 1000, 8, 0, {0}}};
    memcpy(r3[0].driver_boot, k_boot, 16);
    memcpy(r3[1].driver_boot, k_boot, 16);
    pmt_trace_init(&t);
    REQUIRE(load_bytes(buf, make_file(buf, PMR_FILE_MAGIC, r3, 2), &t, err, sizeof err) == 0);
    REQUIRE(t.n == 1 && t.nclocks == 1);
    CHECK_U64_EQ(t.r[0].start, 1000);
    CHECK_U64_EQ(t.r[0].end, 1500);
    CHECK_INT_EQ(t.clocks[0].shifted, 0);
    pmt_trace_free(&t);
    r3[1].driver_boot[0] ^= 1;
    pmt_trace_init(&t);
    REQUIRE(load_bytes(buf, make_file(buf, PMR_FILE_MAGIC, r3, 2), &t, err, sizeof err) == 0);
    REQUIRE(t.n == 1 && t.nclocks == 1);
    CHECK_U64_EQ(t.r[0].start, 900);
    CHECK_U64_EQ(t.r[0].end, 1400);
    CHECK_INT_EQ(t.clocks[0].records, 1);
    pmt_trace_free(&t);
    /* A file of nothing (a fork child that exec'd at once) notes no clock. */
    pmt_trace_init(&t);
    REQUIRE(load_bytes(buf, sizeof(pmr_file_hdr), &t, err, sizeof err) == 0);
    CHECK_INT_EQ(t.nclocks, 0);
    pmt_trace_free(&t);
    /* Version 03 (before clock records): read as before, boot unknown. */
    pmt_trace_init(&t);
    REQUIRE(load_bytes(buf, make_file(buf, PMR_FILE_MAGIC_03, NULL, 0), &t, err, sizeof err) == 0);
    REQUIRE(t.n == 1 && t.nclocks == 1);
    static const uint8_t zero[16];
    CHECK(memcmp(t.clocks[0].boot_id, zero, 16) == 0);
    pmt_trace_free(&t);
    return pm_check_result();
}

/* A record of the wrong size, or with values the wire cannot carry, makes
 * the file damaged. The record's chunk starts at 159: the 64-byte file
 * header, the event chunk's 48-byte header and its 47 bytes of events. */
static int case_raw_bad_records(void)
{
    unsigned char buf[1024];
    pmr_clock_rec r = {-400, 7, 1200, 8, 0, {0}};
    size_t n = make_file(buf, PMR_FILE_MAGIC, &r, 1);
    size_t at = n - sizeof r - sizeof(pmr_chunk_hdr);
    CHECK_INT_EQ(at, 159);
    const char *cases[] = {"size 31", "offset 2^62", "offset -2^62", "bound 2^62"};
    for (int c = 0; c < 4; c++) {
        pmr_clock_rec b = r;
        n = make_file(buf, PMR_FILE_MAGIC, &b, 1);
        if (c == 0) {
            pmr_chunk_hdr ch;
            memcpy(&ch, buf + at, sizeof ch);
            ch.bytes = 31;
            memcpy(buf + at, &ch, sizeof ch);
            n--;
        } else {
            if (c == 1)
                b.offset_ns = INT64_C(1) << 62;
            if (c == 2)
                b.offset_ns = -(INT64_C(1) << 62);
            if (c == 3)
                b.bound_ns = UINT64_C(1) << 62;
            memcpy(buf + at + sizeof(pmr_chunk_hdr), &b, sizeof b);
        }
        pmt_trace t;
        char err[300] = "";
        char want[64];
        snprintf(want, sizeof want, "malformed clock record at byte %zu", at);
        pmt_trace_init(&t);
        int rc = load_bytes(buf, n, &t, err, sizeof err);
        if (rc != -1 || !strstr(err, want))
            fprintf(stderr, "case %s: rc %d, err \"%s\"\n", cases[c], rc, err);
        CHECK_INT_EQ(rc, -1);
        CHECK(strstr(err, want) != NULL);
        pmt_trace_free(&t);
    }
    return pm_check_result();
}

/* ---- clock.csv and the printed lines ------------------------------------------- */

/* Driver 100 and 101 on boot A, daemon 200 on boot B shifted by
 * -5000000271 +- 10155. */
static void three(pmt_trace *t)
{
    static const uint8_t b[16] = {0xe5, 0xf6, 0x07, 0x18, 0x29, 0x3a, 0x4b, 0x5c,
                                  0x6d, 0x7e, 0x8f, 0x90, 0xa1, 0xb2, 0xc3, 0xd4};
    pmt_clock c;
    memset(&c, 0, sizeof c);
    memcpy(c.boot_id, k_boot, 16);
    c.pid = 100;
    REQUIRE(pmt_clock_note(t, &c) == 0);
    c.pid = 101;
    REQUIRE(pmt_clock_note(t, &c) == 0);
    memcpy(c.boot_id, b, 16);
    c.pid = 200;
    c.shifted = 1;
    c.offset_min = c.offset_max = -5000000271;
    c.bound_ns = 10155;
    c.records = 1;
    REQUIRE(pmt_clock_note(t, &c) == 0);
    REQUIRE(pmt_trace_label(t, 200, 0, "pm-shardd") == 0);
}

static char *print_to_text(size_t (*fn)(const pmt_trace *, FILE *, const char *), const pmt_trace *t,
                           const char *lead, size_t *lines)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    *lines = fn(t, f, lead);
    fclose(f);
    return text;
}

static int case_csv_roundtrip(void)
{
    pmt_trace t, u;
    pmt_trace_init(&t);
    pmt_trace_init(&u);
    three(&t);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    CHECK_INT_EQ(pmt_clock_write_csv(&t, f), 0);
    fclose(f);
    CHECK_STR_EQ(text,
                 "\"Process_Id\",\"Boot_Id\",\"Offset_Ns\",\"Offset_Max_Ns\",\"Uncertainty_Ns\",\"Records\"\n"
                 "\"100\",\"6f1c2b3a-4958-6776-8594-a3b2c1d0effe\",\"\",\"\",\"\",\"0\"\n"
                 "\"101\",\"6f1c2b3a-4958-6776-8594-a3b2c1d0effe\",\"\",\"\",\"\",\"0\"\n"
                 "\"200\",\"e5f60718-293a-4b5c-6d7e-8f90a1b2c3d4\",\"-5000000271\",\"-5000000271\","
                 "\"10155\",\"1\"\n");
    char path[] = "/tmp/pm-clock-csv.XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0 && write(fd, text, len) == (ssize_t)len);
    close(fd);
    char err[300] = "";
    CHECK_INT_EQ(pmt_clock_load_csv(&u, path, err, sizeof err), 0);
    REQUIRE(u.nclocks == 3);
    for (size_t i = 0; i < 3; i++) {
        CHECK_INT_EQ(u.clocks[i].pid, t.clocks[i].pid);
        CHECK(memcmp(u.clocks[i].boot_id, t.clocks[i].boot_id, 16) == 0);
        CHECK_INT_EQ(u.clocks[i].shifted, t.clocks[i].shifted);
        CHECK(u.clocks[i].offset_min == t.clocks[i].offset_min);
        CHECK_U64_EQ(u.clocks[i].bound_ns, t.clocks[i].bound_ns);
        CHECK_INT_EQ(u.clocks[i].records, t.clocks[i].records);
    }
    /* Malformed rows are refused naming the line. */
    static const char *const bad[] = {
        "\"x\",\"-\",\"\",\"\",\"\",\"0\"\n",             /* pid */
        "\"1\",\"6f1c2b3a-4958\",\"\",\"\",\"\",\"0\"\n", /* boot id cut */
        "\"1\",\"-\",\"5\",\"\",\"\",\"0\"\n",            /* an offset with no record */
        "\"1\",\"-\",\"5\",\"4\",\"1\",\"1\"\n",          /* min above max */
        "\"1\",\"-\",\"+5\",\"5\",\"1\",\"1\"\n",         /* a sign that is not '-' */
        "\"1\",\"-\",\"5\",\"5\",\"-1\",\"1\"\n",         /* negative bound */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fd = open(path, O_WRONLY | O_TRUNC);
        REQUIRE(fd >= 0);
        const char *head = "\"Process_Id\",\"Boot_Id\",\"Offset_Ns\",\"Offset_Max_Ns\","
                           "\"Uncertainty_Ns\",\"Records\"\n";
        REQUIRE(write(fd, head, strlen(head)) == (ssize_t)strlen(head));
        REQUIRE(write(fd, bad[i], strlen(bad[i])) == (ssize_t)strlen(bad[i]));
        close(fd);
        pmt_trace v;
        pmt_trace_init(&v);
        err[0] = 0;
        CHECK_INT_EQ(pmt_clock_load_csv(&v, path, err, sizeof err), -1);
        if (!strstr(err, ":2: not a clock row"))
            fprintf(stderr, "row %zu: \"%s\"\n", i, err);
        CHECK(strstr(err, ":2: not a clock row") != NULL);
        pmt_trace_free(&v);
    }
    unlink(path);
    free(text);
    pmt_trace_free(&t);
    pmt_trace_free(&u);
    return pm_check_result();
}

static int case_lines(void)
{
    pmt_trace t;
    pmt_trace_init(&t);
    three(&t);
    size_t n;
    char *text = print_to_text(pmt_clock_print, &t, "clock: ", &n);
    CHECK_INT_EQ(n, 1);
    CHECK_STR_EQ(text, "clock: pid 200 (pm-shardd): on the driver's clock, shifted by -5000000271 ns "
                       "+- 10155 ns (1 record)\n");
    free(text);
    /* One host left on its own clock: nothing to warn about. */
    text = print_to_text(pmt_clock_warn, &t, "warning: clock: ", &n);
    CHECK_INT_EQ(n, 0);
    CHECK_STR_EQ(text, "");
    free(text);
    /* The daemon without its offset: two hosts that do not compare. */
    t.clocks[2].shifted = 0;
    text = print_to_text(pmt_clock_warn, &t, "warning: clock: ", &n);
    CHECK_INT_EQ(n, 1);
    CHECK_STR_EQ(text, "warning: clock: processes timed on 2 hosts (boots) with no recorded clock "
                       "offset between them; their times do not compare: boot "
                       "6f1c2b3a-4958-6776-8594-a3b2c1d0effe: pid 100 101; boot "
                       "e5f60718-293a-4b5c-6d7e-8f90a1b2c3d4: pid 200\n");
    free(text);
    text = print_to_text(pmt_clock_print, &t, "clock: ", &n);
    CHECK_INT_EQ(n, 0);
    free(text);
    /* Several records: the range of offsets. */
    t.clocks[2].shifted = 1;
    t.clocks[2].offset_max = -4999999000;
    t.clocks[2].records = 3;
    text = print_to_text(pmt_clock_print, &t, "", &n);
    CHECK_STR_EQ(text, "pid 200 (pm-shardd): on the driver's clock, shifted by -5000000271..-4999999000 "
                       "ns +- 10155 ns (3 records)\n");
    free(text);
    pmt_trace_free(&t);
    return pm_check_result();
}

static char *shift_text(const pmt_trace *t, const char *csv, int header, int *rc)
{
    char *text = NULL, err[300] = "";
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    *rc = pmt_clock_shift_csv(t, "k.csv", csv, strlen(csv), header, f, err, sizeof err);
    fclose(f);
    if (*rc)
        fprintf(stderr, "shift: %s\n", err);
    return text;
}

/* GPU rows of a moved process move with its ranges: pid 200 has -400 at
 * 1000 and -600 at 2000, so 1500 -> 1000 and 2500 -> 1900; pid 100's stay
 * (quoted now), and with nothing moved the text is copied as it was. */
static int case_gpu_csv(void)
{
    static const char csv[] =
        "\"Kernel_Name\",\"Correlation_Id\",\"Start_Timestamp\",\"End_Timestamp\",\"Process_Id\"\n"
        "\"k, a\",7,1500,2500,200\n"
        "k2,8,1500,2500,100\n";
    pmt_trace t;
    pmt_trace_init(&t);
    int rc;
    char *out = shift_text(&t, csv, 1, &rc);
    CHECK_INT_EQ(rc, 0);
    CHECK_STR_EQ(out, csv);
    free(out);
    out = shift_text(&t, csv, 0, &rc);
    CHECK_STR_EQ(out, "\"k, a\",7,1500,2500,200\nk2,8,1500,2500,100\n");
    free(out);
    pmt_clock_point pts[] = {{2000, -600, 5}, {1000, -400, 5}};
    pmt_clock c;
    memset(&c, 0, sizeof c);
    c.pid = 200;
    c.shifted = 1;
    c.points = pts;
    c.npoints = 2;
    REQUIRE(pmt_clock_note(&t, &c) == 0);
    out = shift_text(&t, csv, 1, &rc);
    CHECK_INT_EQ(rc, 0);
    CHECK_STR_EQ(out,
                 "\"Kernel_Name\",\"Correlation_Id\",\"Start_Timestamp\",\"End_Timestamp\",\"Process_Id\"\n"
                 "\"k, a\",\"7\",\"1000\",\"1900\",\"200\"\n"
                 "\"k2\",\"8\",\"1500\",\"2500\",\"100\"\n");
    free(out);
    out = shift_text(&t, csv, 0, &rc);
    CHECK_STR_EQ(out, "\"k, a\",\"7\",\"1000\",\"1900\",\"200\"\n\"k2\",\"8\",\"1500\",\"2500\",\"100\"\n");
    free(out);
    /* A malformed record is refused. */
    out = shift_text(&t, "\"Start_Timestamp\",\"Process_Id\"\n\"1,200\n", 1, &rc);
    CHECK_INT_EQ(rc, -1);
    free(out);
    pmt_trace_free(&t);
    return pm_check_result();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"map", case_map},
                 {"raw_records", case_raw_records},
                 {"raw_bad_records", case_raw_bad_records},
                 {"csv_roundtrip", case_csv_roundtrip},
                 {"lines", case_lines},
                 {"gpu_csv", case_gpu_csv}};
    for (size_t i = 0; argc == 2 && i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0)
            return cases[i].fn();
    fprintf(stderr, "usage: %s CASE\n", argv[0]);
    return 2;
}
