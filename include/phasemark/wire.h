/* phasemark/wire.h — the shard wire: framed, phase-carrying messages between
 * the engine and target-shard daemons (docs/wire.md: frame layout,
 * validation order, transports, handshake).
 *
 * This header is the whole contract of libphasemark_wire. It has three
 * layers, each usable on its own:
 *
 *  1. Codec. pmw_decoder turns bytes into frames incrementally ("incomplete"
 *     is a normal answer; errors are sticky). pmw_msg_parse turns a frame
 *     into a typed, validated message; pmw_msg_encode does the reverse.
 *     Everything is explicit little-endian; every length has a limit the
 *     receiver sets, checked without overflow.
 *  2. Connection. pmw_conn carries typed messages over a Unix socket
 *     (transport "stream" or "shared") or TCP ("stream"), with a handshake
 *     (version, transport, limits, optional HMAC-SHA256 challenge-response)
 *     and a deadline on every blocking read and write.
 *  3. Listener. pmw_listen / pmw_accept for daemons.
 *
 * Status codes: 0 is success, failures are negative pmw_status values that
 * are part of the wire format (an error reply carries one) and are never
 * renumbered. pmw_strerror names them. Detail text lives in the object
 * (pmw_decoder_error, pmw_conn_error) or in a caller's err/errlen buffer;
 * the library never prints and never exits.
 *
 * Threading: an object (decoder, connection, listener) is used by one thread
 * at a time; distinct objects are independent. Nothing here has global
 * mutable state.
 *
 * Byte order: the wire is little-endian and message bodies are viewed in
 * place as float/int32 arrays, so the library builds only on little-endian
 * hosts (checked at compile time).
 */
#ifndef PHASEMARK_WIRE_H
#define PHASEMARK_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "phasemark/phase.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define PMW_API
#else
#define PMW_API __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------
 * Constants of the format (docs/wire.md has the byte tables).
 */
#define PMW_MAGIC 0x46574D50u       /* bytes "PMWF" on the wire */
#define PMW_VERSION 1u              /* the only protocol version so far */
#define PMW_HEADER_SIZE 32u         /* fixed frame header */
#define PMW_NONCE_SIZE 32u          /* handshake challenge bytes */
#define PMW_MAC_SIZE 32u            /* HMAC-SHA256 output */
#define PMW_TEXT_MAX 255u           /* longest error text, bytes */
#define PMW_SHM_REF_SIZE 24u        /* offset u64, length u64, sequence u64 */

/* Status codes. Never renumbered; an error reply carries one on the wire.
 * Codes <= PMW_E_APP_BASE are free for applications (the engine's own
 * errors in an error reply). */
typedef enum pmw_status {
    PMW_OK = 0,
    PMW_E_ARG = -1,          /* invalid argument from the local caller */
    PMW_E_NOMEM = -2,        /* allocation failed */
    PMW_E_IO = -3,           /* socket or system call failed */
    PMW_E_TIMEOUT = -4,      /* a deadline passed */
    PMW_E_CLOSED = -5,       /* the peer closed between frames */
    PMW_E_TRUNCATED = -6,    /* the peer closed in the middle of a frame */
    PMW_E_BROKEN = -7,       /* the connection already failed (sticky) */
    PMW_E_MAGIC = -10,       /* header: bad magic (fatal) */
    PMW_E_VERSION = -11,     /* header: unknown version (fatal) */
    PMW_E_META_LIMIT = -12,  /* header: metadata length over its bound (fatal) */
    PMW_E_BODY_LIMIT = -13,  /* header: body length over its bound (fatal) */
    PMW_E_HEADER = -14,      /* header: reserved field not zero (fatal) */
    PMW_E_KIND = -20,        /* unknown message kind, or not allowed here */
    PMW_E_MISSING = -21,     /* a required tag is missing */
    PMW_E_REPEATED = -22,    /* a tag appears twice */
    PMW_E_UNKNOWN_TAG = -23, /* a tag this message kind does not define */
    PMW_E_PHASE = -24,       /* phase value invalid or not a shard phase */
    PMW_E_VALUE = -25,       /* another value out of range */
    PMW_E_LENGTH = -26,      /* a tag or body length is inconsistent */
    PMW_E_ENTRIES = -27,     /* more metadata entries than the limit */
    PMW_E_SHM_REF = -28,     /* a shared-memory reference out of bounds */
    PMW_E_SEQUENCE = -29,    /* stale, duplicated or skipped sequence number */
    PMW_E_AUTH = -30,        /* authentication failed or was required */
    PMW_E_TRANSPORT = -31,   /* transport not possible or not agreed */
    PMW_E_APP_BASE = -100    /* application codes are <= this value */
} pmw_status;

