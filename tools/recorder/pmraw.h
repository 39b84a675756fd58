/* pmraw.h — the recorder's raw per-process file, shared by the recorder
 * (writer) and `phasemark capture` (reader, which merges the files).
 *
 * One file per process image: DIR/<pid>.<boottime-ns>.pmraw. A process that
 * execs starts a new file under the same pid. Layout:
 *
 *   file header (pmr_file_hdr, once)
 *   chunk*      (pmr_chunk_hdr, then `bytes` bytes of events of one thread)
 *
 * The headers are native-byte-order structs (the writer and the reader run
 * on the same machine); events are a byte stream, defined byte by byte.
 *
 * Streams. The events of one thread form one stream, in the order they
 * happened, cut into chunks at event boundaries; chunks of different
 * threads interleave arbitrarily, and the reader joins a thread's chunks in
 * file order. Two things carry over from one event to the next, across
 * chunks: the timestamp (each event stores the ticks since the previous
 * one) and the name (each name stores only what differs from the thread's
 * previous name). A stream starts with a PMR_CAL event, which sets the
 * timestamp base; the first name of a stream has no previous name. So a
 * push of "pm.decode mode=decode req=3 pos=101" after one of "...pos=100"
 * and its pop take 7 bytes when they follow each other within 127 ticks
 * (as in bench_recorder), 9-11 when microseconds to milliseconds apart;
 * version 02 took 72.
 *
 * Ticks. With clock PMR_CLOCK_BOOTTIME a tick is a CLOCK_BOOTTIME
 * nanosecond. With PMR_CLOCK_TSC it is a count of the x86 time-stamp
 * counter, and the stream carries calibration points, pairs (tsc, ns) of a
 * TSC count and the CLOCK_BOOTTIME reading taken at that instant: in
 * PMR_CAL events (at the start of a stream, and about every PMR_CAL_TICKS
 * while it records) and in every chunk header (taken after the chunk's
 * last event was recorded). The reader maps a tick to nanoseconds on the
 * line through the two calibration points around it (pmr_tick_to_ns), so
 * every converted time agrees with the real clock at both ends of its
 * interval, whatever the TSC's exact rate.
 *
 * An event is
 *
 *   tag      1 byte: type (enum pmr_type) in bits 0-2, domain in bits 3-7;
 *            domain PMR_TAG_DOMAIN_BYTE there means a domain byte follows
 *   domain   1 byte, only when the tag says so
 *   then, by type:
 *   CAL      tsc, ns: 8 bytes each, little-endian (no delta)
 *   others   delta: varint, ticks since the stream's previous event
 *   START    then id: varint (the range id)
 *   STOP     then id: varint
 *   PUSH, MARK, START  then the name: prefix varint (bytes it shares with
 *            the stream's previous PUSH/MARK/START name), suffix length
 *            varint, suffix bytes; prefix + suffix <= PMR_NAME_MAX
 *   DOMAIN   then the name of the domain the tag names: length varint,
 *            bytes (it does not change the previous name)
 *
 * A varint is LEB128: 7 bits per byte, lowest group first, the high bit
 * set on every byte but the last; at most 10 bytes. Correlation ids are
 * assigned when the files are merged. A truncated tail (a crash mid-write)
 * is possible; the reader keeps every whole chunk and reports the rest.
 *
 * Clock records. A chunk header with magic PMR_CLOCK_MAGIC is followed by
 * one pmr_clock_rec (`bytes` is its size) instead of events: the offset
 * from this process's clock to a driver's, measured over the shard wire by
 * the program (pm-shardd) and handed to the recorder through
 * phasemark_recorder_clock_offset. driver ns = our ns + offset_ns, within
 * +- bound_ns, as measured at our time at_ns. The reader moves the
 * process's times onto the driver's clock: with one record by its offset,
 * with several by the offset interpolated between the records around each
 * time (the nearest one's before the first and after the last). A record
 * whose driver_boot is the file's own boot id came from a driver on the
 * same clock and moves nothing: its offset is the measurement's error.
 *
 * Version 04 added the boot id and clock records; version 03 files read as
 * before (boot id unknown).
 */
#ifndef PM_RAW_H
#define PM_RAW_H

#include <stdint.h>

#define PMR_FILE_MAGIC "PMRAW04"   /* 8 bytes with the NUL */
#define PMR_FILE_MAGIC_03 "PMRAW03" /* read too: no boot id, no clock records */
#define PMR_CHUNK_MAGIC 0x4b484350u /* "PCHK" little-endian */
#define PMR_CLOCK_MAGIC 0x4b4c4350u /* "PCLK": a clock record, see below */
#define PMR_NAME_MAX 4095           /* longer names are cut */
#define PMR_CHUNK_MAX (1u << 24)    /* reader's bound on one chunk */
#define PMR_VARINT_MAX 10           /* bytes of the longest varint */
/* The recorder adds a calibration point once a stream's ticks have run
 * this far past the last one: under a millisecond at the 2-4 GHz of
 * current x86 TSCs, so NTP's slewing of CLOCK_BOOTTIME (at most 500 ppm,
 * and it changes slowly) cannot bend the line between two points by more
 * than a few hundred nanoseconds, and in practice by well under one. */
