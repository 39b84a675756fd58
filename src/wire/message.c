/* message.c — typed messages: metadata tables, validation, encoding.
 *
 * One table says which tags each kind defines, how wide each value is and
 * which are required. Parsing a frame walks the entries once against that
 * table (structure, limits, unknown, repeated, width), then checks required
 * tags, then the values with the same rules the sender applies before
 * sending (validate_fields), then the body length the metadata implies.
 * Rejections name the kind, the tag and the problem in one line, so an
 * error reply tells the peer exactly what to fix.
 */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "internal.h"

/* Smallest limits a peer may announce: room for any message this library
 * sends without a body (an error reply with its longest text). */
#define PMW_MIN_META 512u
#define PMW_MIN_ENTRIES 8u
#define PMW_TAG_LAST PMW_TAG_KEEP_ROWS

typedef struct tagspec {
    uint16_t tag;
    uint16_t width; /* value bytes; 0: variable (ERR_TEXT, 1..255) */
    uint8_t required;
} tagspec;

typedef struct kindspec {
    const tagspec *tags;
    unsigned n;
} kindspec;

static const tagspec hello_tags[] = {
    {PMW_TAG_TRANSPORT, 1, 1}, {PMW_TAG_MAX_META, 4, 1}, {PMW_TAG_MAX_BODY, 4, 1},
    {PMW_TAG_MAX_ENTRIES, 4, 1}, {PMW_TAG_NONCE, PMW_NONCE_SIZE, 1},
    {PMW_TAG_SHM_SIZE, 8, 0}, {PMW_TAG_AUTH, 1, 0}};
static const tagspec auth_tags[] = {{PMW_TAG_MAC, PMW_MAC_SIZE, 1}};
static const tagspec forward_tags[] = {
    {PMW_TAG_PHASE, 1, 1}, {PMW_TAG_REQ_ID, 8, 1}, {PMW_TAG_BASE_POS, 4, 1},
    {PMW_TAG_N_TOKENS, 4, 1}, {PMW_TAG_WANT, 1, 1}, {PMW_TAG_DIM, 4, 0},
    {PMW_TAG_ROWS, 4, 0}, {PMW_TAG_SHM_REF, PMW_SHM_REF_SIZE, 0},
    {PMW_TAG_FEAT_LAYERS, 0, 0}, {PMW_TAG_TREE, 0, 0}};
static const tagspec reply_tags[] = {
    {PMW_TAG_REQ_ID, 8, 1}, {PMW_TAG_N_TOKENS, 4, 1}, {PMW_TAG_OUTPUTS, 1, 1},
    {PMW_TAG_WIDTH, 4, 0}, {PMW_TAG_SHM_REF, PMW_SHM_REF_SIZE, 0},
    {PMW_TAG_FEAT_SHAPE, 12, 0}};
static const tagspec reqid_tags[] = {{PMW_TAG_REQ_ID, 8, 1}};
static const tagspec truncate_tags[] = {{PMW_TAG_REQ_ID, 8, 1}, {PMW_TAG_POSITION, 4, 1}};
static const tagspec error_tags[] = {
    {PMW_TAG_ERR_CODE, 4, 1}, {PMW_TAG_ERR_TEXT, 0, 1}, {PMW_TAG_ERR_TAG, 2, 0}};
static const tagspec clock_tags[] = {{PMW_TAG_ROUND, 4, 1}};
static const tagspec clock_reply_tags[] = {
    {PMW_TAG_ROUND, 4, 1}, {PMW_TAG_CLOCK_RECV, 8, 1}, {PMW_TAG_CLOCK_SEND, 8, 1}};
static const tagspec clock_set_tags[] = {
    {PMW_TAG_CLOCK_OFFSET, 8, 1}, {PMW_TAG_CLOCK_BOUND, 8, 1}, {PMW_TAG_ROUND, 4, 1},
    {PMW_TAG_BOOT_ID, 16, 0}};
static const tagspec keep_tags[] = {
    {PMW_TAG_REQ_ID, 8, 1}, {PMW_TAG_BASE_POS, 4, 1}, {PMW_TAG_KEEP_ROWS, 0, 1}};

#define KS(a) {a, sizeof a / sizeof a[0]}
static const kindspec kinds[] = {
    {NULL, 0},          KS(hello_tags), KS(auth_tags), KS(forward_tags), KS(reply_tags),
    KS(reqid_tags),     KS(truncate_tags), KS(reqid_tags), KS(error_tags), {NULL, 0},
    KS(clock_tags),     KS(clock_reply_tags), KS(clock_set_tags), KS(keep_tags)};
#define KIND_LAST PMW_MSG_KEEP
_Static_assert(sizeof kinds / sizeof kinds[0] == KIND_LAST + 1, "one kindspec per kind");

const char *pmw__kind_name(unsigned kind)
{
    static const char *const names[] = {"?",     "hello", "auth",     "forward", "reply",
                                        "reset", "truncate", "ack", "error", "shutdown",
                                        "clock", "clock_reply", "clock_set", "keep"};
    return kind <= KIND_LAST ? names[kind] : "unknown-kind";
}

const char *pmw_tag_name(unsigned tag)
{
    static const char *const names[] = {
        "?",           "phase",    "req_id",   "base_pos", "n_tokens", "dim",
        "want",        "outputs",  "width",    "position", "shm_ref",  "err_code",
        "err_tag",     "err_text", "transport", "max_meta", "max_body", "max_entries",
        "shm_size",    "nonce",    "auth",     "mac",      "rows",     "round",
        "clock_recv",  "clock_send", "clock_offset", "clock_bound", "boot_id",
        "feat_layers", "feat_shape", "tree", "keep_rows"};
    return tag >= 1 && tag <= PMW_TAG_LAST ? names[tag] : "unknown";
}

/* An all-zero boot id is how the typed field says "absent". */
static int zero16(const uint8_t *b)
{
    for (int i = 0; i < 16; i++)
        if (b[i])
            return 0;
    return 1;
}

/* ---- body sizes --------------------------------------------------------- */