/* The name of a status code ("PMW_E_PHASE: invalid phase"); static, never
 * NULL. Unknown codes give a generic string. Thread-safe. */
PMW_API const char *pmw_strerror(int code);

/* True for the codes a receiver answers with an error reply and then keeps
 * the connection: the frame was read whole and the stream is in sync. */
PMW_API int pmw_status_is_drainable(int code);

/* Message kinds (header field). */
typedef enum pmw_kind {
    PMW_MSG_HELLO = 1,     /* handshake, both directions */
    PMW_MSG_AUTH = 2,      /* challenge response, both directions */
    PMW_MSG_FORWARD = 3,   /* forward request, client -> server */
    PMW_MSG_REPLY = 4,     /* forward reply, server -> client */
    PMW_MSG_RESET = 5,     /* drop a request's state, client -> server */
    PMW_MSG_TRUNCATE = 6,  /* truncate a request's KV to a position */
    PMW_MSG_ACK = 7,       /* success reply to reset/truncate/shutdown */
    PMW_MSG_ERROR = 8,     /* error reply, server -> client */
    PMW_MSG_SHUTDOWN = 9,  /* ask the daemon to exit, client -> server */
    PMW_MSG_CLOCK = 10,    /* clock probe, client -> server */
    PMW_MSG_CLOCK_REPLY = 11, /* the server's receive and send times */
    PMW_MSG_CLOCK_SET = 12, /* the offset the probes gave, client -> server */
    PMW_MSG_KEEP = 13      /* after a tree verify: move the kept path's cache
                              rows into place, client -> server */
} pmw_kind;

/* Metadata tags (tag-length-value entries). Which kind allows which tag,
 * and the value widths, are in docs/wire.md. */
typedef enum pmw_tag {
    PMW_TAG_PHASE = 1,       /* u8, pm_phase wire byte */
    PMW_TAG_REQ_ID = 2,      /* u64 */
    PMW_TAG_BASE_POS = 3,    /* u32 */
    PMW_TAG_N_TOKENS = 4,    /* u32 */
    PMW_TAG_DIM = 5,         /* u32: input is activations of this width */
    PMW_TAG_WANT = 6,        /* u8, PMW_OUT_* bits */
    PMW_TAG_OUTPUTS = 7,     /* u8, PMW_OUT_* bits present in a reply */
    PMW_TAG_WIDTH = 8,       /* u32: floats per token in a reply */
    PMW_TAG_POSITION = 9,    /* u32 */
    PMW_TAG_SHM_REF = 10,    /* 24 bytes: offset, length, sequence (u64) */
    PMW_TAG_ERR_CODE = 11,   /* i32, a negative status */
    PMW_TAG_ERR_TAG = 12,    /* u16, the tag an error is about */
    PMW_TAG_ERR_TEXT = 13,   /* 1..255 bytes of one line of text */
    PMW_TAG_TRANSPORT = 14,  /* u8, PMW_TRANSPORT_* */
    PMW_TAG_MAX_META = 15,   /* u32 */
    PMW_TAG_MAX_BODY = 16,   /* u32 */
    PMW_TAG_MAX_ENTRIES = 17,/* u32 */
    PMW_TAG_SHM_SIZE = 18,   /* u64, bytes of each direction's area */
    PMW_TAG_NONCE = 19,      /* 32 bytes */
    PMW_TAG_AUTH = 20,       /* u8, 1: the server requires authentication */
    PMW_TAG_MAC = 21,        /* 32 bytes, HMAC-SHA256 */
    PMW_TAG_ROWS = 22,       /* u32: rows a forward's reply carries */
    PMW_TAG_ROUND = 23,      /* u32: clock probe number, or rounds used */
    PMW_TAG_CLOCK_RECV = 24, /* u64: server's clock when the probe came */
    PMW_TAG_CLOCK_SEND = 25, /* u64: server's clock when it answered */
    PMW_TAG_CLOCK_OFFSET = 26, /* i64: client clock minus server clock */
    PMW_TAG_CLOCK_BOUND = 27,  /* u64: the offset's uncertainty, +- ns */
    PMW_TAG_BOOT_ID = 28,      /* 16 bytes: the sender's boot (its clock's identity) */
    PMW_TAG_FEAT_LAYERS = 29,  /* 2..16 bytes: 1..8 u16 layers, strictly
                                  ascending, whose features a reply carries */
    PMW_TAG_FEAT_SHAPE = 30,   /* 12 bytes: u32 layers, rows, dim of a
                                  reply's features section */
    PMW_TAG_TREE = 31,         /* n_tokens bytes (1..33): a verify forward's
                                  token tree, each node's parent (u8; 0xff
                                  for the root, node 0) */
    PMW_TAG_KEEP_ROWS = 32     /* 1..33 bytes: u8 rows a keep moves into
                                  place, strictly ascending, row j >= j */
} pmw_tag;

