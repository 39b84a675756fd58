/* util.c — file reading, strict number parsing and output escaping shared
 * by the subcommands. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phasemark/wire.h"
#include "pmt.h"

void pmt_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int pmt_read_file(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        pmt_errf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        if (cap >= max) {
            pmt_errf(err, errlen, "%s: larger than %zu bytes", path, max);
            free(buf);
            fclose(f);
            return -1;
        }
        size_t ncap = cap * 2 > max ? max : cap * 2;
        char *nb = realloc(buf, ncap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap = ncap;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        pmt_errf(err, errlen, "%s: %s", path, buf ? "read error" : "out of memory");
        free(buf);
        return -1;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int pmt_parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (!len || len > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Integer microseconds and up to three decimals are exact; other forms
 * (more decimals, exponents) go through strtod and round to the ns. */
int pmt_parse_us_to_ns(const char *s, size_t len, int64_t *out)
{
    const char *dot = memchr(s, '.', len);
    size_t ilen = dot ? (size_t)(dot - s) : len;
    size_t flen = dot ? len - ilen - 1 : 0;
    uint64_t ip, fp = 0;
    if (ilen && pmt_parse_u64(s, ilen, &ip) == 0 && ip <= INT64_MAX / 1000 - 1 &&
        flen <= 3 && (!dot || (flen && pmt_parse_u64(dot + 1, flen, &fp) == 0))) {
        for (size_t i = flen; i < 3; i++)
            fp *= 10;
        *out = (int64_t)(ip * 1000 + fp);
        return 0;
    }
    char tmp[64];
    if (!len || len >= sizeof tmp || (dot && (!ilen || !flen)))
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    if (errno || end != tmp + len || !isfinite(v) || v < 0 || v * 1000.0 > 9.0e18)
        return -1;
    *out = (int64_t)llround(v * 1000.0);
    return 0;
}

void pmt_csv_put(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void pmt_json_put(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

void pmt_remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[4096];
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

void pmt_sha256_hex(const void *data, size_t len, char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    uint8_t digest[32];
    pmw_sha256(data, len, digest);
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
}