/* a * b * 4 in 64 bits, or UINT64_MAX when it does not fit. */
static uint64_t f32_bytes(uint64_t a, uint64_t b)
{
    if (b && a > UINT64_MAX / 4 / b)
        return UINT64_MAX;
    return a * b * 4;
}

static int has_floats(uint32_t out)
{
    return (out & (PMW_OUT_ACTIVATIONS | PMW_OUT_LOGITS)) != 0;
}

/* Body bytes the typed fields imply (UINT64_MAX: too large to exist). */
static uint64_t body_size(const pmw_msg *m)
{
    if (m->kind == PMW_MSG_FORWARD) {
        const pmw_forward *f = &m->forward;
        return f32_bytes(f->n_tokens, f->dim ? f->dim : 1);
    }
    if (m->kind == PMW_MSG_REPLY) {
        const pmw_reply *r = &m->reply;
        uint64_t floats = has_floats(r->outputs) ? f32_bytes(r->n_tokens, r->width) : 0;
        uint64_t ids = (r->outputs & PMW_OUT_ARGMAX) ? (uint64_t)r->n_tokens * 4 : 0;
        /* layers <= 8 and rows < 2^32, so their product cannot overflow. */
        uint64_t feat = f32_bytes((uint64_t)r->feat_layers * r->feat_rows, r->feat_dim);
        if (floats == UINT64_MAX || feat == UINT64_MAX || feat > UINT64_MAX - floats - ids)
            return UINT64_MAX;
        return floats + ids + feat;
    }
    return 0;
}

/* ---- value rules, shared by sender and receiver ------------------------- */

static int check_outputs(const char *kname, uint16_t tag, uint32_t bits, pmw_diag *d)
{
    if (bits == 0 || (bits & ~(uint32_t)PMW_OUT_ALL)) {
        pmw__diag(d, PMW_E_VALUE, tag, "%s: tag %u (%s) value %u is not a nonzero set of bits 1|2|4|8",
                  kname, tag, pmw_tag_name(tag), bits);
        return PMW_E_VALUE;
    }
    if ((bits & PMW_OUT_ACTIVATIONS) && (bits & PMW_OUT_LOGITS)) {
        pmw__diag(d, PMW_E_VALUE, tag, "%s: tag %u (%s) asks for both activations and logits",
                  kname, tag, pmw_tag_name(tag));
        return PMW_E_VALUE;
    }
    return 0;
}

/* A tree verify's shape: only on a verify, one parent per token, the root
 * first and every other parent before its child (so the nodes form a tree
 * whose depths follow from the parents). */
static int check_tree(const pmw_forward *f, pmw_diag *d)
{
    if (f->n_tree == 0)
        return 0;
    if (f->phase != PM_PHASE_VERIFY) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_TREE, "forward: tag 31 (tree) on a %s forward (verify only)",
                  pm_phase_name((unsigned)f->phase));
        return PMW_E_VALUE;
    }
    if (f->n_tree != f->n_tokens || f->n_tree > PMW_TREE_MAX) {
        pmw__diag(d, PMW_E_LENGTH, PMW_TAG_TREE,
                  "forward: tag 31 (tree) has %u nodes (want n_tokens %u, at most %u)", f->n_tree,
                  f->n_tokens, PMW_TREE_MAX);
        return PMW_E_LENGTH;
    }
    for (uint32_t i = 0; i < f->n_tree; i++) {
        int32_t p = f->tree_parent[i];
        if (i == 0 ? p != -1 : (p < 0 || (uint32_t)p >= i)) {
            pmw__diag(d, PMW_E_VALUE, PMW_TAG_TREE,
                      "forward: tag 31 (tree) node %u has parent %d (want %s)", i, (int)p,
                      i == 0 ? "none, 0xff" : "an earlier node");
            return PMW_E_VALUE;
        }
    }
    return 0;
}

static int check_keep(const pmw_keep *k, pmw_diag *d)
{
    if (k->n_rows == 0 || k->n_rows > PMW_TREE_MAX) {
        pmw__diag(d, PMW_E_LENGTH, PMW_TAG_KEEP_ROWS, "keep: tag 32 (keep_rows) has %u rows (want 1..%u)",
                  k->n_rows, PMW_TREE_MAX);
        return PMW_E_LENGTH;
    }
    for (uint32_t j = 0; j < k->n_rows; j++)
        if (k->rows[j] < j || k->rows[j] >= PMW_TREE_MAX || (j > 0 && k->rows[j] <= k->rows[j - 1])) {
            pmw__diag(d, PMW_E_VALUE, PMW_TAG_KEEP_ROWS,
                      "keep: tag 32 (keep_rows) row %u at %u is not ascending, at least its index "
                      "and below %u",
                      k->rows[j], j, PMW_TREE_MAX);
            return PMW_E_VALUE;
        }
    if ((uint64_t)k->base_pos + PMW_TREE_MAX > UINT32_MAX) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_BASE_POS, "keep: tag 3 (base_pos) %u is too large",
                  k->base_pos);
        return PMW_E_VALUE;
    }
    return 0;
}