/* The name of a tag ("phase"), or "unknown"; static. */
PMW_API const char *pmw_tag_name(unsigned tag);

/* Output bits: WANT in a request, OUTPUTS in a reply. ACTIVATIONS and
 * LOGITS are exclusive (one float section per reply). FEATURES comes with
 * FEAT_LAYERS in a request and FEAT_SHAPE in a reply, and only with them:
 * the residual stream after each named layer, for every one of the
 * forward's n_tokens positions (whatever rows says). */
enum {
    PMW_OUT_ACTIVATIONS = 1,
    PMW_OUT_LOGITS = 2,
    PMW_OUT_ARGMAX = 4,
    PMW_OUT_FEATURES = 8,
    PMW_OUT_ALL = 15
};

/* Most layers one forward asks features of. */
#define PMW_FEATURES_MAX 8

/* Most nodes of a forward's tree (the root and 32 proposals), and so the
 * most rows one keep moves. */
#define PMW_TREE_MAX 33

typedef enum pmw_transport {
    PMW_TRANSPORT_STREAM = 1, /* body inline on the socket (Unix or TCP) */
    PMW_TRANSPORT_SHARED = 2  /* body in a shared memfd region (Unix only) */
} pmw_transport;

/* Receiver limits. A frame whose metadata or body is longer, or whose
 * metadata has more entries, is refused. */
typedef struct pmw_limits {
    uint32_t max_meta;    /* metadata bytes (default 4096) */
    uint32_t max_body;    /* body bytes (default 64 MiB) */
    uint32_t max_entries; /* metadata entries (default 32) */
} pmw_limits;

/* Fills the defaults above. */
PMW_API void pmw_limits_default(pmw_limits *lim);

/* ------------------------------------------------------------------------
 * Messages. Pointers in a received message are views (into the decoder's
 * buffer or the shared region) valid until the next receive or decode call
 * on the same object; pointers in a message to send are borrowed for the
 * duration of the send call only.
 */
typedef struct pmw_hello {
    uint8_t transport;       /* PMW_TRANSPORT_* */
    pmw_limits limits;       /* what the sender accepts */
    uint64_t shm_size;       /* shared: bytes per direction (client's) */
    uint8_t auth;            /* server: 1 = authentication required */
    uint8_t nonce[PMW_NONCE_SIZE];
} pmw_hello;

typedef struct pmw_auth {
    uint8_t mac[PMW_MAC_SIZE];
} pmw_auth;

/* A target-shard forward call. Input is token ids (dim == 0, tokens has
 * n_tokens entries) or boundary activations (dim > 0, activations is
 * n_tokens x dim, row-major). want is a nonzero set of PMW_OUT_* bits, and
 * rows says how many rows the reply carries: the outputs of the last
 * `rows` of the n_tokens positions. Both are the caller's explicit request;
 * a receiver never infers them from the phase. */
