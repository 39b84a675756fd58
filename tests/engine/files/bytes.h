/* bytes.h — a tiny little-endian byte builder for the model-file tests.
 *
 * Tests build GGUF files, llama2.c checkpoints and tokenizer.bin files by
 * hand with it, independently of the writer under test, so a writer bug
 * cannot hide a matching reader bug. Allocation failure aborts the test.
 */
#ifndef PM_TEST_BYTES_H
#define PM_TEST_BYTES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct bb {
    unsigned char *p;
    size_t n, cap;
} bb;

static inline void bb_raw(bb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            fprintf(stderr, "bb: out of memory\n");
            exit(1);
        }
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static inline void bb_le(bb *b, uint64_t v, int n)
{
    unsigned char t[8];
    for (int i = 0; i < n; i++)
        t[i] = (unsigned char)(v >> (8 * i));
    bb_raw(b, t, (size_t)n);
}

static inline void bb_u8(bb *b, uint8_t v) { bb_le(b, v, 1); }
static inline void bb_u32(bb *b, uint32_t v) { bb_le(b, v, 4); }
static inline void bb_u64(bb *b, uint64_t v) { bb_le(b, v, 8); }

static inline void bb_f32(bb *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    bb_u32(b, u);
}

/* A GGUF string: u64 length, bytes. */
static inline void bb_str(bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_raw(b, s, strlen(s));
}

static inline void bb_pad(bb *b, size_t align)
{
    while (b->n % align)
        bb_u8(b, 0);
}

static inline void bb_free(bb *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* A per-process temporary path: $TMPDIR (or /tmp)/pm_files_<tag>_<pid>. */
static inline void tmp_path(char *buf, size_t cap, const char *tag)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, cap, "%s/pm_files_%s_%ld", dir && *dir ? dir : "/tmp", tag, (long)getpid());
}

static inline int bb_save(const bb *b, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = b->n ? fwrite(b->p, 1, b->n, f) : 0;
    return (fclose(f) != 0 || w != b->n) ? -1 : 0;
}

#endif