static int check_forward(const pmw_forward *f, pmw_diag *d)
{
    if (!pm_phase_is_valid((unsigned)f->phase)) {
        pmw__diag(d, PMW_E_PHASE, PMW_TAG_PHASE,
                  "forward: tag 1 (phase) value %u out of range (exact=1, decode=2, verify=3)",
                  (unsigned)f->phase);
        return PMW_E_PHASE;
    }
    if (!pm_phase_is_shard_phase((unsigned)f->phase)) {
        pmw__diag(d, PMW_E_PHASE, PMW_TAG_PHASE,
                  "forward: tag 1 (phase) value %u (%s) is not a shard phase (exact, decode, verify)",
                  (unsigned)f->phase, pm_phase_name((unsigned)f->phase));
        return PMW_E_PHASE;
    }
    if (f->n_tokens == 0) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_N_TOKENS, "forward: tag 4 (n_tokens) is 0");
        return PMW_E_VALUE;
    }
    if ((uint64_t)f->base_pos + f->n_tokens > UINT32_MAX) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_BASE_POS,
                  "forward: tag 3 (base_pos) %u + n_tokens %u passes 2^32-1", f->base_pos,
                  f->n_tokens);
        return PMW_E_VALUE;
    }
    if (f->rows > f->n_tokens) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_ROWS,
                  "forward: tag 22 (rows) value %u is not in 1..n_tokens (%u)", f->rows,
                  f->n_tokens);
        return PMW_E_VALUE;
    }
    int rc = check_outputs("forward", PMW_TAG_WANT, f->want, d);
    if (rc)
        return rc;
    if (((f->want & PMW_OUT_FEATURES) != 0) != (f->n_feat > 0)) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_FEAT_LAYERS,
                  "forward: tag 29 (feat_layers) comes with want bit 8 and only with it");
        return PMW_E_VALUE;
    }
    if (f->n_feat > PMW_FEATURES_MAX) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_FEAT_LAYERS,
                  "forward: tag 29 (feat_layers) names %u layers, at most %u", f->n_feat,
                  PMW_FEATURES_MAX);
        return PMW_E_VALUE;
    }
    for (uint32_t j = 0; j < f->n_feat; j++)
        if (f->feat[j] > 0xffffu || (j > 0 && f->feat[j] <= f->feat[j - 1])) {
            pmw__diag(d, PMW_E_VALUE, PMW_TAG_FEAT_LAYERS,
                      "forward: tag 29 (feat_layers) layer %u at %u is not a u16 above the one "
                      "before",
                      f->feat[j], j);
            return PMW_E_VALUE;
        }
    return check_tree(f, d);
}

static int check_reply(const pmw_reply *r, pmw_diag *d)
{
    if (r->n_tokens == 0) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_N_TOKENS, "reply: tag 4 (n_tokens) is 0");
        return PMW_E_VALUE;
    }
    int rc = check_outputs("reply", PMW_TAG_OUTPUTS, r->outputs, d);
    if (rc)
        return rc;
    if (has_floats(r->outputs) && r->width == 0) {
        pmw__diag(d, PMW_E_MISSING, PMW_TAG_WIDTH,
                  "reply: tag 8 (width) missing or 0 with a float section");
        return PMW_E_MISSING;
    }
    if (!has_floats(r->outputs) && r->width != 0) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_WIDTH, "reply: tag 8 (width) given without a float section");
        return PMW_E_VALUE;
    }
    int feat = (r->outputs & PMW_OUT_FEATURES) != 0;
    if (feat != (r->feat_layers > 0) || (!feat && (r->feat_rows || r->feat_dim))) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                  "reply: tag 30 (feat_shape) comes with outputs bit 8 and only with it");
        return PMW_E_VALUE;
    }
    if (feat && (r->feat_layers > PMW_FEATURES_MAX || r->feat_rows == 0 || r->feat_dim == 0)) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE,
                  "reply: tag 30 (feat_shape) %u layers x %u rows x %u is not 1..%u x >= 1 x >= 1",
                  r->feat_layers, r->feat_rows, r->feat_dim, PMW_FEATURES_MAX);
        return PMW_E_VALUE;
    }
    return 0;
}

static int check_hello(const pmw_hello *h, pmw_diag *d)
{
    if (h->transport != PMW_TRANSPORT_STREAM && h->transport != PMW_TRANSPORT_SHARED) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_TRANSPORT,
                  "hello: tag 14 (transport) value %u is not stream=1 or shared=2", h->transport);
        return PMW_E_VALUE;
    }
    if (h->limits.max_meta < PMW_MIN_META || h->limits.max_entries < PMW_MIN_ENTRIES) {
        pmw__diag(d, PMW_E_VALUE, h->limits.max_meta < PMW_MIN_META ? PMW_TAG_MAX_META
                                                                     : PMW_TAG_MAX_ENTRIES,
                  "hello: limits below the minimum (max_meta >= %u, max_entries >= %u)",
                  PMW_MIN_META, PMW_MIN_ENTRIES);
        return PMW_E_VALUE;
    }
    if (h->auth > 1) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_AUTH, "hello: tag 20 (auth) value %u is not 0 or 1", h->auth);
        return PMW_E_VALUE;
    }
    if ((h->transport == PMW_TRANSPORT_SHARED) != (h->shm_size != 0)) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_SHM_SIZE,
                  "hello: tag 18 (shm_size) must be nonzero exactly on the shared transport");
        return PMW_E_VALUE;
    }
    return 0;
}

static int check_error(const pmw_error *e, pmw_diag *d)
{
    if (e->code >= 0) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_ERR_CODE, "error: tag 11 (err_code) %d is not negative",
                  (int)e->code);
        return PMW_E_VALUE;
    }
    size_t n = strnlen(e->text, sizeof e->text);
    if (n == 0 || n > PMW_TEXT_MAX) {
        pmw__diag(d, PMW_E_LENGTH, PMW_TAG_ERR_TEXT, "error: tag 13 (err_text) is not 1..255 bytes");
        return PMW_E_LENGTH;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)e->text[i];
        if (ch < 0x20 || ch == 0x7f) {
            pmw__diag(d, PMW_E_VALUE, PMW_TAG_ERR_TEXT,
                      "error: tag 13 (err_text) has control byte 0x%02x at %zu", ch, i);
            return PMW_E_VALUE;
        }
    }
    return 0;
}

static int check_round(const char *kname, uint32_t round, pmw_diag *d)
{
    if (round == 0 || round > PMW_CLOCK_ROUNDS_MAX) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_ROUND, "%s: tag 23 (round) value %u is not in 1..%u",
                  kname, round, PMW_CLOCK_ROUNDS_MAX);
        return PMW_E_VALUE;
    }
    return 0;
}

/* A reply whose send time precedes its receive time would make a round
 * trip shorter than nothing; the estimate would trust it most. */
static int check_clock(const pmw_msg *m, pmw_diag *d)
{
    int rc = check_round(pmw__kind_name(m->kind), m->clock.round, d);
    if (rc || m->kind != PMW_MSG_CLOCK_REPLY || m->clock.send_ns >= m->clock.recv_ns)
        return rc;
    pmw__diag(d, PMW_E_VALUE, PMW_TAG_CLOCK_SEND,
              "clock_reply: tag 25 (clock_send) %llu is before tag 24 (clock_recv) %llu",
              (unsigned long long)m->clock.send_ns, (unsigned long long)m->clock.recv_ns);
    return PMW_E_VALUE;
}

