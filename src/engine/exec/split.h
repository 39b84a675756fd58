/* split.h — layer-split execution below the session API.
 *
 * A placement (docs/split.md has the grammar) assigns contiguous layer
 * spans to shards, in order, covering every layer exactly once. A shard is
 *
 *  - local: the span runs in this process, through the same span forward a
 *    monolithic session uses, on the session's model (its backend) or, for
 *    a different backend ("cuda:N" next to a CPU model), on a model of its
 *    own that holds only the span;
 *  - remote: a shard daemon (pm-shardd) reached through the shard wire over
 *    a Unix socket (stream or shared transport) or TCP, either started by
 *    someone else (unix:, tcp:) or spawned by the split itself (spawn:),
 *    which then owns and reaps the child.
 *
 * A monolithic session is a split too: one local shard over every layer
 * (llm_split_open_monolithic), run through the same code.
 *
 * Every shard keeps the KV cache of its own layers. A forward runs the
 * shards in order: the first gets the token ids, each later one the
 * boundary activations [n][dim] of the one before, and the last hands back
 * what the forward's output request asks for (llm_output: rows of logits,
 * their argmax ids, or nothing), which travels to a remote last shard on
 * the wire, never inferred from the phase. Local shards run through the
 * span runner (runner.h), a remote one through its daemon, which runs the
 * same runner. Each shard is told the phase of the forward and marks its
 * own leaf pm.layer_range with it: local shards here, remote shards in
 * their daemon (where=remote).
 *
 * Failure. A remote shard that fails during a call (the daemon died,
 * stalled past its deadline, or refused the request) makes the call fail
 * with a line naming the shard; its connection is dropped (a spawned child
 * is reaped, killed first when it stalled) and the next call connects
 * again, or spawns a new daemon. A reconnected daemon holds no positions,
 * so a session that was mid-request must be reset (the daemon says so).
 *
 * Ownership and threads: an llm_split belongs to one session and is used
 * by one thread at a time. Nothing on the forward path allocates: every
 * buffer is sized for n_batch tokens when the split is opened.
 */
#ifndef LLM_SPLIT_H
#define LLM_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "forward.h"
#include "model.h"
#include "runner.h"

/* Limits of the placement grammar. */
#define LLM_SPLIT_MAX_SHARDS 16
#define LLM_SPLIT_MAX_ADDR 200    /* bytes of an address */
#define LLM_SPLIT_MAX_TOKEN 128   /* bytes of an authentication token */
#define LLM_SPLIT_MAX_NAME 32     /* bytes of a backend name */
#define LLM_SPLIT_MAX_PATH 256    /* bytes of the daemon program's path */

/* Defaults of the per-shard options (LLM_SPLIT_TIMEOUT_MS, the deadline of
 * one remote call, is in runner.h, which the daemon shares). */
#define LLM_SPLIT_START_MS 30000   /* a spawned daemon's start, model load included */

typedef enum llm_shard_kind {
    LLM_SHARD_LOCAL = 0, /* in-process */
    LLM_SHARD_UNIX = 1,  /* a daemon on a Unix socket */
    LLM_SHARD_TCP = 2,   /* a daemon on TCP */
    LLM_SHARD_SPAWN = 3  /* a daemon this split starts over a socket pair */
} llm_shard_kind;

/* One shard of a parsed placement. Strings are NUL-terminated copies. */
typedef struct llm_shard_spec {
    int32_t first, last;                /* layers, inclusive */
    llm_shard_kind kind;
    char backend[LLM_SPLIT_MAX_NAME];   /* local, spawn: "cpu", "cuda:N" */
    char address[LLM_SPLIT_MAX_ADDR];   /* unix, tcp: as pmw_connect takes it */
    int transport;                      /* PMW_TRANSPORT_* (remote) */
    char token[LLM_SPLIT_MAX_TOKEN];    /* "" when none */
    int timeout_ms;                     /* remote: deadline of one call */
    int32_t threads;                    /* local with its own model, spawn:
                                           worker threads; 0: the model's */
    char exe[LLM_SPLIT_MAX_PATH];       /* spawn: the daemon; "": search */
} llm_shard_spec;

typedef struct llm_placement {
    int n;                                     /* shards, >= 1 */
    llm_shard_spec shard[LLM_SPLIT_MAX_SHARDS];
} llm_placement;

/* Parses a placement for a model of n_layers layers. Checks the grammar,
 * each target (backend names, addresses, options), and that the spans
 * cover 0..n_layers-1 in order without gap or overlap. 0, or LLM_EINVAL
 * with one line in err naming the shard and the problem. Pure; thread-safe. */
int llm_placement_parse(const char *spec, int32_t n_layers, llm_placement *out,
                        char *err, size_t errlen);

/* The target of a shard as text ("local:cpu", "unix:/run/s.sock",
 * "spawn:cpu"), for error lines. */
const char *llm_shard_kind_name(llm_shard_kind kind);

typedef struct llm_split llm_split;

/* Parses spec and opens every shard for a session of n_ctx positions and
 * n_batch tokens per forward: local KV caches and buffers, connections to
 * running daemons, spawned daemons (after their handshake). The caller
 * owns *out (NULL on failure). LLM_EINVAL for a bad placement, LLM_ENOMEM,
 * or LLM_EBACKEND when a shard cannot be opened; err names the shard. */
int llm_split_open(llm_model *m, const char *spec, uint32_t n_ctx, int32_t n_batch,
                   llm_split **out, char *err, size_t errlen);

/* The monolithic placement: one local shard over all of m's layers on m's
 * backend (m must hold them all). Errors as llm_split_open, without a
 * shard's name in the line. */
