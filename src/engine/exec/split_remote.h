/* split_remote.h — one remote shard: a connection to a shard daemon
 * (pm-shardd) through the shard wire, and for a spawned shard the daemon
 * process itself, which this module starts (fork/exec over a socket pair,
 * the wire handshake being the readiness handshake) and reaps.
 *
 * A remote shard is either connected or dropped. Any failure of a call
 * drops it: the connection is closed and a spawned child is reaped (killed
 * first if it is still running, as after a stall). The next call connects
 * again, or spawns a new daemon, so a restarted daemon is picked up without
 * the session being recreated. A refusal by the daemon (an error reply)
 * keeps the connection, which the wire keeps in sync.
 *
 * Used by split.c only; one thread at a time.
 */
#ifndef LLM_SPLIT_REMOTE_H
#define LLM_SPLIT_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "forward.h"
#include "split.h"

typedef struct llm_remote llm_remote;

/* What a remote shard needs to know about its place in the split. */
typedef struct llm_remote_params {
    int index;              /* shard index (markers, error lines) */
    const char *model_path; /* spawn: the GGUF the daemon opens */
    uint32_t n_ctx;         /* spawn: the daemon's cache positions */
    int32_t n_batch;        /* spawn: the daemon's widest forward */
    int32_t dim, n_vocab;   /* reply widths */
} llm_remote_params;

/* Creates the shard and connects it (or spawns its daemon). The caller owns
 * *out (NULL on failure); LLM_ENOMEM, or LLM_EBACKEND with err naming the
 * shard when it cannot be reached or started. */
int llm_remote_open(const llm_shard_spec *spec, const llm_remote_params *p,
                    llm_remote **out, char *err, size_t errlen);

/* Closes the connection and reaps a spawned daemon. NULL is harmless. */
void llm_remote_close(llm_remote *r);

/* A forward's reply, viewed in the connection's buffers: valid until the
 * next call on this shard. */
typedef struct llm_remote_reply {
    const float *values;  /* activations [n][dim] or logits [rows][n_vocab] */
    const int32_t *ids;   /* argmax ids [rows] */
    const float *feat;    /* features [n_feat][n][dim] of the asked layers */
} llm_remote_reply;

/* One forward: sends in (token ids when the shard starts the model, else
 * act, [n][dim] host floats) with its phase and its output request in->out
 * as the wire's want and rows (the split resolved it: activations before
 * the last shard; logits and/or argmax of in->out.rows rows from the last;
 * features of the shard's own layers from any),
 * and waits for the reply within the shard's deadline. A reply that is not
 * exactly what was asked (rows, width, sections) drops the shard.
 * Reconnects first when the shard was dropped. 0, or a negative LLM_E*
 * status with err naming the shard. */
int llm_remote_forward(llm_remote *r, const llm_forward_in *in, const float *act,
                       llm_remote_reply *rep, char *err, size_t errlen);

/* Truncates the daemon's cache to pos (a dropped shard needs nothing). */
int llm_remote_truncate(llm_remote *r, uint64_t req, uint32_t pos, char *err,
                        size_t errlen);

/* After a tree verify at pos0: moves the daemon's cache rows pos0 +
 * rows[j] to pos0 + j (PMW_MSG_KEEP; count in 1..PMW_TREE_MAX, rows as
 * llm_session_keep_rows takes them). A dropped shard lost the verify's
 * rows: LLM_EBACKEND. 0, or a negative LLM_E* status with err naming the
 * shard (a daemon that predates the message refuses it with its line). */
int llm_remote_keep(llm_remote *r, uint64_t req, uint32_t pos0, const int32_t *rows, int32_t count,
                    char *err, size_t errlen);

/* Empties the daemon's cache; a shard that does not answer is dropped. */
void llm_remote_reset(llm_remote *r, uint64_t req);

/* Protocol tests: sends one frame verbatim (stream framing) on the shard's
 * connection and reads the answer into *code (0 for a reply or ack, the
 * error reply's code otherwise) and text. Reconnects first when dropped. */
int llm_remote_send_raw(llm_remote *r, uint16_t kind, const void *meta, size_t meta_len,
                        const void *body, size_t body_len, int *code, char *text,
                        size_t textlen, char *err, size_t errlen);

/* The spawned daemon's process id, 0 when none runs. */
long llm_remote_pid(const llm_remote *r);

#endif