static int check_clock_set(const pmw_clock_set *c, pmw_diag *d)
{
    if (c->offset_ns <= -PMW_CLOCK_LIMIT || c->offset_ns >= PMW_CLOCK_LIMIT) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_CLOCK_OFFSET,
                  "clock_set: tag 26 (clock_offset) %lld is not within +-2^62",
                  (long long)c->offset_ns);
        return PMW_E_VALUE;
    }
    if (c->bound_ns >= (uint64_t)PMW_CLOCK_LIMIT) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_CLOCK_BOUND,
                  "clock_set: tag 27 (clock_bound) %llu is not below 2^62",
                  (unsigned long long)c->bound_ns);
        return PMW_E_VALUE;
    }
    return check_round("clock_set", c->rounds, d);
}

static int validate_fields(const pmw_msg *m, pmw_diag *d)
{
    switch (m->kind) {
    case PMW_MSG_HELLO: return check_hello(&m->hello, d);
    case PMW_MSG_FORWARD: return check_forward(&m->forward, d);
    case PMW_MSG_REPLY: return check_reply(&m->reply, d);
    case PMW_MSG_ERROR: return check_error(&m->error, d);
    case PMW_MSG_CLOCK:
    case PMW_MSG_CLOCK_REPLY: return check_clock(m, d);
    case PMW_MSG_CLOCK_SET: return check_clock_set(&m->clock_set, d);
    case PMW_MSG_KEEP: return check_keep(&m->keep, d);
    default: return 0;
    }
}

/* ---- parsing ------------------------------------------------------------ */

typedef struct entries {
    const uint8_t *val[PMW_TAG_LAST + 1];
    uint16_t len[PMW_TAG_LAST + 1];
} entries;

static const tagspec *find_tag(const kindspec *ks, unsigned tag)
{
    for (unsigned i = 0; i < ks->n; i++)
        if (ks->tags[i].tag == tag)
            return &ks->tags[i];
    return NULL;
}

/* First pass: the entries tile the metadata exactly and their number is
 * within the limit. Nothing is interpreted yet. */
static int check_structure(const pmw_frame *f, const char *kn, uint32_t max_entries, pmw_diag *d)
{
    uint32_t off = 0, count = 0;
    while (off < f->meta_len) {
        if (f->meta_len - off < 4) {
            pmw__diag(d, PMW_E_LENGTH, 0, "%s: metadata ends inside an entry header at byte %u", kn, off);
            return PMW_E_LENGTH;
        }
        unsigned tag = pmw__get16(f->meta + off), len = pmw__get16(f->meta + off + 2);
        if (len > f->meta_len - off - 4) {
            pmw__diag(d, PMW_E_LENGTH, (uint16_t)tag,
                      "%s: tag %u (%s) length %u runs past the metadata end", kn, tag,
                      pmw_tag_name(tag), len);
            return PMW_E_LENGTH;
        }
        if (++count > max_entries) {
            pmw__diag(d, PMW_E_ENTRIES, 0, "%s: more than %u metadata entries", kn, max_entries);
            return PMW_E_ENTRIES;
        }
        off += 4 + len;
    }
    return 0;
}

/* Second pass: each tag known to the kind, not repeated, of its width;
 * then every required tag present. */
static int walk_entries(const pmw_frame *f, const kindspec *ks, const char *kn, int allow_ref,
                        entries *e, pmw_diag *d)
{
    for (uint32_t off = 0; off < f->meta_len;) {
        unsigned tag = pmw__get16(f->meta + off), len = pmw__get16(f->meta + off + 2);
        const tagspec *ts = find_tag(ks, tag);
        if (!ts || (tag == PMW_TAG_SHM_REF && !allow_ref)) {
            pmw__diag(d, PMW_E_UNKNOWN_TAG, (uint16_t)tag, "%s: tag %u (%s) unknown for this kind%s",
                      kn, tag, pmw_tag_name(tag), ts ? " on the stream transport" : "");
            return PMW_E_UNKNOWN_TAG;
        }
        if (e->val[tag]) {
            pmw__diag(d, PMW_E_REPEATED, (uint16_t)tag, "%s: tag %u (%s) repeated", kn, tag,
                      pmw_tag_name(tag));
            return PMW_E_REPEATED;
        }
        int bad_width = ts->width ? len != ts->width : (len == 0 || len > PMW_TEXT_MAX);
        if (bad_width) {
            pmw__diag(d, PMW_E_LENGTH, (uint16_t)tag, "%s: tag %u (%s) has length %u (want %u)", kn,
                      tag, pmw_tag_name(tag), len, ts->width ? ts->width : PMW_TEXT_MAX);
            return PMW_E_LENGTH;
        }
        e->val[tag] = f->meta + off + 4;
        e->len[tag] = (uint16_t)len;
        off += 4 + len;
    }
    for (unsigned i = 0; i < ks->n; i++) {
        unsigned tag = ks->tags[i].tag;
        if (ks->tags[i].required && !e->val[tag]) {
            pmw__diag(d, PMW_E_MISSING, (uint16_t)tag, "%s: required tag %u (%s) missing", kn, tag,
                      pmw_tag_name(tag));
            return PMW_E_MISSING;
        }
    }
    return 0;
}

static uint32_t opt32(const entries *e, unsigned tag)
{
    return e->val[tag] ? pmw__get32(e->val[tag]) : 0;
}

