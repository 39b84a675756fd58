/* shm.c — the shared transport's memory region.
 *
 * The client creates a memfd, sizes it, seals it against shrinking and
 * growing (so the server can never be handed a mapping that later faults
 * with SIGBUS), maps it and passes the descriptor once, at handshake. The
 * server checks size and seals before mapping it.
 *
 * Layout: a 4 KiB control page, then the client->server area, then the
 * server->client area, each `area` bytes (a multiple of 4 KiB). Control
 * page: bytes 0..7 magic "PMWSHM1\0", 8..15 area size (u64 LE), 64..71 the
 * sequence number of the payload now in the client->server area, 128..135
 * the same for the server->client area. A writer copies its payload, then
 * publishes its frame's sequence number with a release store; the reader
 * loads it with acquire and requires it to match the reference, which
 * catches stale references to an earlier payload. Slots sit in separate
 * cache lines because each is written by one side only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm.h"

static const uint8_t shm_magic[8] = {'P', 'M', 'W', 'S', 'H', 'M', '1', 0};

uint64_t pmw__shm_round(uint64_t size)
{
    if (size > UINT64_MAX - PMW_SHM_CONTROL)
        return 0;
    return (size + PMW_SHM_CONTROL - 1) / PMW_SHM_CONTROL * PMW_SHM_CONTROL;
}

static void set_views(pmw__shm *s, int is_client)
{
    uint8_t *c2s = s->base + PMW_SHM_CONTROL, *s2c = c2s + s->area;
    uint64_t *c2s_slot = (uint64_t *)(s->base + 64), *s2c_slot = (uint64_t *)(s->base + 128);
    s->out = is_client ? c2s : s2c;
    s->in = is_client ? s2c : c2s;
    s->out_slot = is_client ? c2s_slot : s2c_slot;
    s->in_slot = is_client ? s2c_slot : c2s_slot;
}

int pmw__shm_create(pmw__shm *s, uint64_t area, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    uint64_t total = PMW_SHM_CONTROL + 2 * area;
    if (area == 0 || area > (UINT64_MAX - PMW_SHM_CONTROL) / 2 || total > (uint64_t)SIZE_MAX / 2) {
        pmw__fmt(err, errlen, "shared area of %llu bytes is not possible", (unsigned long long)area);
        return PMW_E_ARG;
    }
    int fd = memfd_create("phasemark-wire", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        pmw__fmt(err, errlen, "memfd_create: %s", strerror(errno));
        return PMW_E_IO;
    }
    if (ftruncate(fd, (off_t)total) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        pmw__fmt(err, errlen, "memfd size/seal: %s", strerror(errno));
        close(fd);
        return PMW_E_IO;
    }
    void *p = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        pmw__fmt(err, errlen, "mmap shared region: %s", strerror(errno));
        close(fd);
        return PMW_E_IO;
    }
    s->fd = fd;
    s->base = p;
    s->len = (size_t)total;
    s->area = area;
    memcpy(s->base, shm_magic, sizeof shm_magic);
    pmw__put64(s->base + 8, area);
    set_views(s, 1);
    return 0;
}

int pmw__shm_attach(pmw__shm *s, int fd, uint64_t area, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    struct stat st;
    uint64_t total = PMW_SHM_CONTROL + 2 * area;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != total) {
        pmw__fmt(err, errlen, "shared region: descriptor is not a %llu-byte file",
                 (unsigned long long)total);
        return PMW_E_TRANSPORT;
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        pmw__fmt(err, errlen, "shared region: memfd is not sealed against shrinking");
        return PMW_E_TRANSPORT;
    }
    void *p = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        pmw__fmt(err, errlen, "mmap shared region: %s", strerror(errno));
        return PMW_E_IO;
    }
    s->base = p;
    s->len = (size_t)total;
    s->area = area;
    if (memcmp(s->base, shm_magic, sizeof shm_magic) != 0 || pmw__get64(s->base + 8) != area) {
        pmw__fmt(err, errlen, "shared region: control page does not match the handshake");
        pmw__shm_close(s);
        return PMW_E_TRANSPORT;
    }
    s->fd = fd;
    set_views(s, 0);
    return 0;
}

void pmw__shm_close(pmw__shm *s)
{
    if (s->base)
        munmap(s->base, s->len);
    if (s->fd >= 0)
        close(s->fd);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

void pmw__shm_publish(pmw__shm *s, uint64_t seq)
{
    __atomic_store_n(s->out_slot, seq, __ATOMIC_RELEASE);
}

uint64_t pmw__shm_peer_seq(const pmw__shm *s)
{
    return __atomic_load_n(s->in_slot, __ATOMIC_ACQUIRE);
}
