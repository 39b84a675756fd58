/* shm.h — the shared transport's memfd region (shm.c has the layout). */
#ifndef PMW_SHM_H
#define PMW_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define PMW_SHM_CONTROL 4096u

typedef struct pmw__shm {
    int fd;             /* owned; -1 when none */
    uint8_t *base;      /* the mapping, len bytes */
    size_t len;
    uint64_t area;      /* bytes per direction */
    uint8_t *out, *in;  /* this side's area, the peer's area */
    uint64_t *out_slot, *in_slot;
} pmw__shm;

/* Rounds a requested area up to whole pages; 0 when it cannot be. */
uint64_t pmw__shm_round(uint64_t size);
/* Client: creates, seals and maps a region with two areas of `area` bytes. */
int pmw__shm_create(pmw__shm *s, uint64_t area, char *err, size_t errlen);
/* Server: checks and maps a received region. On success the region owns fd;
 * on failure the caller still does. */
int pmw__shm_attach(pmw__shm *s, int fd, uint64_t area, char *err, size_t errlen);
void pmw__shm_close(pmw__shm *s);
/* Publishes the sequence number of the payload just written to this side's
 * area, and reads the one the peer published. */
void pmw__shm_publish(pmw__shm *s, uint64_t seq);
uint64_t pmw__shm_peer_seq(const pmw__shm *s);

#endif
