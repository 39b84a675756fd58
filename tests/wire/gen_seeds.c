/* gen_seeds.c — writes the fuzz_wire seed corpus: one file per message
 * kind (and a few malformed shapes), each prefixed with the fuzzer's mode
 * byte. Usage: wire_gen_seeds DIR. Run by hand when the format changes;
 * the output is committed under tests/fuzz/corpus/wire/. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phasemark/wire.h"

static int write_seed(const char *dir, const char *name, uint8_t mode, const void *buf, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fputc(mode, f) != EOF && fwrite(buf, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int seed_msg(const char *dir, const char *name, const pmw_msg *m, uint8_t mode)
{
    static uint8_t buf[1 << 16];
    long long n = pmw_msg_encode(m, 1, buf, sizeof buf);
    if (n < 0 || (size_t)n > sizeof buf)
        return -1;
    return write_seed(dir, name, mode, buf, (size_t)n);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    static const int32_t toks[4] = {1, 22, 333, -4};
    static const float acts[8] = {0.5f, -1, 2, 3.25f, 4, 5, 6, 7};
    pmw_msg m[12];
    memset(m, 0, sizeof m);
    m[0].kind = PMW_MSG_HELLO;
    m[0].hello.transport = PMW_TRANSPORT_SHARED;
    m[0].hello.limits = (pmw_limits){4096, 1 << 20, 32};
    m[0].hello.shm_size = 1 << 20;
    m[0].hello.auth = 1;
    memset(m[0].hello.nonce, 7, PMW_NONCE_SIZE);
    m[1].kind = PMW_MSG_AUTH;
    memset(m[1].auth.mac, 9, PMW_MAC_SIZE);
    m[2].kind = PMW_MSG_FORWARD;
    m[2].forward = (pmw_forward){PM_PHASE_EXACT, 3, 0, 4, 0, PMW_OUT_LOGITS | PMW_OUT_ARGMAX, toks, NULL, 0, 0, {0}, 0, {0}};
    m[3].kind = PMW_MSG_FORWARD;
    m[3].forward = (pmw_forward){PM_PHASE_VERIFY, 3, 4, 2, 4, PMW_OUT_ACTIVATIONS, NULL, acts, 0, 0, {0}, 0, {0}};
    m[4].kind = PMW_MSG_REPLY;
    m[4].reply = (pmw_reply){3, 2, PMW_OUT_LOGITS | PMW_OUT_ARGMAX, 3, acts, toks, 0, 0, 0, NULL};
    m[5].kind = PMW_MSG_RESET;
    m[5].reset.req_id = 3;
    m[6].kind = PMW_MSG_TRUNCATE;
    m[6].truncate.req_id = 3;
    m[6].truncate.position = 5;
    m[7].kind = PMW_MSG_ERROR;
    m[7].error.code = PMW_E_PHASE;
    m[7].error.tag = PMW_TAG_PHASE;
    static const char text[] = "forward: tag 1 (phase) value 9 out of range";
    memcpy(m[7].error.text, text, sizeof text);
    m[8].kind = PMW_MSG_SHUTDOWN;
    m[9].kind = PMW_MSG_CLOCK;
    m[9].clock.round = 2;
    m[10].kind = PMW_MSG_CLOCK_REPLY;
    m[10].clock = (pmw_clock){2, 5000000500u, 5000000600u};
    m[11].kind = PMW_MSG_CLOCK_SET;
    m[11].clock_set = (pmw_clock_set){-4999999400, 100, 8, {0}};
    memset(m[11].clock_set.boot_id, 0x5c, sizeof m[11].clock_set.boot_id);
    const char *names[12] = {"hello", "auth",     "forward_tokens", "forward_acts",
                             "reply", "reset",    "truncate",       "error",
                             "shutdown", "clock", "clock_reply",    "clock_set"};
    int rc = 0;
    for (int i = 0; i < 12; i++) {
        rc |= seed_msg(dir, names[i], &m[i], 0x3f);  /* whole-chunk feeds */
        char alt[64];
        snprintf(alt, sizeof alt, "%s_bytewise", names[i]);
        rc |= seed_msg(dir, alt, &m[i], 0x00);       /* byte-by-byte feeds */
    }
    /* A forward asking for its last row only (the rows tag). */
    pmw_msg fr;
    memset(&fr, 0, sizeof fr);
    fr.kind = PMW_MSG_FORWARD;
    fr.forward = (pmw_forward){PM_PHASE_DECODE, 3, 0, 4, 0, PMW_OUT_ARGMAX, toks, NULL, 1, 0, {0}, 0, {0}};
    rc |= seed_msg(dir, "forward_rows", &fr, 0x3f);
    rc |= seed_msg(dir, "forward_rows_bytewise", &fr, 0x00);
    /* A forward asking for features of two layers, and its reply (the
     * feat_layers and feat_shape tags, a third body section). */
    fr.forward = (pmw_forward){PM_PHASE_DECODE, 3, 0, 4, 0, PMW_OUT_ARGMAX | PMW_OUT_FEATURES,
                               toks, NULL, 1, 2, {1, 3}, 0, {0}};
    rc |= seed_msg(dir, "forward_features", &fr, 0x3f);
    rc |= seed_msg(dir, "forward_features_bytewise", &fr, 0x00);
    pmw_msg fp;
    memset(&fp, 0, sizeof fp);
    fp.kind = PMW_MSG_REPLY;
    fp.reply = (pmw_reply){3, 1, PMW_OUT_ARGMAX | PMW_OUT_FEATURES, 0, NULL, toks, 2, 1, 3, acts};
    rc |= seed_msg(dir, "reply_features", &fp, 0x3f);
    rc |= seed_msg(dir, "reply_features_bytewise", &fp, 0x00);
    /* A tree verify of four nodes (root, two children, a grandchild) and
     * the keep of its path 0, 1, 3 (the tree and keep_rows tags). */
    fr.forward = (pmw_forward){PM_PHASE_VERIFY, 3, 5, 4, 0, PMW_OUT_ARGMAX, toks, NULL, 4, 0, {0},
                               4, {-1, 0, 0, 1}};
    rc |= seed_msg(dir, "forward_tree", &fr, 0x3f);
    rc |= seed_msg(dir, "forward_tree_bytewise", &fr, 0x00);
    pmw_msg kp;
    memset(&kp, 0, sizeof kp);
    kp.kind = PMW_MSG_KEEP;
    kp.keep = (pmw_keep){3, 5, 3, {0, 1, 3}};
    rc |= seed_msg(dir, "keep", &kp, 0x3f);
    rc |= seed_msg(dir, "keep_bytewise", &kp, 0x00);
    /* A shared-transport forward: its body sits in the area. */
    uint8_t buf[256], meta[128];
    pmw_meta w;
    pmw_meta_init(&w, meta, sizeof meta);
    pmw_meta_u8(&w, PMW_TAG_PHASE, PM_PHASE_DECODE);
    pmw_meta_u64(&w, PMW_TAG_REQ_ID, 3);
    pmw_meta_u32(&w, PMW_TAG_BASE_POS, 9);
    pmw_meta_u32(&w, PMW_TAG_N_TOKENS, 1);
    pmw_meta_u8(&w, PMW_TAG_WANT, PMW_OUT_ARGMAX);
    uint8_t ref[24] = {0};
    ref[8] = 4;  /* length 4 */
    ref[16] = 1; /* sequence 1 */
    pmw_meta_put(&w, PMW_TAG_SHM_REF, ref, sizeof ref);
    uint32_t pad = pmw_meta_pad((uint32_t)w.len);
    pmw_header_encode(buf, PMW_MSG_FORWARD, 1, (uint32_t)w.len, 0);
    memcpy(buf + 32, meta, w.len);
    memset(buf + 32 + w.len, 0, pad);
    rc |= write_seed(dir, "forward_shared", 0x40 | 0x3f, buf, 32 + w.len + pad);
    /* Two frames back to back, fed in 5-byte chunks. */
    long long a = pmw_msg_encode(&m[5], 1, buf, sizeof buf);
    long long b = a > 0 ? pmw_msg_encode(&m[8], 2, buf + a, sizeof buf - (size_t)a) : -1;
    if (a > 0 && b > 0)
        rc |= write_seed(dir, "two_frames", 0x04, buf, (size_t)(a + b));
    /* A bad magic and an oversized metadata length. */
    pmw_header_encode(buf, PMW_MSG_SHUTDOWN, 1, 0, 0);
    buf[0] = 'X';
    rc |= write_seed(dir, "bad_magic", 0x3f, buf, 32);
    pmw_header_encode(buf, PMW_MSG_SHUTDOWN, 1, 5000, 0);
    rc |= write_seed(dir, "meta_limit", 0x3f, buf, 32);
    if (rc)
        fprintf(stderr, "%s: cannot write seeds into %s\n", argv[0], dir);
    return rc ? 1 : 0;
}
