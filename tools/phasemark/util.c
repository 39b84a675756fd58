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

#include <nettle/sha2.h>

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

size_t pmt_utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n <= 1)
        return n;
    uint32_t cp = c & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) /* also stops at the NUL */
            return 0;
        cp = cp << 6 | (p[i] & 0x3Fu);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0; /* overlong, past Unicode, or a surrogate */
    return n;
}

void pmt_json_put(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        size_t n = pmt_utf8_len(p);
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else if (n)
            fwrite(p, 1, n, f);
        else
            fputs("\\ufffd", f); /* invalid UTF-8: U+FFFD, visibly */
        p += n ? n : 1;
    }
    fputc('"', f);
}

void pmt_xml_put(FILE *f, const char *s)
{
    static const char repl[] = "\xEF\xBF\xBD"; /* U+FFFD */
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        size_t n = pmt_utf8_len(p);
        switch (*p) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            /* XML 1.0 allows no control character but tab, LF and CR, not
             * even as a reference; those and invalid UTF-8 become U+FFFD. */
            if (n == 1 && *p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
                fputs(repl, f);
            else if (n)
                fwrite(p, 1, n, f);
            else
                fputs(repl, f);
        }
        p += n ? n : 1;
    }
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
    /* libnettle (already loaded by libmicrohttpd): a well-kept SHA-256
     * rather than our own; the wire keeps its HMAC in src/wire. */
    uint8_t digest[SHA256_DIGEST_SIZE];
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, data);
    sha256_digest(&ctx, sizeof digest, digest);
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
}