typedef struct pmw_forward {
    pm_phase phase;           /* exact, decode or verify */
    uint64_t req_id;
    uint32_t base_pos;        /* position of the first token */
    uint32_t n_tokens;        /* >= 1 */
    uint32_t dim;             /* 0: token input */
    uint32_t want;            /* PMW_OUT_* */
    const int32_t *tokens;    /* [n_tokens] when dim == 0 */
    const float *activations; /* [n_tokens x dim] when dim > 0 */
    uint32_t rows;            /* 1..n_tokens. Sending: 0 leaves the tag out,
                                 which means every row. Received: always
                                 1..n_tokens (n_tokens when the tag was
                                 absent). */
    uint32_t n_feat;          /* FEATURES: layers in feat, 1..8; else 0 */
    uint32_t feat[PMW_FEATURES_MAX]; /* strictly ascending, < 65536 */
    /* A tree verify (phase verify only): n_tree == n_tokens nodes, node i
     * at base_pos + its depth, attending to the positions before base_pos
     * and its ancestors; 0: a chain (the tag is left out). parent[0] is
     * -1, every other parent[i] in 0..i-1. */
    uint32_t n_tree;
    int32_t tree_parent[PMW_TREE_MAX];
} pmw_forward;

/* After a tree verify at base_pos: the cache rows base_pos + rows[j] move
 * to base_pos + j, j in 0..n_rows-1 (rows strictly ascending, rows[j] >=
 * j, all below PMW_TREE_MAX). Answered with an ack. */
typedef struct pmw_keep {
    uint64_t req_id;
    uint32_t base_pos;
    uint32_t n_rows;          /* 1..PMW_TREE_MAX */
    uint32_t rows[PMW_TREE_MAX];
} pmw_keep;

/* A forward reply: an optional float section (activations or logits,
 * n_tokens x width), an optional argmax section (n_tokens ids) and an
 * optional features section (feat_layers x feat_rows x feat_dim floats,
 * layer-major), in that order in the body. */
typedef struct pmw_reply {
    uint64_t req_id;
    uint32_t n_tokens;
    uint32_t outputs;        /* PMW_OUT_* present, nonzero */
    uint32_t width;          /* floats per token; 0 without a float section */
    const float *values;     /* [n_tokens x width] or NULL */
    const int32_t *argmax;   /* [n_tokens] or NULL */
    uint32_t feat_layers;    /* FEATURES: 1..8; else 0 (and rows, dim 0) */
    uint32_t feat_rows, feat_dim;
    const float *features;   /* [feat_layers][feat_rows][feat_dim] or NULL */
} pmw_reply;

typedef struct pmw_error {
    int32_t code;            /* a negative status, or an application code */
    uint16_t tag;            /* the tag the error is about; 0 = none */
    char text[PMW_TEXT_MAX + 1]; /* one line, NUL-terminated */
} pmw_error;

/* Clock alignment (docs/wire.md, "Clock alignment"). Times are ns on
 * each side's CLOCK_BOOTTIME. A probe carries its round number; the reply
 * echoes it with the server's receive and send times (send >= recv). The
 * set message tells the server what the client worked out: client clock =
 * server clock + offset, within +- bound, from `round` rounds. */
#define PMW_CLOCK_ROUNDS_MAX 64u
#define PMW_CLOCK_LIMIT (INT64_C(1) << 62) /* |offset| and bound stay below */

typedef struct pmw_clock {
    uint32_t round;          /* 1..PMW_CLOCK_ROUNDS_MAX */
    uint64_t recv_ns;        /* reply only */
    uint64_t send_ns;        /* reply only */
} pmw_clock;

typedef struct pmw_clock_set {
    int64_t offset_ns;       /* client minus server; |offset| < 2^62 */
    uint64_t bound_ns;       /* < 2^62 */
    uint32_t rounds;         /* 1..PMW_CLOCK_ROUNDS_MAX (tag round) */
    uint8_t boot_id[16];     /* the client's boot id; all zero: not sent
                                (a received tag is never all zero) */
} pmw_clock_set;

typedef struct pmw_shm_ref {
    uint64_t offset;         /* into the sender's area, 8-byte aligned */
    uint64_t length;         /* bytes */
    uint64_t seq;            /* the frame's sequence number */
} pmw_shm_ref;