static void fill_fields(pmw_msg *m, const entries *e)
{
    switch (m->kind) {
    case PMW_MSG_HELLO:
        m->hello.transport = e->val[PMW_TAG_TRANSPORT][0];
        m->hello.limits.max_meta = pmw__get32(e->val[PMW_TAG_MAX_META]);
        m->hello.limits.max_body = pmw__get32(e->val[PMW_TAG_MAX_BODY]);
        m->hello.limits.max_entries = pmw__get32(e->val[PMW_TAG_MAX_ENTRIES]);
        m->hello.shm_size = e->val[PMW_TAG_SHM_SIZE] ? pmw__get64(e->val[PMW_TAG_SHM_SIZE]) : 0;
        m->hello.auth = e->val[PMW_TAG_AUTH] ? e->val[PMW_TAG_AUTH][0] : 0;
        memcpy(m->hello.nonce, e->val[PMW_TAG_NONCE], PMW_NONCE_SIZE);
        break;
    case PMW_MSG_AUTH:
        memcpy(m->auth.mac, e->val[PMW_TAG_MAC], PMW_MAC_SIZE);
        break;
    case PMW_MSG_FORWARD:
        m->forward.phase = (pm_phase)e->val[PMW_TAG_PHASE][0];
        m->forward.req_id = pmw__get64(e->val[PMW_TAG_REQ_ID]);
        m->forward.base_pos = pmw__get32(e->val[PMW_TAG_BASE_POS]);
        m->forward.n_tokens = pmw__get32(e->val[PMW_TAG_N_TOKENS]);
        m->forward.want = e->val[PMW_TAG_WANT][0];
        m->forward.dim = opt32(e, PMW_TAG_DIM);
        /* Absent: every row. A present 0 is refused by check_raw. */
        m->forward.rows = e->val[PMW_TAG_ROWS] ? pmw__get32(e->val[PMW_TAG_ROWS])
                                               : m->forward.n_tokens;
        /* A length check_raw refuses fills nothing. */
        if (e->val[PMW_TAG_FEAT_LAYERS] && e->len[PMW_TAG_FEAT_LAYERS] % 2 == 0 &&
            e->len[PMW_TAG_FEAT_LAYERS] <= 2 * PMW_FEATURES_MAX) {
            m->forward.n_feat = e->len[PMW_TAG_FEAT_LAYERS] / 2u;
            for (uint32_t j = 0; j < m->forward.n_feat; j++)
                m->forward.feat[j] = pmw__get16(e->val[PMW_TAG_FEAT_LAYERS] + 2 * j);
        }
        /* A tree check_raw refuses (longer than PMW_TREE_MAX) fills nothing. */
        if (e->val[PMW_TAG_TREE] && e->len[PMW_TAG_TREE] <= PMW_TREE_MAX) {
            m->forward.n_tree = e->len[PMW_TAG_TREE];
            for (uint32_t i = 0; i < m->forward.n_tree; i++) {
                uint8_t b = e->val[PMW_TAG_TREE][i];
                m->forward.tree_parent[i] = b == 0xffu ? -1 : (int32_t)b;
            }
        }
        break;
    case PMW_MSG_REPLY:
        m->reply.req_id = pmw__get64(e->val[PMW_TAG_REQ_ID]);
        m->reply.n_tokens = pmw__get32(e->val[PMW_TAG_N_TOKENS]);
        m->reply.outputs = e->val[PMW_TAG_OUTPUTS][0];
        m->reply.width = opt32(e, PMW_TAG_WIDTH);
        if (e->val[PMW_TAG_FEAT_SHAPE]) {
            m->reply.feat_layers = pmw__get32(e->val[PMW_TAG_FEAT_SHAPE]);
            m->reply.feat_rows = pmw__get32(e->val[PMW_TAG_FEAT_SHAPE] + 4);
            m->reply.feat_dim = pmw__get32(e->val[PMW_TAG_FEAT_SHAPE] + 8);
        }
        break;
    case PMW_MSG_RESET:
    case PMW_MSG_ACK:
        m->reset.req_id = pmw__get64(e->val[PMW_TAG_REQ_ID]);
        break;
    case PMW_MSG_TRUNCATE:
        m->truncate.req_id = pmw__get64(e->val[PMW_TAG_REQ_ID]);
        m->truncate.position = pmw__get32(e->val[PMW_TAG_POSITION]);
        break;
    case PMW_MSG_ERROR:
        m->error.code = (int32_t)pmw__get32(e->val[PMW_TAG_ERR_CODE]);
        m->error.tag = e->val[PMW_TAG_ERR_TAG] ? pmw__get16(e->val[PMW_TAG_ERR_TAG]) : 0;
        memcpy(m->error.text, e->val[PMW_TAG_ERR_TEXT], e->len[PMW_TAG_ERR_TEXT]);
        m->error.text[e->len[PMW_TAG_ERR_TEXT]] = '\0';
        break;
    case PMW_MSG_CLOCK:
        m->clock.round = pmw__get32(e->val[PMW_TAG_ROUND]);
        break;
    case PMW_MSG_CLOCK_REPLY:
        m->clock.round = pmw__get32(e->val[PMW_TAG_ROUND]);
        m->clock.recv_ns = pmw__get64(e->val[PMW_TAG_CLOCK_RECV]);
        m->clock.send_ns = pmw__get64(e->val[PMW_TAG_CLOCK_SEND]);
        break;
    case PMW_MSG_KEEP:
        m->keep.req_id = pmw__get64(e->val[PMW_TAG_REQ_ID]);
        m->keep.base_pos = pmw__get32(e->val[PMW_TAG_BASE_POS]);
        if (e->len[PMW_TAG_KEEP_ROWS] <= PMW_TREE_MAX) {
            m->keep.n_rows = e->len[PMW_TAG_KEEP_ROWS];
            for (uint32_t j = 0; j < m->keep.n_rows; j++)
                m->keep.rows[j] = e->val[PMW_TAG_KEEP_ROWS][j];
        }
        break;
    case PMW_MSG_CLOCK_SET:
        m->clock_set.offset_ns = (int64_t)pmw__get64(e->val[PMW_TAG_CLOCK_OFFSET]);
        m->clock_set.bound_ns = pmw__get64(e->val[PMW_TAG_CLOCK_BOUND]);
        m->clock_set.rounds = pmw__get32(e->val[PMW_TAG_ROUND]);
        if (e->val[PMW_TAG_BOOT_ID])
            memcpy(m->clock_set.boot_id, e->val[PMW_TAG_BOOT_ID], 16);
        break;
    default:
        break;
    }
    if (e->val[PMW_TAG_SHM_REF]) {
        const uint8_t *r = e->val[PMW_TAG_SHM_REF];
        m->has_ref = 1;
        m->ref.offset = pmw__get64(r);
        m->ref.length = pmw__get64(r + 8);
        m->ref.seq = pmw__get64(r + 16);
    }
}

