/* internal.h — what the wire's modules share and the outside never sees.
 *
 * Little-endian helpers (the only way bytes are read or written), the
 * decoder's zero-copy receive hooks used by the connection, HMAC-SHA256,
 * and the shared-reference check, which is pure so the fuzzer can drive it.
 */
#ifndef PMW_INTERNAL_H
#define PMW_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "phasemark/wire.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "phasemark wire views bodies in place and needs a little-endian host"
#endif

static inline uint16_t pmw__get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t pmw__get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t pmw__get64(const uint8_t *p)
{
    return (uint64_t)pmw__get32(p) | (uint64_t)pmw__get32(p + 4) << 32;
}

static inline void pmw__put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void pmw__put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void pmw__put64(uint8_t *p, uint64_t v)
{
    pmw__put32(p, (uint32_t)v);
    pmw__put32(p + 4, (uint32_t)(v >> 32));
}

/* Formats one line into buf (vsnprintf; the result is always terminated). */
void pmw__fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Decoder hooks for the connection's receive path: reserve returns writable
 * space at the end of the buffer, sized for the rest of the frame being
 * read (at least 4 KiB), so one recv() can land a large body directly in
 * its final place; commit records how many bytes were written there. */
int pmw__decoder_reserve(pmw_decoder *dec, uint8_t **ptr, size_t *len);
void pmw__decoder_commit(pmw_decoder *dec, size_t n);
/* Bytes still needed to complete the frame being read (0 if unknown). */
size_t pmw__decoder_frame_size(const pmw_decoder *dec);

/* SHA-256 (FIPS 180-4) and HMAC (RFC 2104), one-shot over a list of
 * buffers. */
#define PMW_SHA256_SIZE 32u
void pmw__sha256(const void *const *parts, const size_t *lens, size_t n, uint8_t out[32]);
void pmw__hmac_sha256(const void *key, size_t key_len, const void *const *parts,
                      const size_t *lens, size_t n, uint8_t out[32]);
/* Compares without an early exit, so timing does not reveal where a MAC
 * first differs. Returns 1 when equal. */
int pmw__ct_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* Checks a shared reference against an area of area_size bytes: aligned,
 * in bounds (without overflow), carrying the frame's sequence number, and
 * matching the sequence the writer published for the area (slot_seq).
 * Returns 0 or PMW_E_SHM_REF / PMW_E_SEQUENCE with *diag filled. */
int pmw__ref_check(const pmw_shm_ref *ref, uint64_t area_size, uint64_t frame_seq,
                   uint64_t slot_seq, pmw_kind kind, pmw_diag *diag);

/* Fills a diagnosis. */
void pmw__diag(pmw_diag *d, int code, uint16_t tag, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

const char *pmw__kind_name(unsigned kind);

/* The body of a typed message as up to two pieces (forward: tokens or
 * activations; reply: floats then argmax). Returns the count. */
size_t pmw__body_parts(const pmw_msg *m, const void *parts[3], size_t lens[3]);

/* Appends msg's metadata (and a shared reference when ref is not NULL).
 * PMW_E_META_LIMIT when it does not fit. */
int pmw__meta_encode(const pmw_msg *m, const pmw_shm_ref *ref, pmw_meta *w);

#endif