#define PMR_CAL_TICKS (UINT64_C(1) << 21)

enum pmr_clock {
    PMR_CLOCK_BOOTTIME = 0, /* ticks are CLOCK_BOOTTIME ns */
    PMR_CLOCK_TSC = 1       /* ticks are TSC counts; see "Ticks" above */
};

typedef struct pmr_file_hdr {
    char magic[8];
    uint32_t pid;
    uint32_t ppid;
    uint64_t start_ns; /* CLOCK_BOOTTIME when the image started recording */
    char comm[16];     /* process name, NUL-padded */
    uint32_t clock;    /* enum pmr_clock */
    uint8_t boot_id[16]; /* /proc/sys/kernel/random/boot_id (the time
                            namespace's inode XORed into bytes 8-15 when it
                            is not the initial one); zero: unknown. Times of
                            one id share one CLOCK_BOOTTIME. */
    uint8_t reserved[4];
} pmr_file_hdr;

typedef struct pmr_clock_rec {
    int64_t offset_ns;  /* driver minus this process's clock */
    uint64_t bound_ns;  /* the offset is within +- this */
    uint64_t at_ns;     /* this process's clock when it was recorded */
    uint32_t rounds;    /* probe rounds it came from */
    uint32_t reserved;
    uint8_t driver_boot[16]; /* the driver's boot id; zero: unknown */
} pmr_clock_rec;

typedef struct pmr_chunk_hdr {
    uint32_t magic;
    uint32_t tid;
    uint32_t bytes;
    uint32_t reserved;
    char thread_name[16];
    uint64_t cal_tsc; /* a calibration point taken after the chunk's */
    uint64_t cal_ns;  /* events were recorded (PMR_CLOCK_TSC only) */
} pmr_chunk_hdr;

enum pmr_type {
    PMR_PUSH = 1,   /* push */
    PMR_POP = 2,    /* pop of the thread's innermost range */
    PMR_MARK = 3,   /* instant */
    PMR_START = 4,  /* start of a start/stop range */
    PMR_STOP = 5,   /* its stop, possibly on another thread */
    PMR_DOMAIN = 6, /* the name of the domain in the tag */
    PMR_CAL = 7     /* calibration point; resets the timestamp base */
};

#define PMR_TAG_TYPE_MASK 7u
#define PMR_TAG_DOMAIN_SHIFT 3
#define PMR_TAG_DOMAIN_BYTE 31u /* domains 31..255 take a second byte */

/* Domains: 0 is ROCTX, 1 is the NVTX default domain, 2.. are NVTX domains
 * created by the process, named by a PMR_DOMAIN event. */
enum { PMR_DOMAIN_ROCTX = 0, PMR_DOMAIN_NVTX = 1, PMR_DOMAIN_FIRST_USER = 2 };

_Static_assert(sizeof(pmr_file_hdr) == 64, "file header is 64 bytes");
_Static_assert(sizeof(pmr_chunk_hdr) == 48, "chunk header is 48 bytes");
_Static_assert(sizeof(pmr_clock_rec) == 48, "clock record is 48 bytes");

/* A calibration point: TSC count and CLOCK_BOOTTIME ns of one instant. */
typedef struct pmr_cal {
    uint64_t tsc;
    uint64_t ns;
} pmr_cal;

/* The CLOCK_BOOTTIME ns of `tick` on the line through a and b:
 * a.ns + floor((tick - a.tsc) * (b.ns - a.ns) / (b.tsc - a.tsc)), exact
 * for every 64-bit input (the product needs up to 128 bits); ticks outside
 * [a.tsc, b.tsc] extrapolate, and results saturate at 0 and UINT64_MAX.
 * Requires a.tsc < b.tsc and a.ns <= b.ns (the reader drops calibration
 * points that break this). Non-decreasing in tick. */
static inline uint64_t pmr_tick_to_ns(uint64_t tick, pmr_cal a, pmr_cal b)
{
    __extension__ typedef unsigned __int128 u128;
    u128 num = b.ns - a.ns, den = b.tsc - a.tsc;
    if (tick >= a.tsc) {
        u128 q = (u128)(tick - a.tsc) * num / den;
        return q > UINT64_MAX - a.ns ? UINT64_MAX : a.ns + (uint64_t)q;
    }
    /* floor of a negative quotient: round the magnitude up. The sum stays
     * below 2^128: (2^64-1)^2 + 2^64 - 2 < 2^128. */
    u128 q = ((u128)(a.tsc - tick) * num + den - 1) / den;
    return q > a.ns ? 0 : a.ns - (uint64_t)q;
}

#endif