/* Rules about raw entries that the typed fields can no longer show: a DIM
 * tag of 0 would make an activation input look like a token input, a ROWS
 * tag of 0 would read as "every row" (the tag's absence), and a NUL inside
 * an error text would silently cut it. */
static int check_raw(const pmw_msg *m, const entries *e, pmw_diag *d)
{
    if (m->kind == PMW_MSG_FORWARD && e->val[PMW_TAG_DIM] && m->forward.dim == 0) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_DIM, "forward: tag 5 (dim) is 0");
        return PMW_E_VALUE;
    }
    if (m->kind == PMW_MSG_FORWARD && e->val[PMW_TAG_ROWS] && m->forward.rows == 0) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_ROWS,
                  "forward: tag 22 (rows) value 0 is not in 1..n_tokens (%u)",
                  m->forward.n_tokens);
        return PMW_E_VALUE;
    }
    if (m->kind == PMW_MSG_FORWARD && e->val[PMW_TAG_FEAT_LAYERS] &&
        (e->len[PMW_TAG_FEAT_LAYERS] % 2 || e->len[PMW_TAG_FEAT_LAYERS] > 2 * PMW_FEATURES_MAX)) {
        pmw__diag(d, PMW_E_LENGTH, PMW_TAG_FEAT_LAYERS,
                  "forward: tag 29 (feat_layers) has length %u (want 2..%u, even)",
                  e->len[PMW_TAG_FEAT_LAYERS], 2 * PMW_FEATURES_MAX);
        return PMW_E_LENGTH;
    }
    if (m->kind == PMW_MSG_FORWARD && e->val[PMW_TAG_TREE] && e->len[PMW_TAG_TREE] > PMW_TREE_MAX) {
        pmw__diag(d, PMW_E_LENGTH, PMW_TAG_TREE, "forward: tag 31 (tree) has length %u (want 1..%u)",
                  e->len[PMW_TAG_TREE], PMW_TREE_MAX);
        return PMW_E_LENGTH;
    }
    if (m->kind == PMW_MSG_KEEP && e->len[PMW_TAG_KEEP_ROWS] > PMW_TREE_MAX) {
        pmw__diag(d, PMW_E_LENGTH, PMW_TAG_KEEP_ROWS, "keep: tag 32 (keep_rows) has length %u (want 1..%u)",
                  e->len[PMW_TAG_KEEP_ROWS], PMW_TREE_MAX);
        return PMW_E_LENGTH;
    }
    if (m->kind == PMW_MSG_REPLY && e->val[PMW_TAG_FEAT_SHAPE] && m->reply.feat_layers == 0) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_FEAT_SHAPE, "reply: tag 30 (feat_shape) names 0 layers");
        return PMW_E_VALUE;
    }
    if (m->kind == PMW_MSG_CLOCK_SET && e->val[PMW_TAG_BOOT_ID] && zero16(m->clock_set.boot_id)) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_BOOT_ID, "clock_set: tag 28 (boot_id) is all zero");
        return PMW_E_VALUE;
    }
    if (m->kind == PMW_MSG_ERROR && memchr(e->val[PMW_TAG_ERR_TEXT], 0, e->len[PMW_TAG_ERR_TEXT])) {
        pmw__diag(d, PMW_E_VALUE, PMW_TAG_ERR_TEXT, "error: tag 13 (err_text) contains a NUL byte");
        return PMW_E_VALUE;
    }
    return 0;
}

int pmw_msg_parse(const pmw_frame *f, const pmw_limits *lim, int allow_ref, pmw_msg *m,
                  pmw_diag *d)
{
    if (!f || !m)
        return PMW_E_ARG;
    memset(m, 0, sizeof *m);
    if (f->kind == 0 || f->kind > KIND_LAST) {
        pmw__diag(d, PMW_E_KIND, 0, "unknown message kind %u", f->kind);
        return PMW_E_KIND;
    }
    const char *kn = pmw__kind_name(f->kind);
    if (!f->pad_ok) {
        pmw__diag(d, PMW_E_LENGTH, 0, "%s: padding after the metadata is not zero", kn);
        return PMW_E_LENGTH;
    }
    m->kind = (pmw_kind)f->kind;
    m->seq = f->seq;
    entries e;
    memset(&e, 0, sizeof e);
    int rc = check_structure(f, kn, lim ? lim->max_entries : UINT32_MAX, d);
    if (rc || (rc = walk_entries(f, &kinds[f->kind], kn, allow_ref, &e, d)))
        return rc;
    fill_fields(m, &e);
    if ((rc = check_raw(m, &e, d)) || (rc = validate_fields(m, d)))
        return rc;
    if (m->has_ref) {
        if (f->body_len) {
            pmw__diag(d, PMW_E_LENGTH, PMW_TAG_SHM_REF,
                      "%s: tag 10 (shm_ref) given with an inline body of %u bytes", kn, f->body_len);
            return PMW_E_LENGTH;
        }
        return 0;
    }
    return pmw_msg_bind_body(m, f->body, f->body_len, d);
}

int pmw_msg_bind_body(pmw_msg *m, const void *body, size_t len, pmw_diag *d)
{
    uint64_t want = body_size(m);
    if (want != len) {
        pmw__diag(d, PMW_E_LENGTH, m->has_ref ? PMW_TAG_SHM_REF : 0,
                  "%s: body is %zu bytes, metadata implies %llu", pmw__kind_name(m->kind), len,
                  (unsigned long long)want);
        return PMW_E_LENGTH;
    }
    const uint8_t *b = body;
    if (m->kind == PMW_MSG_FORWARD) {
        if (m->forward.dim)
            m->forward.activations = (const float *)body;
        else
            m->forward.tokens = (const int32_t *)body;
    } else if (m->kind == PMW_MSG_REPLY) {
        pmw_reply *r = &m->reply;
        size_t floats = has_floats(r->outputs) ? (size_t)r->n_tokens * r->width * 4 : 0;
        r->values = floats ? (const float *)b : NULL;
        size_t ids = (r->outputs & PMW_OUT_ARGMAX) ? (size_t)r->n_tokens * 4 : 0;
        r->argmax = ids ? (const int32_t *)(b + floats) : NULL;
        r->features = r->feat_layers ? (const float *)(b + floats + ids) : NULL;
    }
    return 0;
}

