/* fuzz_shardd.c — libFuzzer target: pm-shardd's whole frame handler
 * (serve_one: receive, the wire's checks, the daemon's checks, the span
 * runner, the reply) on the shared transport, with a second writer on the
 * shared region.
 *
 * The daemon's source is compiled into this target (its main renamed) so
 * the handler is the very code the daemon runs, not a copy. Per input: a
 * socketpair, both handshakes (shared transport), a server thread running
 * serve_one until it drops the client, a scribbler thread rewriting the
 * client's area with the input's bytes the whole time, and the input read
 * as a script of client operations:
 *
 *   op 0: forward  phase u8, n u8 (1..8), want u8, rows u8, base u8, n ids
 *         (phase bit 7 on a verify: a tree, node j's parent id_j % j)
 *   op 1: raw frame  kind u8, meta_len u8, meta, body_len u8, body (inline)
 *   op 2: reset     op 3: truncate (position u8)
 *   op 4: keep      base u8, n u8 (1..4), n steps u8 (row j = row j-1 +
 *         1 + step % 2, row 0 = step % 2)
 *
 * (ops are the low 3 bits; 5..7 end the script)
 *
 * after each a reply is awaited (short deadline). Any crash or sanitizer
 * report is a finding; answers themselves may be anything.
 * Seeds: tests/fuzz/corpus/shardd/. Model: the tiny q8_0 GGUF of the model
 * fuzzer's corpus.
 */
#define main pm_shardd_main
int pm_shardd_main(int argc, char **argv);
#include "pm_shardd.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef PM_FUZZ_MODEL
#error "PM_FUZZ_MODEL (a small GGUF) must be defined"
#endif

static server *g_s;

static server *setup(void)
{
    server *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    llm_model_options mo = LLM_MODEL_OPTIONS_INIT;
    llm_model *m;
    char err[256];
    if (llm_model_open(PM_FUZZ_MODEL, &mo, &m, err, sizeof err) != 0)
        abort();
    llm_model_info in;
    llm_model_get_info(m, &in);
    llm_model_free(m);
    s->o = (options){.model = PM_FUZZ_MODEL, .first = 0, .last = in.n_layers - 1, .fd = -1,
                     .threads = 1, .ctx = 32, .batch = 8, .timeout_ms = 150, .ready_fd = -1,
                     .max_conns = 1, .hello_ms = 150};
    pthread_mutex_init(&s->run_lock, NULL);
    pthread_mutex_init(&s->lock, NULL);
    pmw_options_default(&s->wopt);
    s->wopt.timeout_ms = 150;
    if (open_model(s) != 0)
        abort();
    return s;
}

typedef struct script {
    const uint8_t *data;
    size_t size;
    uint8_t *area;
    size_t cap;
    int stop; /* atomic */
    int fd;   /* server side, for the handshake thread */
    pmw_conn *srv;
} script;

