/* csv.c — an RFC 4180 reader for trace CSVs.
 *
 * The file is read whole and unquoted in place, so fields point into one
 * buffer. Fields may be quoted ("" is a quote inside); a quote inside an
 * unquoted field or text after a closing quote is malformed, as is an
 * unterminated quote. Records end at LF or CRLF. Columns are found by
 * header name: rocprofv3's column sets differ between versions.
 */
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define PMT_CSV_FILE_MAX ((size_t)1 << 31)

/* Parses one field starting at c->pos; returns its start (NUL-terminated
 * in place) and sets *last when the record ended. NULL when malformed. */
static char *field(pmt_csv *c, size_t rec_line, int *last, char *err, size_t errlen)
{
    char *b = c->buf, *start = b + c->pos, *w = start;
    size_t i = c->pos;
    if (i < c->len && b[i] == '"') {
        for (i++;; i++) {
            if (i >= c->len) {
                pmt_errf(err, errlen, "%s:%zu: unterminated quoted field", c->path, rec_line);
                return NULL;
            }
            if (b[i] == '"') {
                if (i + 1 < c->len && b[i + 1] == '"') {
                    *w++ = '"';
                    i++;
                    continue;
                }
                i++;
                break;
            }
            if (b[i] == '\n')
                c->line++;
            *w++ = b[i];
        }
        if (i < c->len && b[i] != ',' && b[i] != '\n' && b[i] != '\r') {
            pmt_errf(err, errlen, "%s:%zu: text after a closing quote", c->path, c->line);
            return NULL;
        }
    } else {
        for (; i < c->len && b[i] != ',' && b[i] != '\n' && b[i] != '\r'; i++) {
            if (b[i] == '"') {
                pmt_errf(err, errlen, "%s:%zu: quote inside an unquoted field", c->path, c->line);
                return NULL;
            }
            *w++ = b[i];
        }
    }
    if (i < c->len && b[i] == '\r' && i + 1 < c->len && b[i + 1] == '\n')
        i++;
    else if (i < c->len && b[i] == '\r') {
        pmt_errf(err, errlen, "%s:%zu: stray carriage return", c->path, c->line);
        return NULL;
    }
    *last = i >= c->len || b[i] == '\n';
    c->pos = i < c->len ? i + 1 : i;
    *w = 0;
    return start;
}

int pmt_csv_next(pmt_csv *c, char **fields, size_t *nfields, char *err, size_t errlen)
{
    *nfields = 0;
    while (c->pos < c->len && (c->buf[c->pos] == '\n' || c->buf[c->pos] == '\r')) {
        if (c->buf[c->pos] == '\n')
            c->line++;
        c->pos++;
    }
    if (c->pos >= c->len)
        return 0;
    c->line++;
    size_t first_line = c->line;
    int last = 0;
    while (!last) {
        if (*nfields == PMT_CSV_MAX_FIELDS) {
            pmt_errf(err, errlen, "%s:%zu: more than %d fields", c->path, first_line,
                     PMT_CSV_MAX_FIELDS);
            return -1;
        }
        char *f = field(c, first_line, &last, err, errlen);
        if (!f)
            return -1;
        fields[(*nfields)++] = f;
    }
    return 1;
}

static int read_header(pmt_csv *c, char *err, size_t errlen)
{
    int rc = pmt_csv_next(c, c->header, &c->nheader, err, errlen);
    if (rc == 0) {
        pmt_errf(err, errlen, "%s: empty file (no header)", c->path);
        return -1;
    }
    return rc < 0 ? -1 : 0;
}

int pmt_csv_open_text(pmt_csv *c, const char *name, const char *text, size_t len,
                      char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->path = name;
    c->buf = malloc(len + 1);
    if (!c->buf) {
        pmt_errf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    memcpy(c->buf, text, len);
    c->buf[len] = 0;
    c->len = len;
    if (read_header(c, err, errlen) < 0) {
        pmt_csv_close(c);
        return -1;
    }
    return 0;
}

int pmt_csv_open(pmt_csv *c, const char *path, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->path = path;
    if (pmt_read_file(path, PMT_CSV_FILE_MAX, &c->buf, &c->len, err, errlen) < 0)
        return -1;
    /* A UTF-8 byte order mark before the header is not part of a name. */
    if (c->len >= 3 && memcmp(c->buf, "\xEF\xBB\xBF", 3) == 0)
        c->pos = 3;
    if (read_header(c, err, errlen) < 0) {
        pmt_csv_close(c);
        return -1;
    }
    return 0;
}

int pmt_csv_col(const pmt_csv *c, const char *name)
{
    for (size_t i = 0; i < c->nheader; i++)
        if (strcmp(c->header[i], name) == 0)
            return (int)i;
    return -1;
}

void pmt_csv_close(pmt_csv *c)
{
    free(c->buf);
    memset(c, 0, sizeof *c);
}
