/* pmraw.h — the recorder's raw per-process file, shared by the recorder
 * (writer) and `phasemark capture` (reader, which merges the files).
 *
 * One file per process image: DIR/<pid>.<boottime-ns>.pmraw. A process that
 * execs starts a new file under the same pid. Layout, native byte order (the
 * writer and the reader run on the same machine):
 *
 *   file header (pmr_file_hdr, once)
 *   chunk*      (pmr_chunk_hdr, then `bytes` bytes of events of one thread)
 *
 * An event is a pmr_event followed by `len` name bytes padded with zeros to
 * a multiple of 8. Events of one thread appear in the order they happened;
 * chunks of different threads interleave arbitrarily. Timestamps are
 * CLOCK_BOOTTIME nanoseconds. A truncated tail (a crash mid-write) is
 * possible; the reader keeps every whole chunk and reports the rest.
 */
#ifndef PM_RAW_H
#define PM_RAW_H

#include <stdint.h>

#define PMR_FILE_MAGIC "PMRAW01"   /* 8 bytes with the NUL */
#define PMR_CHUNK_MAGIC 0x4b484350u /* "PCHK" little-endian */
#define PMR_NAME_MAX 4095           /* longer names are cut */
#define PMR_CHUNK_MAX (1u << 24)    /* reader's bound on one chunk */

typedef struct pmr_file_hdr {
    char magic[8];
    uint32_t pid;
    uint32_t ppid;
    uint64_t start_ns; /* CLOCK_BOOTTIME when the image started recording */
    char comm[16];     /* process name, NUL-padded */
    uint8_t reserved[24];
} pmr_file_hdr;

typedef struct pmr_chunk_hdr {
    uint32_t magic;
    uint32_t tid;
    uint32_t bytes;
    uint32_t reserved;
    char thread_name[16];
} pmr_chunk_hdr;

enum pmr_type {
    PMR_PUSH = 1,   /* id: correlation id; name follows */
    PMR_POP = 2,    /* id: correlation id of the push it closes, 0 if none */
    PMR_MARK = 3,   /* id: correlation id; name follows */
    PMR_START = 4,  /* id: range id (process-wide); name follows */
    PMR_STOP = 5,   /* id: range id */
    PMR_DOMAIN = 6  /* domain: the id being named; name: the domain name */
};

/* Domains: 0 is ROCTX, 1 is the NVTX default domain, 2.. are NVTX domains
 * created by the process, named by a PMR_DOMAIN event. */
enum { PMR_DOMAIN_ROCTX = 0, PMR_DOMAIN_NVTX = 1, PMR_DOMAIN_FIRST_USER = 2 };

typedef struct pmr_event {
    uint8_t type;
    uint8_t domain;
    uint16_t len;   /* name bytes, without padding */
    uint32_t depth; /* nesting depth before a push, after a pop */
    uint64_t ts;    /* CLOCK_BOOTTIME ns */
    uint64_t id;
} pmr_event;

_Static_assert(sizeof(pmr_file_hdr) == 64, "file header is 64 bytes");
_Static_assert(sizeof(pmr_chunk_hdr) == 32, "chunk header is 32 bytes");
_Static_assert(sizeof(pmr_event) == 24, "event header is 24 bytes");

static inline uint32_t pmr_padded(uint32_t len) { return (len + 7u) & ~7u; }

#endif
