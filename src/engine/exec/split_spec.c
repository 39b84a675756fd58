/* split_spec.c — the placement grammar (docs/split.md):
 *
 *   placement := shard ("," shard)*
 *   shard     := span "@" target ["?" option ("&" option)*]
 *   span      := LAYER | LAYER "-" LAYER
 *   target    := "local" [":" BACKEND] | "spawn" [":" BACKEND]
 *              | "unix:" PATH | "tcp:" HOST ":" PORT | "tcp:[" V6 "]:" PORT
 *   option    := transport=stream|shared | token=T | timeout=MS
 *              | threads=N | exe=PATH
 *
 * Parsing is a pure function of the text and the layer count; every
 * refusal names the shard (by its index in the text) and the problem.
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend_name.h"
#include "phasemark/wire.h"
#include "split.h"

/* The longest placement text accepted. */
#define SPEC_MAX 4096

const char *llm_shard_kind_name(llm_shard_kind kind)
{
    switch (kind) {
    case LLM_SHARD_LOCAL: return "local";
    case LLM_SHARD_UNIX: return "unix";
    case LLM_SHARD_TCP: return "tcp";
    case LLM_SHARD_SPAWN: return "spawn";
    }
    return "unknown";
}

/* Parses a whole decimal number in [lo, hi] from len bytes at p. */
static int parse_num(const char *p, size_t len, long lo, long hi, long *out)
{
    char buf[24];
    if (len == 0 || len >= sizeof buf || p[0] == '-' || p[0] == '+' || p[0] == ' ')
        return -1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    char *end;
    long v = strtol(buf, &end, 10);
    if (*end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Copies len bytes into a fixed field; -1 when it does not fit. */
static int copy_field(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap)
        return -1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return 0;
}

static int bad(char *err, size_t errlen, int idx, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* One refusal line: "placement: shard I: <problem>" (idx < 0: no shard). */
static int bad(char *err, size_t errlen, int idx, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* Quoted user text may hold control bytes; the line stays one line. */
    for (char *c = line; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    if (idx >= 0)
        llm_errf(err, errlen, "placement: shard %d: %s", idx, line);
    else
        llm_errf(err, errlen, "placement: %s", line);
    return LLM_EINVAL;
}

static int parse_span(const char *p, size_t len, int32_t n_layers, llm_shard_spec *sh,
                      int idx, char *err, size_t errlen)
{
    const char *dash = memchr(p, '-', len);
    long a, b;
    char text[48];
    snprintf(text, sizeof text, "%.*s", (int)(len > 40 ? 40 : len), p);
    if (dash) {
        if (parse_num(p, (size_t)(dash - p), 0, 1L << 20, &a) ||
            parse_num(dash + 1, len - (size_t)(dash - p) - 1, 0, 1L << 20, &b))
            return bad(err, errlen, idx, "bad layer span '%s' (want A-B or A)", text);
    } else if (parse_num(p, len, 0, 1L << 20, &a)) {
        return bad(err, errlen, idx, "bad layer span '%s' (want A-B or A)", text);
    } else {
        b = a;
    }
    if (a > b)
        return bad(err, errlen, idx, "layer span '%s' is reversed", text);
    if (b >= n_layers)
        return bad(err, errlen, idx, "layer %ld is out of range (the model has %d layers, 0-%d)",
                   b, (int)n_layers, (int)n_layers - 1);
    sh->first = (int32_t)a;
    sh->last = (int32_t)b;
    return 0;
}

/* A remote target's address, by the wire's own parser (the one pmw_connect
 * uses), plus what connecting needs beyond it: "unix:" spelled out (a bare
 * path is not a target), and for TCP a host and a port from 1. */
static int address_ok(const char *t)
{
    pmw_address a;
    if (pmw_address_parse(t, &a, NULL, 0) != 0)
        return 0;
    if (a.is_unix)
        return strncmp(t, "unix:", 5) == 0;
    return a.host_given && a.port > 0;
}

static int parse_target(const char *p, size_t len, llm_shard_spec *sh, int idx, char *err,
                        size_t errlen)
{
    char t[LLM_SPLIT_MAX_ADDR + 8];
    if (copy_field(t, sizeof t, p, len))
        return bad(err, errlen, idx, "%s", "target too long");
    if (strcmp(t, "local") == 0 || strcmp(t, "spawn") == 0 ||
        strncmp(t, "local:", 6) == 0 || strncmp(t, "spawn:", 6) == 0) {
        sh->kind = t[0] == 'l' ? LLM_SHARD_LOCAL : LLM_SHARD_SPAWN;
        const char *be = t[5] == ':' ? t + 6 : "cpu";
        llm_backend_name bn;
        char why[96];
        if (llm_backend_name_parse(be, &bn, why, sizeof why) != 0)
            return bad(err, errlen, idx, "%s", why);
        if (copy_field(sh->backend, sizeof sh->backend, be, strlen(be)))
            return bad(err, errlen, idx, "backend name '%s' too long", bn.text);
        return 0;
    }
    if (strncmp(t, "unix:", 5) == 0) {
        if (!address_ok(t))
            return bad(err, errlen, idx, "bad address '%s' (unix:PATH, under 108 bytes)", t);
        sh->kind = LLM_SHARD_UNIX;
    } else if (strncmp(t, "tcp:", 4) == 0) {
        if (!address_ok(t))
            return bad(err, errlen, idx, "bad address '%s' (tcp:HOST:PORT, port 1-65535)", t);
        sh->kind = LLM_SHARD_TCP;
    } else {
        return bad(err, errlen, idx, "unknown target '%s' (local, spawn, unix:PATH, tcp:HOST:PORT)", t);
    }
    if (copy_field(sh->address, sizeof sh->address, t, strlen(t)))
        return bad(err, errlen, idx, "address longer than %d bytes", LLM_SPLIT_MAX_ADDR - 1);
    return 0;
}

/* Which options each kind takes. */
static int option_allowed(llm_shard_kind kind, const char *key)
{
    int remote = kind != LLM_SHARD_LOCAL;
    if (strcmp(key, "timeout") == 0)
        return remote;
    if (strcmp(key, "transport") == 0)
        return kind == LLM_SHARD_UNIX || kind == LLM_SHARD_SPAWN || kind == LLM_SHARD_TCP;
    if (strcmp(key, "token") == 0)
        return kind == LLM_SHARD_UNIX || kind == LLM_SHARD_TCP;
    if (strcmp(key, "threads") == 0)
        return kind == LLM_SHARD_LOCAL || kind == LLM_SHARD_SPAWN;
    if (strcmp(key, "exe") == 0)
        return kind == LLM_SHARD_SPAWN;
    return -1;
}

static int set_option(llm_shard_spec *sh, const char *key, const char *val, int idx,
                      char *err, size_t errlen)
{
    long v;
    if (strcmp(key, "transport") == 0) {
        if (strcmp(val, "stream") == 0)
            sh->transport = PMW_TRANSPORT_STREAM;
        else if (strcmp(val, "shared") == 0 && sh->kind != LLM_SHARD_TCP)
            sh->transport = PMW_TRANSPORT_SHARED;
        else
            return sh->kind == LLM_SHARD_TCP && strcmp(val, "shared") == 0
                   ? bad(err, errlen, idx, "transport '%s' is not possible over tcp (stream only)", val)
                   : bad(err, errlen, idx, "unknown transport '%s' (stream, shared)", val);
    } else if (strcmp(key, "timeout") == 0) {
        if (parse_num(val, strlen(val), 1, 3600000, &v))
            return bad(err, errlen, idx, "bad timeout '%s' (milliseconds, 1-3600000)", val);
        sh->timeout_ms = (int)v;
    } else if (strcmp(key, "threads") == 0) {
        if (parse_num(val, strlen(val), 1, 1024, &v))
            return bad(err, errlen, idx, "bad threads '%s' (1-1024)", val);
        sh->threads = (int32_t)v;
    } else if (strcmp(key, "token") == 0) {
        if (val[0] == '\0' || copy_field(sh->token, sizeof sh->token, val, strlen(val)))
            return bad(err, errlen, idx, "%s", "token must be 1-127 bytes");
    } else if (val[0] == '\0' || copy_field(sh->exe, sizeof sh->exe, val, strlen(val))) {
        return bad(err, errlen, idx, "%s", "exe must be a path of 1-255 bytes");
    }
    return 0;
}

/* Options "k=v&k=v" (len bytes at p). */
static int parse_options(const char *p, size_t len, llm_shard_spec *sh, int idx, char *err,
                         size_t errlen)
{
    const char *end = p + len;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        char key[16], val[LLM_SPLIT_MAX_PATH];
        if (!eq || copy_field(key, sizeof key, p, (size_t)(eq - p)) ||
            copy_field(val, sizeof val, eq + 1, (size_t)(stop - eq - 1))) {
            char text[64];
            snprintf(text, sizeof text, "%.*s", (int)((stop - p) > 48 ? 48 : stop - p), p);
            return bad(err, errlen, idx, "bad option '%s' (want key=value)", text);
        }
        int allowed = option_allowed(sh->kind, key);
        if (allowed < 0)
            return bad(err, errlen, idx, "unknown option '%s' (transport, token, timeout, threads, exe)", key);
        if (!allowed)
            return bad(err, errlen, idx, "option '%s' does not apply to a %s shard", key,
                       llm_shard_kind_name(sh->kind));
        int rc = set_option(sh, key, val, idx, err, errlen);
        if (rc)
            return rc;
        p = amp ? amp + 1 : end;
    }
    return 0;
}

static int parse_shard(const char *p, size_t len, int32_t n_layers, llm_shard_spec *sh,
                       int idx, char *err, size_t errlen)
{
    memset(sh, 0, sizeof *sh);
    sh->transport = PMW_TRANSPORT_STREAM;
    sh->timeout_ms = LLM_SPLIT_TIMEOUT_MS;
    const char *at = memchr(p, '@', len);
    if (!at)
        return bad(err, errlen, idx, "%s", "missing '@' (want LAYERS@TARGET)");
    int rc = parse_span(p, (size_t)(at - p), n_layers, sh, idx, err, errlen);
    if (rc)
        return rc;
    const char *t = at + 1, *end = p + len;
    const char *q = memchr(t, '?', (size_t)(end - t));
    rc = parse_target(t, (size_t)((q ? q : end) - t), sh, idx, err, errlen);
    if (rc == 0 && q)
        rc = parse_options(q + 1, (size_t)(end - q - 1), sh, idx, err, errlen);
    return rc;
}

/* The spans, in the order given, must tile 0..n_layers-1. */
static int check_cover(const llm_placement *pl, int32_t n_layers, char *err, size_t errlen)
{
    int32_t next = 0;
    for (int i = 0; i < pl->n; i++) {
        const llm_shard_spec *sh = &pl->shard[i];
        if (sh->first > next)
            return bad(err, errlen, -1, "layers %d-%d are not assigned (gap before shard %d)",
                       (int)next, (int)sh->first - 1, i);
        if (sh->first < next)
            return bad(err, errlen, i, "layers %d-%d overlap shard %d (layers %d-%d)",
                       (int)sh->first, (int)sh->last, i - 1, (int)pl->shard[i - 1].first,
                       (int)pl->shard[i - 1].last);
        next = sh->last + 1;
    }
    if (next < n_layers)
        return bad(err, errlen, -1, "layers %d-%d are not assigned (the model has %d layers)",
                   (int)next, (int)n_layers - 1, (int)n_layers);
    return 0;
}

int llm_placement_parse(const char *spec, int32_t n_layers, llm_placement *out,
                        char *err, size_t errlen)
{
    if (!spec || !out || n_layers < 1)
        return bad(err, errlen, -1, "%s", "no placement given");
    memset(out, 0, sizeof *out);
    size_t total = strnlen(spec, SPEC_MAX + 1);
    if (total == 0 || total > SPEC_MAX)
        return bad(err, errlen, -1, "%s", "empty, or longer than 4096 bytes");
    const char *p = spec, *end = spec + total;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        if (out->n == LLM_SPLIT_MAX_SHARDS)
            return bad(err, errlen, -1, "%s", "more than 16 shards");
        if (stop == p)
            return bad(err, errlen, out->n, "%s", "empty shard (stray ',')");
        int rc = parse_shard(p, (size_t)(stop - p), n_layers, &out->shard[out->n], out->n, err,
                             errlen);
        if (rc)
            return rc;
        out->n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    return check_cover(out, n_layers, err, errlen);
}