typedef struct pmw_msg {
    pmw_kind kind;
    uint64_t seq;            /* received: the frame's sequence number */
    union {
        pmw_hello hello;
        pmw_auth auth;
        pmw_forward forward;
        pmw_reply reply;
        struct { uint64_t req_id; } reset;
        struct { uint64_t req_id; uint32_t position; } truncate;
        struct { uint64_t req_id; } ack;
        pmw_error error;
        pmw_clock clock;         /* CLOCK and CLOCK_REPLY */
        pmw_clock_set clock_set;
        pmw_keep keep;
    };
    /* Received on the shared transport: where the body lives. Set by
     * pmw_msg_parse, resolved by the connection; ignored when sending. */
    int has_ref;
    pmw_shm_ref ref;
} pmw_msg;

/* Why a frame was refused: the status code, the tag concerned (0 if none)
 * and one line of text naming the kind, the tag and the problem. */
typedef struct pmw_diag {
    int code;
    uint16_t tag;
    char text[PMW_TEXT_MAX + 1];
} pmw_diag;

/* ------------------------------------------------------------------------
 * Codec: frames.
 */
typedef struct pmw_frame {
    uint16_t kind;
    uint64_t seq;
    const uint8_t *meta;     /* meta_len bytes of TLV entries */
    uint32_t meta_len;
    const uint8_t *body;     /* body_len bytes, 8-byte aligned */
    uint32_t body_len;
    int pad_ok;              /* 1 when the padding after meta is zero */
} pmw_frame;

typedef struct pmw_decoder pmw_decoder;

/* Creates a decoder enforcing *lim (NULL: defaults). *out is NULL on
 * failure. The caller owns the decoder; pmw_decoder_destroy(NULL) is a
 * no-op. Returns 0, PMW_E_ARG or PMW_E_NOMEM. */
PMW_API int pmw_decoder_create(const pmw_limits *lim, pmw_decoder **out);
PMW_API void pmw_decoder_destroy(pmw_decoder *dec);

/* Appends len bytes (copied). The buffer grows as frames need, never past
 * one frame at the limits plus 64 KiB of look-ahead; beyond that the call
 * fails. Invalidates views from earlier frames. Returns 0 or a negative
 * status (sticky: a failed decoder fails every later call). */
PMW_API int pmw_decoder_feed(pmw_decoder *dec, const void *data, size_t len);

/* Takes the next whole frame. Returns 1 and fills *frame (views valid until
 * the next feed or next call), 0 when more bytes are needed, or a negative
 * status (sticky) when a header is invalid: bad magic, unknown version,
 * reserved bits set, metadata or body length over its limit. Magic and
 * version are judged as soon as their first 4 and 6 bytes are present, the
 * rest of the header once its 32 bytes are: always before any body. */
PMW_API int pmw_decoder_next(pmw_decoder *dec, pmw_frame *frame);

/* One line on the sticky error ("" when none). */
PMW_API const char *pmw_decoder_error(const pmw_decoder *dec);

/* Bytes held that belong to no returned frame (a partial frame at EOF). */
PMW_API size_t pmw_decoder_pending(const pmw_decoder *dec);

/* Writes a frame header. out must hold PMW_HEADER_SIZE bytes. */
PMW_API void pmw_header_encode(uint8_t *out, uint16_t kind, uint64_t seq,
                               uint32_t meta_len, uint32_t body_len);

/* Padding after metadata so that the body starts 8-byte aligned. */
static inline uint32_t pmw_meta_pad(uint32_t meta_len)
{
    return (8u - (meta_len & 7u)) & 7u;
}

/* ------------------------------------------------------------------------
 * Codec: metadata writer. Appends TLV entries (u16 tag, u16 length, value)
 * into a caller buffer; running out of room sets overflow and drops the
 * entry, so a sequence of puts needs one check at the end.
 */
typedef struct pmw_meta {
    uint8_t *buf;
    size_t cap;
    size_t len;
    int overflow;
} pmw_meta;

