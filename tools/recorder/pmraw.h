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
 * An event is a 16-byte pmr_event, then a payload that depends on its type
 * (below), padded with zeros to a multiple of 8: a push of a 35-byte name
 * and its pop take 72 bytes. Correlation ids are assigned when the files
 * are merged. (Names are not interned: phasemark names carry the position
 * and differ from one decode step to the next.) Events of one thread appear in
 * the order they happened;
 * chunks of different threads interleave arbitrarily. Timestamps are
 * CLOCK_BOOTTIME nanoseconds. A truncated tail (a crash mid-write) is
 * possible; the reader keeps every whole chunk and reports the rest.
 */
#ifndef PM_RAW_H
#define PM_RAW_H

#include <stdint.h>

#define PMR_FILE_MAGIC "PMRAW02"   /* 8 bytes with the NUL */
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

/* Payloads: "name" is `len` bytes; "id" is a uint64_t range id. */
enum pmr_type {
    PMR_PUSH = 1,     /* push; payload: name */
    PMR_POP = 2,      /* pop of the thread's innermost range; no payload */
    PMR_MARK = 3,     /* instant; payload: name */
    PMR_START = 4,    /* start/stop range; payload: id, then name */
    PMR_STOP = 5,     /* payload: id */
    PMR_DOMAIN = 6    /* aux: the domain id being named; payload: name */
};

/* Domains: 0 is ROCTX, 1 is the NVTX default domain, 2.. are NVTX domains
 * created by the process, named by a PMR_DOMAIN event. */
enum { PMR_DOMAIN_ROCTX = 0, PMR_DOMAIN_NVTX = 1, PMR_DOMAIN_FIRST_USER = 2 };

typedef struct pmr_event {
    uint8_t type;
    uint8_t domain;
    uint16_t len; /* name bytes in the payload, without padding */
    uint32_t aux; /* the domain id of PMR_DOMAIN; else 0 */
    uint64_t ts;  /* CLOCK_BOOTTIME ns */
} pmr_event;

_Static_assert(sizeof(pmr_file_hdr) == 64, "file header is 64 bytes");
_Static_assert(sizeof(pmr_chunk_hdr) == 32, "chunk header is 32 bytes");
_Static_assert(sizeof(pmr_event) == 16, "event header is 16 bytes");

static inline uint32_t pmr_padded(uint32_t len) { return (len + 7u) & ~7u; }

#endif