int llm_split_open_monolithic(llm_model *m, uint32_t n_ctx, int32_t n_batch,
                              llm_split **out, char *err, size_t errlen);

/* Closes every connection and reaps every spawned daemon (a daemon that
 * does not exit within a second of its connection closing is killed).
 * NULL is harmless. */
void llm_split_free(llm_split *sp);

/* What one forward handed back. */
typedef struct llm_split_result {
    int32_t *ids;         /* in: ARGMAX: the caller's room for in->out.rows */
    const float *logits;  /* LOGITS: host [rows][n_vocab], owned by the split
                             and valid until its next call; else NULL */
    float *feat;          /* in: FEATURES: the caller's host buffer; layer j
                             of in->out.feat goes to feat + j*feat_ld*dim,
                             its n rows of dim floats each */
    size_t feat_ld;       /* in: rows between two layers' planes (>= n) */
} llm_split_result;

/* Runs one forward through the shards: in->tokens (in->act must be NULL),
 * the phase checked here; the caller validated tokens and positions.
 * in->out asks the last shard for LLM_OUT_LOGITS and/or LLM_OUT_ARGMAX of
 * in->out.rows rows, or nothing (want 0), and LLM_OUT_FEATURES of any
 * layers: each shard captures those of its own span and the split writes
 * them into res->feat in layer order (a remote shard's come back in its
 * reply, checked to be exactly the layers x n x dim asked). 0, LLM_EINVAL
 * for a phase that
 * is not a shard phase or a malformed output request (nothing runs), or
 * the failed shard's status with one line in err naming it. */
int llm_split_forward(llm_split *sp, const llm_forward_in *in, llm_split_result *res,
                      char *err, size_t errlen);

/* Where argmax ids are taken (the session's switch, runner.h): on (the
 * default, unless PHASEMARK_DEVICE_ARGMAX=0 when the split was opened),
 * local shards use their backend's argmax op and a remote last shard is
 * asked for ids; off, logits cross to this process and the ids are taken
 * on the host. */
void llm_split_set_argmax_op(llm_split *sp, int on);

/* 1 when argmax ids are taken where the logits are made: the last shard is
 * local with the op switched on and present, or remote with the switch on
 * (its daemon answers with ids). */
int llm_split_argmax_on_device(const llm_split *sp);

/* What shard i has been asked for since the split opened: forwards, and
 * among them those asking for activations, logits and argmax ids, and the
 * rows asked for in all (activations count every token). For protocol
 * tests and benchmarks. LLM_EINVAL for a bad index. */
typedef struct llm_shard_counts {
    uint64_t forwards;
    uint64_t activations;
    uint64_t logits;
    uint64_t argmax;
    uint64_t rows;
} llm_shard_counts;

int llm_split_shard_counts(const llm_split *sp, int i, llm_shard_counts *out);

/* Tells every shard that only pos positions remain. A remote shard that
 * cannot be told is dropped (it is reconnected, empty, on the next call);
 * the return is then LLM_EBACKEND with err naming it, else 0. */
int llm_split_truncate(llm_split *sp, uint32_t pos, char *err, size_t errlen);

/* Empties every shard. A remote shard that does not answer is dropped: a
 * new connection starts empty anyway. */
void llm_split_reset(llm_split *sp);

/* quiet != 0: local shards emit no layer ranges (a remote daemon always
 * marks its own leaves, in its own process). */
void llm_split_set_quiet(llm_split *sp, int quiet);

/* A monolithic split's one shard (llm_split_open_monolithic, or a
 * placement of one local shard on the session model's backend over every
 * layer): its KV cache and its runner's workspace, which a device loop
 * (cuda_loop.h) records forwards over. Borrowed: they live as long as the
 * split. LLM_EINVAL for any other placement. */
int llm_split_local_parts(llm_split *sp, llm_span **span, llm_workspace **ws);

/* Tree verify (tree.h) runs where every local shard is on the CPU
 * backend: each span reads the forward's tree, so the boundary
 * activations between shards are the tree's rows like any others. A
 * remote shard gets the tree on the wire (docs/wire.md, tag 31) and its
 * daemon refuses a tree it cannot run (not on the CPU, or a daemon that
 * predates the tag) with its line when the forward comes. 0, or
 * LLM_EUNSUP with one line in err naming the first local shard that
 * cannot (err may be NULL). Thread-safe for a split nobody is changing. */
int llm_split_tree_support(const llm_split *sp, char *err, size_t errlen);

/* After a tree verify at pos0, moves cache rows pos0 + rows[j] to pos0 + j
 * for j in 0..count-1 (1..LLM_TREE_MAX) in every shard (rows ascending,
 * rows[j] >= j, checked by the caller): local spans under their model's
 * lock, remote ones by a keep message (tagged with the last forward's
 * request). 0, LLM_EINVAL for bad arguments, or a remote shard's status
 * with err naming it. */
int llm_split_keep_rows(llm_split *sp, uint32_t pos0, const int32_t *rows, int32_t count, char *err,
                        size_t errlen);

/* The number of shards, and the process id of shard i's spawned daemon
 * (0 when it is not a spawned shard or none runs now). */
int llm_split_n_shards(const llm_split *sp);
long llm_split_shard_pid(const llm_split *sp, int i);

/* Protocol tests: sends one frame verbatim on remote shard i's connection
 * (the session's own) and reports the daemon's answer: *code 0 for a reply
 * or ack, else the error reply's code, with its text. LLM_EINVAL when shard
 * i is not remote; LLM_EBACKEND when the connection failed. */
int llm_split_send_raw(llm_split *sp, int i, uint16_t kind, const void *meta,
                       size_t meta_len, const void *body, size_t body_len, int *code,
                       char *text, size_t textlen, char *err, size_t errlen);


#endif