PMW_API void pmw_meta_init(pmw_meta *w, void *buf, size_t cap);
PMW_API void pmw_meta_put(pmw_meta *w, uint16_t tag, const void *value, uint16_t len);
PMW_API void pmw_meta_u8(pmw_meta *w, uint16_t tag, uint8_t v);
PMW_API void pmw_meta_u16(pmw_meta *w, uint16_t tag, uint16_t v);
PMW_API void pmw_meta_u32(pmw_meta *w, uint16_t tag, uint32_t v);
PMW_API void pmw_meta_u64(pmw_meta *w, uint16_t tag, uint64_t v);

/* ------------------------------------------------------------------------
 * Codec: messages.
 */

/* Validates a frame as a message and fills *msg (views into the frame).
 * allow_ref: the frame came over the shared transport, so a SHM_REF tag is
 * allowed; then msg->has_ref is set and the body must be bound with
 * pmw_msg_bind_body once resolved. Checks, in this order: kind known;
 * padding zero; entries well formed and within limits->max_entries (NULL:
 * no entry limit); each tag known to the kind, not repeated, of the right
 * width; required tags present; values in range (phase first); the body
 * length exactly what the metadata implies. Returns 0, or the first problem
 * as a negative status with *diag naming the kind, tag and problem. */
PMW_API int pmw_msg_parse(const pmw_frame *frame, const pmw_limits *limits,
                          int allow_ref, pmw_msg *msg, pmw_diag *diag);

/* Binds a body (len bytes) to a parsed message whose body was referenced,
 * checking that its size is what the metadata implies. */
PMW_API int pmw_msg_bind_body(pmw_msg *msg, const void *body, size_t len, pmw_diag *diag);

/* Checks a message to send (same rules as the receiver) and reports its
 * body length. Returns 0 or a negative status with *diag filled. */
PMW_API int pmw_msg_check(const pmw_msg *msg, size_t *body_len, pmw_diag *diag);

/* Encodes msg as one stream-transport frame with sequence number seq into
 * out (cap bytes). Returns the frame size; when it is larger than cap,
 * nothing useful was written (call again with a bigger buffer). Returns a
 * negative status when msg is invalid. */
PMW_API long long pmw_msg_encode(const pmw_msg *msg, uint64_t seq, void *out, size_t cap);

/* ------------------------------------------------------------------------
 * Addresses: the one parser of shard addresses. pmw_connect and pmw_listen
 * use it, and so do the engine's placement grammar and pm-shardd's
 * --listen, which add only their own rules on top (a placement needs a
 * host and a port from 1).
 */
typedef struct pmw_address {
    int is_unix;             /* 1: a Unix socket path; 0: TCP */
    char path[108];          /* Unix: the socket path, NUL-terminated */
    char host[256];          /* TCP: the host, brackets removed;
                                "127.0.0.1" when the address names none */
    int host_given;          /* TCP: 0 for "tcp::PORT" and "tcp:PORT" */
    uint16_t port;           /* TCP: 0..65535 (0: any free port, to listen) */
} pmw_address;

/* Parses address: "unix:PATH" or a path containing '/' (at most 107
 * bytes); "tcp:HOST:PORT", "tcp:[V6]:PORT", "tcp::PORT" or "tcp:PORT"
 * (loopback), PORT a plain decimal 0..65535, a ':' in HOST only inside
 * brackets around the whole host. Resolves nothing. 0 with *out filled, or
 * PMW_E_ARG with one line in err. Pure; thread-safe. */
PMW_API int pmw_address_parse(const char *address, pmw_address *out, char *err,
                              size_t errlen);

/* ------------------------------------------------------------------------
 * Connections.
 */
typedef struct pmw_options {
    int transport;           /* client: PMW_TRANSPORT_* (default STREAM) */
    pmw_limits limits;       /* what this side accepts */
    int timeout_ms;          /* deadline per blocking call, > 0 (5000) */
    const char *token;       /* shared secret for challenge-response, or NULL */
    size_t token_len;
    uint64_t shm_size;       /* client: bytes per direction (64 MiB);
                              * server: the largest size accepted (1 GiB) */
} pmw_options;

/* Fills the defaults above. */
PMW_API void pmw_options_default(pmw_options *opt);

typedef struct pmw_conn pmw_conn;
typedef struct pmw_listener pmw_listener;

