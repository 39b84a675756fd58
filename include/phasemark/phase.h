/* phasemark/phase.h — the phase value type.
 *
 * A phase says what the host is doing on behalf of a request: an exact
 * prefill, one autoregressive decode step, the batched verification of a
 * speculative round, or the round itself ("batched", the mode of a
 * pm.spec_decode range). The same value names the mode of a leaf layer range
 * and travels on the shard wire, so it has one fixed encoding and is
 * validated at every boundary.
 *
 * Wire encoding: one byte. 0 is never valid (a zeroed field must not pass
 * for a phase); 1 exact, 2 decode, 3 verify, 4 batched; 5..255 invalid.
 * These numbers are part of the wire format and are never renumbered.
 *
 * Everything here is a static inline function over constant data, so the
 * type is usable with the marker layer compiled out and costs no library
 * symbol. All functions are thread-safe (pure).
 */
#ifndef PHASEMARK_PHASE_H
#define PHASEMARK_PHASE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pm_phase {
    PM_PHASE_NONE = 0,    /* "no phase": invalid on the wire and in ranges */
    PM_PHASE_EXACT = 1,   /* exact prefill of prompt tokens */
    PM_PHASE_DECODE = 2,  /* one autoregressive decode step */
    PM_PHASE_VERIFY = 3,  /* batched verification of k drafted tokens + 1 */
    PM_PHASE_BATCHED = 4  /* a whole speculative round (draft + verify) */
} pm_phase;

enum { PM_PHASE_COUNT = 5 }; /* number of enum values, NONE included */

/* True when v is a defined phase (1..4). Use on any value that came from
 * outside the process (the wire, a file, a command line). */
static inline int pm_phase_is_valid(unsigned v)
{
    return v >= PM_PHASE_EXACT && v <= PM_PHASE_BATCHED;
}

/* True when v is a phase a target shard may be told for a forward call:
 * exact, decode or verify. "batched" names a round, never a shard forward. */
static inline int pm_phase_is_shard_phase(unsigned v)
{
    return v >= PM_PHASE_EXACT && v <= PM_PHASE_VERIFY;
}

/* The text form ("exact", "decode", "verify", "batched"), as used in range
 * names. Returns "none" for PM_PHASE_NONE and "invalid" for anything else;
 * the returned string is static and never NULL. */
static inline const char *pm_phase_name(unsigned v)
{
    static const char *const names[PM_PHASE_COUNT] = {
        "none", "exact", "decode", "verify", "batched"};
    return v < PM_PHASE_COUNT ? names[v] : "invalid";
}

/* Parses the text form (exact match, lower case, len bytes of text; text
 * need not be NUL-terminated). Returns the phase, or PM_PHASE_NONE when the
 * text names no valid phase ("none" itself is not accepted). */
static inline pm_phase pm_phase_parse(const char *text, size_t len)
{
    for (unsigned v = PM_PHASE_EXACT; v <= PM_PHASE_BATCHED; v++) {
        const char *name = pm_phase_name(v);
        if (strlen(name) == len && memcmp(name, text, len) == 0)
            return (pm_phase)v;
    }
    return PM_PHASE_NONE;
}

/* The one-byte wire encoding of a phase (its enum value). */
static inline uint8_t pm_phase_encode(pm_phase phase)
{
    return (uint8_t)phase;
}

/* Decodes a wire byte. Returns 0 and stores the phase when the byte is a
 * valid phase, -1 (and leaves *out alone) otherwise. */
static inline int pm_phase_decode(uint8_t byte, pm_phase *out)
{
    if (!pm_phase_is_valid(byte))
        return -1;
    *out = (pm_phase)byte;
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif /* PHASEMARK_PHASE_H */