/* ---- sending ------------------------------------------------------------ */

int pmw_msg_check(const pmw_msg *m, size_t *body_len, pmw_diag *d)
{
    if (!m || m->kind < PMW_MSG_HELLO || m->kind > KIND_LAST) {
        pmw__diag(d, PMW_E_KIND, 0, "unknown message kind %d", m ? (int)m->kind : -1);
        return PMW_E_KIND;
    }
    if (m->kind == PMW_MSG_FORWARD && m->forward.dim == 0 && m->forward.activations) {
        pmw__diag(d, PMW_E_ARG, PMW_TAG_DIM, "forward: activations given with dim 0");
        return PMW_E_ARG;
    }
    int rc = validate_fields(m, d);
    if (rc)
        return rc;
    uint64_t n = body_size(m);
    if (n > UINT32_MAX) {
        pmw__diag(d, PMW_E_BODY_LIMIT, 0, "%s: body of %llu bytes cannot be framed",
                  pmw__kind_name(m->kind), (unsigned long long)n);
        return PMW_E_BODY_LIMIT;
    }
    const void *parts[3];
    size_t lens[3];
    size_t np = pmw__body_parts(m, parts, lens);
    for (size_t i = 0; i < np; i++)
        if (lens[i] && !parts[i]) {
            pmw__diag(d, PMW_E_ARG, 0, "%s: body pointer is NULL", pmw__kind_name(m->kind));
            return PMW_E_ARG;
        }
    if (body_len)
        *body_len = (size_t)n;
    return 0;
}

size_t pmw__body_parts(const pmw_msg *m, const void *parts[3], size_t lens[3])
{
    if (m->kind == PMW_MSG_FORWARD) {
        const pmw_forward *f = &m->forward;
        parts[0] = f->dim ? (const void *)f->activations : (const void *)f->tokens;
        lens[0] = (size_t)f->n_tokens * (f->dim ? f->dim : 1) * 4;
        return 1;
    }
    if (m->kind == PMW_MSG_REPLY) {
        const pmw_reply *r = &m->reply;
        size_t n = 0;
        if (has_floats(r->outputs)) {
            parts[n] = r->values;
            lens[n++] = (size_t)r->n_tokens * r->width * 4;
        }
        if (r->outputs & PMW_OUT_ARGMAX) {
            parts[n] = r->argmax;
            lens[n++] = (size_t)r->n_tokens * 4;
        }
        if (r->feat_layers) {
            parts[n] = r->features;
            lens[n++] = (size_t)r->feat_layers * r->feat_rows * r->feat_dim * 4;
        }
        return n;
    }
    return 0;
}