/* Connects to address and runs the client handshake. address is
 * "unix:PATH", "tcp:HOST:PORT" ("tcp:[v6]:PORT"), or a path containing '/'.
 * The shared transport needs a Unix socket. On success *out is a connection
 * the caller owns (pmw_conn_close); on failure *out is NULL, a negative
 * status is returned and err holds one line. opt may be NULL (defaults). */
PMW_API int pmw_connect(const char *address, const pmw_options *opt, pmw_conn **out,
                        char *err, size_t errlen);

/* Runs the client or server handshake over an already connected stream
 * socket (a socketpair end, an accepted socket). Takes ownership of fd in
 * every case: on failure it is closed. */
PMW_API int pmw_conn_client(int fd, const pmw_options *opt, pmw_conn **out,
                            char *err, size_t errlen);
PMW_API int pmw_conn_server(int fd, const pmw_options *opt, pmw_conn **out,
                            char *err, size_t errlen);

/* Sends one message (checked first; an invalid message is refused locally
 * with nothing sent). The whole frame is written before the deadline or the
 * connection fails. On the shared transport the body is copied into this
 * side's area, unless the caller already wrote it there at the start of the
 * area (see pmw_conn_payload), and the socket carries only the header and
 * metadata. Returns 0 or a negative status. */
PMW_API int pmw_conn_send(pmw_conn *c, const pmw_msg *msg);

/* Receives one message. Returns 0 with *msg filled (views valid until the
 * next receive or close). Otherwise a negative status:
 *  - PMW_E_TIMEOUT with no byte of a frame read: the connection is intact
 *    (an idle wait); the caller may call again.
 *  - a drainable code (pmw_status_is_drainable): the frame was read whole
 *    and refused; the connection is intact. On a server connection the
 *    library has already answered with an error reply naming the problem.
 *  - anything else: the connection failed for good (bad header, EOF, I/O,
 *    timeout mid-frame); a server connection has sent a best-effort error
 *    reply and shut its write side. pmw_conn_error says why. */
PMW_API int pmw_conn_recv(pmw_conn *c, pmw_msg *msg);

/* Sends an error reply (code < 0, tag or 0, one line; text is cut to
 * PMW_TEXT_MAX bytes and control characters become spaces). */
PMW_API int pmw_conn_send_error(pmw_conn *c, int code, uint16_t tag, const char *text);

/* Sends one frame with caller-made metadata and body, verbatim (for
 * protocol tests and extensions). seq 0 uses and consumes the connection's
 * next sequence number; any other value is sent as given and consumes
 * nothing. Stream framing only (the body goes inline). */
PMW_API int pmw_conn_send_frame(pmw_conn *c, uint16_t kind, uint64_t seq,
                                const void *meta, size_t meta_len,
                                const void *body, size_t body_len);

/* The sequence number the next frame sent will carry. */
PMW_API uint64_t pmw_conn_next_seq(const pmw_conn *c);

/* Shared transport: the start of this side's area (8-byte aligned, *cap
 * bytes), where a caller may build a body in place to avoid the copy in
 * pmw_conn_send. Valid until the next send. NULL on the stream transport. */
PMW_API void *pmw_conn_payload(pmw_conn *c, size_t *cap);

/* Changes the deadline for later blocking calls (ms > 0). */
PMW_API int pmw_conn_set_timeout(pmw_conn *c, int timeout_ms);

PMW_API int pmw_conn_fd(const pmw_conn *c);
PMW_API int pmw_conn_transport(const pmw_conn *c);
PMW_API const pmw_limits *pmw_conn_peer_limits(const pmw_conn *c);
/* One line on the last failure or refusal ("" when none). */
PMW_API const char *pmw_conn_error(const pmw_conn *c);
/* The last refused frame's diagnosis (code 0 when none). */
PMW_API const pmw_diag *pmw_conn_diag(const pmw_conn *c);
/* 1 while the connection can still carry frames. */
PMW_API int pmw_conn_usable(const pmw_conn *c);

/* ---- clock alignment ---------------------------------------------------
 * One round of a probe, all four times in ns: t0 the client sent it, t1 the
 * server received it, t2 the server answered, t3 the client received the
 * answer (t0, t3 on the client's clock; t1, t2 on the server's). */