static void *scribble(void *arg)
{
    script *w = arg;
    size_t len = w->cap < 4096 ? w->cap : 4096;
    for (size_t k = 0; !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); k++) {
        uint8_t v = w->size ? w->data[k % w->size] : (uint8_t)k;
        for (size_t i = 0; i < len; i += 4)
            __atomic_store_n(w->area + i + (k & 3), (uint8_t)(v ^ (uint8_t)i), __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *server_handshake(void *arg)
{
    script *w = arg;
    char err[256];
    if (pmw_conn_server(w->fd, &g_s->wopt, &w->srv, err, sizeof err) != 0)
        w->srv = NULL;
    return NULL;
}

static void *serve(void *arg)
{
    peer *p = arg;
    while (serve_one(g_s, p) == 0 && pmw_conn_usable(p->c))
        ;
    return NULL;
}

/* Runs the script's operations from the client; stops at the first
 * failure of the connection. */
static void run_ops(pmw_conn *c, const uint8_t *d, size_t n)
{
    size_t i = 0;
    while (i < n && pmw_conn_usable(c)) {
        uint8_t op = d[i++] & 7;
        pmw_msg m, a;
        memset(&m, 0, sizeof m);
        int rc = 0;
        if (op == 0 && i + 5 <= n) {
            uint32_t k = (uint32_t)(d[i + 1] % 8) + 1;
            int32_t ids[8] = {0};
            for (uint32_t j = 0; j < k && i + 5 + j < n; j++)
                ids[j] = (int32_t)d[i + 5 + j] - 8;
            m.kind = PMW_MSG_FORWARD;
            m.forward = (pmw_forward){(pm_phase)((d[i] & 0x7f) % 5), 1, d[i + 4] % 40, k, 0, d[i + 2] & 7,
                                      ids, NULL, d[i + 3] % 10, 0, {0}, 0, {0}};
            if ((d[i] & 0x80) && m.forward.phase == PM_PHASE_VERIFY) {
                m.forward.n_tree = k;
                m.forward.tree_parent[0] = -1;
                for (uint32_t j = 1; j < k; j++)
                    m.forward.tree_parent[j] = (int32_t)((uint32_t)(ids[j] + 8) % j);
            }
            i += 5 + k;
            rc = pmw_conn_send(c, &m);
        } else if (op == 1 && i + 2 <= n) {
            uint16_t kind = d[i];
            size_t ml = d[i + 1] < n - i - 2 ? d[i + 1] : n - i - 2;
            const uint8_t *meta = d + i + 2;
            i += 2 + ml;
            size_t bl = i < n ? (d[i] < n - i - 1 ? d[i] : n - i - 1) : 0;
            const uint8_t *body = i < n ? d + i + 1 : NULL;
            i += i < n ? 1 + bl : 0;
            rc = pmw_conn_send_frame(c, kind, 0, ml ? meta : NULL, ml, bl ? body : NULL, bl);
        } else if (op == 2) {
            m.kind = PMW_MSG_RESET;
            rc = pmw_conn_send(c, &m);
        } else if (op == 3 && i < n) {
            m.kind = PMW_MSG_TRUNCATE;
            m.truncate.position = d[i++] % 40;
            rc = pmw_conn_send(c, &m);
        } else if (op == 4 && i + 2 <= n) {
            m.kind = PMW_MSG_KEEP;
            m.keep.base_pos = d[i] % 40;
            m.keep.n_rows = (uint32_t)(d[i + 1] % 4) + 1;
            i += 2;
            for (uint32_t j = 0; j < m.keep.n_rows; j++) {
                uint32_t step = i < n ? d[i++] % 2 : 0;
                m.keep.rows[j] = j ? m.keep.rows[j - 1] + 1 + step : step;
            }
            rc = pmw_conn_send(c, &m);
        } else {
            break;
        }
        if (rc == 0)
            (void)pmw_conn_recv(c, &a);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_s)
        g_s = setup();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return 0;
    script w = {data, size, NULL, 0, 0, sv[1], NULL};
    pthread_t hs, sc, sv_th;
    if (pthread_create(&hs, NULL, server_handshake, &w) != 0) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    pmw_options o;
    pmw_options_default(&o);
    o.transport = PMW_TRANSPORT_SHARED;
    o.shm_size = 1 << 16;
    o.timeout_ms = 150;
    pmw_conn *c = NULL;
    char err[256];
    int crc = pmw_conn_client(sv[0], &o, &c, err, sizeof err);
    pthread_join(hs, NULL);
    if (crc != 0 || !w.srv) {
        pmw_conn_close(c);
        pmw_conn_close(w.srv);
        return 0;
    }
    peer p;
    memset(&p, 0, sizeof p);
    p.s = g_s;
    p.fd = -1;
    if (add_peer(g_s, &p, w.srv) != 0) {
        drop_peer(g_s, &p);
        pmw_conn_close(c);
        return 0;
    }
    w.area = pmw_conn_payload(c, &w.cap);
    pthread_create(&sc, NULL, scribble, &w);
    pthread_create(&sv_th, NULL, serve, &p);
    run_ops(c, data, size);
    shutdown(pmw_conn_fd(c), SHUT_RDWR); /* the server sees EOF and drops us */
    pthread_join(sv_th, NULL);
    __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
    pthread_join(sc, NULL);
    drop_peer(g_s, &p);
    pmw_conn_close(c);
    return 0;
}