int pmw__meta_encode(const pmw_msg *m, const pmw_shm_ref *ref, pmw_meta *w)
{
    switch (m->kind) {
    case PMW_MSG_HELLO:
        pmw_meta_u8(w, PMW_TAG_TRANSPORT, m->hello.transport);
        pmw_meta_u32(w, PMW_TAG_MAX_META, m->hello.limits.max_meta);
        pmw_meta_u32(w, PMW_TAG_MAX_BODY, m->hello.limits.max_body);
        pmw_meta_u32(w, PMW_TAG_MAX_ENTRIES, m->hello.limits.max_entries);
        pmw_meta_put(w, PMW_TAG_NONCE, m->hello.nonce, PMW_NONCE_SIZE);
        if (m->hello.shm_size)
            pmw_meta_u64(w, PMW_TAG_SHM_SIZE, m->hello.shm_size);
        if (m->hello.auth)
            pmw_meta_u8(w, PMW_TAG_AUTH, m->hello.auth);
        break;
    case PMW_MSG_AUTH:
        pmw_meta_put(w, PMW_TAG_MAC, m->auth.mac, PMW_MAC_SIZE);
        break;
    case PMW_MSG_FORWARD:
        pmw_meta_u8(w, PMW_TAG_PHASE, pm_phase_encode(m->forward.phase));
        pmw_meta_u64(w, PMW_TAG_REQ_ID, m->forward.req_id);
        pmw_meta_u32(w, PMW_TAG_BASE_POS, m->forward.base_pos);
        pmw_meta_u32(w, PMW_TAG_N_TOKENS, m->forward.n_tokens);
        pmw_meta_u8(w, PMW_TAG_WANT, (uint8_t)m->forward.want);
        if (m->forward.dim)
            pmw_meta_u32(w, PMW_TAG_DIM, m->forward.dim);
        if (m->forward.rows)
            pmw_meta_u32(w, PMW_TAG_ROWS, m->forward.rows);
        if (m->forward.n_feat) {
            uint8_t b[2 * PMW_FEATURES_MAX];
            for (uint32_t j = 0; j < m->forward.n_feat; j++)
                pmw__put16(b + 2 * j, (uint16_t)m->forward.feat[j]);
            pmw_meta_put(w, PMW_TAG_FEAT_LAYERS, b, (uint16_t)(2 * m->forward.n_feat));
        }
        if (m->forward.n_tree) {
            uint8_t b[PMW_TREE_MAX];
            for (uint32_t i = 0; i < m->forward.n_tree; i++)
                b[i] = m->forward.tree_parent[i] < 0 ? 0xffu : (uint8_t)m->forward.tree_parent[i];
            pmw_meta_put(w, PMW_TAG_TREE, b, (uint16_t)m->forward.n_tree);
        }
        break;
    case PMW_MSG_REPLY:
        pmw_meta_u64(w, PMW_TAG_REQ_ID, m->reply.req_id);
        pmw_meta_u32(w, PMW_TAG_N_TOKENS, m->reply.n_tokens);
        pmw_meta_u8(w, PMW_TAG_OUTPUTS, (uint8_t)m->reply.outputs);
        if (m->reply.width)
            pmw_meta_u32(w, PMW_TAG_WIDTH, m->reply.width);
        if (m->reply.feat_layers) {
            uint8_t b[12];
            pmw__put32(b, m->reply.feat_layers);
            pmw__put32(b + 4, m->reply.feat_rows);
            pmw__put32(b + 8, m->reply.feat_dim);
            pmw_meta_put(w, PMW_TAG_FEAT_SHAPE, b, sizeof b);
        }
        break;
    case PMW_MSG_RESET:
    case PMW_MSG_ACK:
        pmw_meta_u64(w, PMW_TAG_REQ_ID, m->reset.req_id);
        break;
    case PMW_MSG_TRUNCATE:
        pmw_meta_u64(w, PMW_TAG_REQ_ID, m->truncate.req_id);
        pmw_meta_u32(w, PMW_TAG_POSITION, m->truncate.position);
        break;
    case PMW_MSG_ERROR:
        pmw_meta_u32(w, PMW_TAG_ERR_CODE, (uint32_t)m->error.code);
        pmw_meta_put(w, PMW_TAG_ERR_TEXT, m->error.text,
                     (uint16_t)strnlen(m->error.text, PMW_TEXT_MAX));
        if (m->error.tag)
            pmw_meta_u16(w, PMW_TAG_ERR_TAG, m->error.tag);
        break;
    case PMW_MSG_CLOCK:
        pmw_meta_u32(w, PMW_TAG_ROUND, m->clock.round);
        break;
    case PMW_MSG_CLOCK_REPLY:
        pmw_meta_u32(w, PMW_TAG_ROUND, m->clock.round);
        pmw_meta_u64(w, PMW_TAG_CLOCK_RECV, m->clock.recv_ns);
        pmw_meta_u64(w, PMW_TAG_CLOCK_SEND, m->clock.send_ns);
        break;
    case PMW_MSG_CLOCK_SET:
        pmw_meta_u64(w, PMW_TAG_CLOCK_OFFSET, (uint64_t)m->clock_set.offset_ns);
        pmw_meta_u64(w, PMW_TAG_CLOCK_BOUND, m->clock_set.bound_ns);
        pmw_meta_u32(w, PMW_TAG_ROUND, m->clock_set.rounds);
        if (!zero16(m->clock_set.boot_id))
            pmw_meta_put(w, PMW_TAG_BOOT_ID, m->clock_set.boot_id, 16);
        break;
    case PMW_MSG_KEEP: {
        uint8_t b[PMW_TREE_MAX];
        for (uint32_t j = 0; j < m->keep.n_rows; j++)
            b[j] = (uint8_t)m->keep.rows[j];
        pmw_meta_u64(w, PMW_TAG_REQ_ID, m->keep.req_id);
        pmw_meta_u32(w, PMW_TAG_BASE_POS, m->keep.base_pos);
        pmw_meta_put(w, PMW_TAG_KEEP_ROWS, b, (uint16_t)m->keep.n_rows);
        break;
    }
    default:
        break;
    }
    if (ref) {
        uint8_t b[PMW_SHM_REF_SIZE];
        pmw__put64(b, ref->offset);
        pmw__put64(b + 8, ref->length);
        pmw__put64(b + 16, ref->seq);
        pmw_meta_put(w, PMW_TAG_SHM_REF, b, sizeof b);
    }
    return w->overflow ? PMW_E_META_LIMIT : 0;
}

long long pmw_msg_encode(const pmw_msg *m, uint64_t seq, void *out, size_t cap)
{
    size_t body_len = 0;
    uint8_t meta[PMW_MIN_META];
    pmw_meta w;
    int rc = pmw_msg_check(m, &body_len, NULL);
    if (rc)
        return rc;
    pmw_meta_init(&w, meta, sizeof meta);
    if ((rc = pmw__meta_encode(m, NULL, &w)))
        return rc;
    uint32_t pad = pmw_meta_pad((uint32_t)w.len);
    size_t total = PMW_HEADER_SIZE + w.len + pad + body_len;
    if (!out || cap < total)
        return (long long)total;
    uint8_t *p = out;
    pmw_header_encode(p, (uint16_t)m->kind, seq, (uint32_t)w.len, (uint32_t)body_len);
    memcpy(p + PMW_HEADER_SIZE, meta, w.len);
    memset(p + PMW_HEADER_SIZE + w.len, 0, pad);
    p += PMW_HEADER_SIZE + w.len + pad;
    const void *parts[3];
    size_t lens[3], np = pmw__body_parts(m, parts, lens);
    for (size_t i = 0; i < np; i++) {
        memcpy(p, parts[i], lens[i]);
        p += lens[i];
    }
    return (long long)total;
}

int pmw__ref_check(const pmw_shm_ref *ref, uint64_t area_size, uint64_t frame_seq,
                   uint64_t slot_seq, pmw_kind kind, pmw_diag *d)
{
    const char *kn = pmw__kind_name(kind);
    if (ref->length > area_size || ref->offset > area_size - ref->length) {
        pmw__diag(d, PMW_E_SHM_REF, PMW_TAG_SHM_REF,
                  "%s: tag 10 (shm_ref) [%llu, +%llu) outside the %llu-byte area", kn,
                  (unsigned long long)ref->offset, (unsigned long long)ref->length,
                  (unsigned long long)area_size);
        return PMW_E_SHM_REF;
    }
    if (ref->offset & 7u) {
        pmw__diag(d, PMW_E_SHM_REF, PMW_TAG_SHM_REF, "%s: tag 10 (shm_ref) offset %llu not 8-byte aligned",
                  kn, (unsigned long long)ref->offset);
        return PMW_E_SHM_REF;
    }
    if (ref->seq != frame_seq || slot_seq != ref->seq) {
        pmw__diag(d, PMW_E_SEQUENCE, PMW_TAG_SHM_REF,
                  "%s: tag 10 (shm_ref) sequence %llu is stale (frame %llu, area holds %llu)", kn,
                  (unsigned long long)ref->seq, (unsigned long long)frame_seq,
                  (unsigned long long)slot_seq);
        return PMW_E_SEQUENCE;
    }
    return 0;
}