typedef struct pmw_clock_round {
    uint64_t t0, t1, t2, t3;
} pmw_clock_round;

/* What rounds of probes give: client clock = server clock + offset_ns, the
 * true offset lying within +- bound_ns (half the best round's round trip
 * less the server's time, plus the rounding), from the round with the
 * smallest round trip (`best`, 0-based; the earliest on a tie). */
typedef struct pmw_clock_estimate {
    int64_t offset_ns;
    uint64_t bound_ns;
    uint64_t rtt_ns;         /* of the best round: (t3 - t0) - (t2 - t1) */
    uint32_t rounds;         /* rounds that were usable */
    uint32_t best;
} pmw_clock_estimate;

/* Works out the offset from n rounds. A round is unusable when t3 < t0,
 * t2 < t1, the server's time exceeds the round trip, or a time difference
 * reaches 2^62. Returns 0, or PMW_E_VALUE when no round is usable
 * (PMW_E_ARG for NULL or n == 0). Pure; thread-safe. */
PMW_API int pmw_clock_estimate_rounds(const pmw_clock_round *r, size_t n,
                                      pmw_clock_estimate *out);

/* Client: runs `rounds` probes (1..PMW_CLOCK_ROUNDS_MAX) over c on
 * CLOCK_BOOTTIME, works out the offset, and sends it to the server in a
 * CLOCK_SET with this host's boot id (/proc/sys/kernel/random/boot_id,
 * when readable: a server of the same boot shares the clock, whatever the
 * estimate says), which the server acknowledges. Returns 0 with *out filled; a
 * drainable code when the server refused a probe (a daemon that predates
 * clock alignment answers PMW_E_KIND) and the connection is intact; any
 * other negative status when the connection failed. Not thread-safe with
 * other calls on c. */
PMW_API int pmw_conn_clock_sync(pmw_conn *c, unsigned rounds, pmw_clock_estimate *out);

/* Closes the socket, unmaps the shared region, frees everything. NULL is
 * a no-op. */
PMW_API void pmw_conn_close(pmw_conn *c);

/* ------------------------------------------------------------------------
 * Listener.
 */

/* Binds and listens on address ("unix:PATH", a path, or "tcp:HOST:PORT";
 * "tcp::PORT" or "tcp:PORT" binds 127.0.0.1; port 0 picks a free one). A
 * non-loopback TCP address requires opt->token. A stale Unix socket file
 * (nobody listening) is replaced; a live one is an error. opt is kept as
 * the server options for accepted connections (the token is copied). */
PMW_API int pmw_listen(const char *address, const pmw_options *opt, pmw_listener **out,
                       char *err, size_t errlen);

/* Waits up to timeout_ms for a client, accepts it and runs the server
 * handshake (bounded by the options' deadline). PMW_E_TIMEOUT when no
 * client came. */
PMW_API int pmw_accept(pmw_listener *l, int timeout_ms, pmw_conn **out,
                       char *err, size_t errlen);

/* Waits up to timeout_ms for a client and accepts it without a handshake:
 * *fd_out is the connected socket (non-blocking, close-on-exec), owned by
 * the caller, who runs pmw_conn_server on it, typically on another thread
 * and with a short deadline of its own so that a silent client cannot hold
 * up the accepting loop. PMW_E_TIMEOUT when no client came (*fd_out -1). */
PMW_API int pmw_accept_fd(pmw_listener *l, int timeout_ms, int *fd_out, char *err,
                          size_t errlen);

/* The bound address in the form pmw_connect takes (with the real port). */
PMW_API const char *pmw_listener_address(const pmw_listener *l);
PMW_API int pmw_listener_fd(const pmw_listener *l);

/* Closes the socket and removes a Unix socket file it created. NULL ok. */
PMW_API void pmw_listener_close(pmw_listener *l);

/* SHA-256 (FIPS 180-4) of len bytes, the hash the TCP handshake's HMAC is
 * built on, exported so the tools (perturb's output parity) share one
 * implementation. Pure and thread-safe; data may be NULL when len is 0. */
PMW_API void pmw_sha256(const void *data, size_t len, uint8_t out[32]);

#ifdef __cplusplus
}
#endif
#endif /* PHASEMARK_WIRE_H */
