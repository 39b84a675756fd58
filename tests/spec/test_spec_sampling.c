/* test_spec_sampling — speculative sampling keeps the target's law.
 *
 *   test_spec_sampling probs        llm_sampler_probs against this file's
 *                                   own softmax / top-k / top-p, and
 *                                   llm_sampler_draw against its weights
 *   test_spec_sampling joint T K P  8000 speculative generations of 4
 *                                   tokens (k = 2, so the first round
 *                                   drafts 2) from a tiny target (vocab 8)
 *                                   with an unrelated draft; the joint law
 *                                   of the first three tokens (512 cells)
 *                                   must match the target's, computed here
 *                                   from its logits, by a chi-square bound
 *
 *   test_spec_sampling joint T K P DRAFTER   the same through an
 *                                   llm_drafter (model, ngram, hybrid);
 *                                   ngram and hybrid start from a prompt
 *                                   that repeats 1 5 2, so n-gram rounds
 *                                   (deterministic proposals, q one-hot)
 *                                   happen whenever the draws continue it;
 *                                   block: a random head written for the
 *                                   target (its rows' q sampled per row);
 *                                   hybrid_head: the hybrid over that head
 *
 * Fixed seeds make every run identical; the bound is about five standard
 * deviations over the chi-square mean, and the same counts are checked to
 * be far outside it against the draft's own law, so the test can tell the
 * two apart (an "accept everything" bug would fail it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block_files.h"
#include "pm_check.h"
#include "spec_common.h"
#include "synth.h"

#define V 8
#define N_SAMPLES 8000
#define CELLS (V * V * V)

typedef struct law {
    float temp;
    int top_k;
    float top_p;
} law;

/* The processed distribution, written from engine.h's definition:
 * softmax(logits / T), keep the top_k most likely (ties: lower id), then
 * the smallest most-likely prefix whose mass reaches top_p; renormalize. */
static void reference_probs(const law *lw, const float *logits, int n, double *out)
{
    int order[256];
    double w[256], mx = logits[0], sum = 0.0;
    for (int i = 1; i < n; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < n; i++) {
        w[i] = exp((logits[i] - mx) / lw->temp);
        order[i] = i;
    }
    for (int i = 1; i < n; i++) /* insertion sort by weight, then id */
        for (int j = i; j > 0 && (w[order[j]] > w[order[j - 1]] ||
                                  (w[order[j]] == w[order[j - 1]] && order[j] < order[j - 1]));
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int keep = lw->top_k > 0 && lw->top_k < n ? lw->top_k : n;
    for (int i = 0; i < keep; i++)
        sum += w[order[i]];
    if (lw->top_p > 0.0f && lw->top_p < 1.0f) {
        double acc = 0.0;
        for (int i = 0; i < keep; i++) {
            acc += w[order[i]];
            if (acc >= lw->top_p * sum) {
                keep = i + 1;
                sum = acc;
                break;
            }
        }
    }
    for (int i = 0; i < n; i++)
        out[i] = 0.0;
    for (int i = 0; i < keep; i++)
        out[order[i]] = w[order[i]] / sum;
}

static int case_probs(void)
{
    static const law laws[] = {{1.0f, 0, 1.0f}, {0.7f, 5, 1.0f}, {1.3f, 0, 0.8f}, {0.9f, 12, 0.6f}};
    float logits[40], probs[40];
    double ref[40];
    uint64_t z = 12345;
    for (size_t l = 0; l < sizeof laws / sizeof laws[0]; l++) {
        llm_sampler_params p = LLM_SAMPLER_PARAMS_INIT;
        p.temperature = laws[l].temp;
        p.top_k = laws[l].top_k;
        p.top_p = laws[l].top_p;
        llm_sampler *sp;
        REQUIRE(llm_sampler_create(&p, 40, &sp) == 0);
        for (int trial = 0; trial < 5; trial++) {
            for (int i = 0; i < 40; i++) {
                z = z * 6364136223846793005ull + 1442695040888963407ull;
                logits[i] = (float)((double)(z >> 11) / 9007199254740992.0 * 6.0 - 3.0);
            }
            CHECK_INT_EQ(llm_sampler_probs(sp, logits, probs), 0);
            reference_probs(&laws[l], logits, 40, ref);
            for (int i = 0; i < 40; i++)
                CHECK_NEAR(probs[i], ref[i], 1e-6);
        }
        llm_sampler_free(sp);
    }
    /* Greedy: one-hot at the argmax (lowest id on ties). */
    llm_sampler *g;
    REQUIRE(llm_sampler_create(NULL, 4, &g) == 0);
    float tie[4] = {0.5f, 2.0f, 2.0f, -1.0f}, oh[4];
    CHECK_INT_EQ(llm_sampler_probs(g, tie, oh), 0);
    CHECK(oh[0] == 0.0f && oh[1] == 1.0f && oh[2] == 0.0f && oh[3] == 0.0f);
    /* draw: frequencies of weights 1:2:0:5 over 80000 draws. */
    float wts[4] = {1.0f, 2.0f, 0.0f, 5.0f};
    long cnt[4] = {0, 0, 0, 0};
    llm_sampler_reseed(g, 7);
    for (int i = 0; i < 80000; i++) {
        int32_t t = llm_sampler_draw(g, wts);
        REQUIRE(t >= 0 && t < 4);
        cnt[t]++;
    }
    CHECK_INT_EQ(cnt[2], 0);
    double chi = 0.0, want[4] = {10000, 20000, 0, 50000};
    for (int i = 0; i < 4; i++)
        if (want[i] > 0)
            chi += (cnt[i] - want[i]) * (cnt[i] - want[i]) / want[i];
    CHECK(chi < 2.0 + 5.0 * 2.0); /* 2 degrees of freedom */
    float bad[4] = {1.0f, -1.0f, 0.0f, 0.0f}, zero[4] = {0, 0, 0, 0};
    CHECK_INT_EQ(llm_sampler_draw(g, bad), LLM_EINVAL);
    CHECK_INT_EQ(llm_sampler_draw(g, zero), LLM_EINVAL);
    llm_sampler_free(g);
    return 0;
}

/* ---- the joint law of three speculative tokens ------------------------- */

static llm_model *tiny_model(const char *path, uint64_t seed)
{
    synth_spec s = synth_default();
    s.hp.dim = 32;
    s.hp.n_layers = 1;
    s.hp.ffn = 48;
    s.hp.vocab = V;
    s.hp.ctx = 32;
    s.seed = seed;
    REQUIRE(synth_write(path, &s) == 0);
    return synth_open(path, 1);
}

/* law(t0, t1, t2) of a model, from its own logits after prompt, prompt+t0
 * and prompt+t0+t1. */
static void model_joint(llm_model *m, const law *lw, const int32_t *prompt, size_t np,
                        double *joint)
{
    llm_session *s = sc_session(m, 32, 16, 1);
    int32_t seq[16];
    memcpy(seq, prompt, np * sizeof *prompt);
    double p0[V], p1[V], p2[V];
    const float *lg;
    REQUIRE(llm_prefill(s, seq, np, 0, &lg) == 0);
    reference_probs(lw, lg, V, p0);
    for (int a = 0; a < V; a++) {
        seq[np] = a;
        llm_session_reset(s);
        REQUIRE(llm_prefill(s, seq, np + 1, 0, &lg) == 0);
        reference_probs(lw, lg, V, p1);
        for (int b = 0; b < V; b++) {
            seq[np + 1] = b;
            llm_session_reset(s);
            REQUIRE(llm_prefill(s, seq, np + 2, 0, &lg) == 0);
            reference_probs(lw, lg, V, p2);
            for (int c = 0; c < V; c++)
                joint[(a * V + b) * V + c] = p0[a] * p1[b] * p2[c];
        }
    }
    llm_session_free(s);
}

/* Pearson's statistic over cells with expectation >= 5 plus one pooled
 * cell for the rest; *dof gets the degrees of freedom. A count in a cell
 * of zero probability makes it infinite. */
static double chi_square(const long *count, const double *prob, long n, int *dof)
{
    double chi = 0.0, pool_e = 0.0, pool_o = 0.0;
    int bins = 0;
    for (int i = 0; i < CELLS; i++) {
        double e = prob[i] * (double)n;
        if (prob[i] == 0.0 && count[i] > 0)
            return INFINITY;
        if (e >= 5.0) {
            chi += (count[i] - e) * (count[i] - e) / e;
            bins++;
        } else {
            pool_e += e;
            pool_o += (double)count[i];
        }
    }
    if (pool_e > 0.0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        bins++;
    }
    *dof = bins - 1;
    return chi;
}

static int case_joint(const law *lw, int kind, int over_head)
{
    char tp[512], dp[512];
    sc_path(tp, sizeof tp, "sampling_target");
    sc_path(dp, sizeof dp, "sampling_draft");
    llm_model *tm = tiny_model(tp, 1234), *dm = tiny_model(dp, 999);
    static const int32_t plain_prompt[3] = {1, 5, 2};
    static const int32_t rep_prompt[8] = {1, 5, 2, 1, 5, 2, 1, 5};
    int lookup = kind == LLM_DRAFTER_NGRAM || kind == LLM_DRAFTER_HYBRID;
    const int32_t *prompt = lookup ? rep_prompt : plain_prompt;
    size_t np = lookup ? 8 : 3;
    static double want[CELLS], draft_law[CELLS];
    static long count[CELLS];
    model_joint(tm, lw, prompt, np, want);
    model_joint(dm, lw, prompt, np, draft_law);

    llm_session *t = sc_session(tm, 32, 16, 1), *d = sc_session(dm, 32, 16, 2);
    llm_sampler *sp = sc_sampler(tm, lw->temp, lw->top_k, lw->top_p, 42);
    llm_spec_params p = LLM_SPEC_PARAMS_INIT;
    p.k = 2;
    llm_spec *sd;
    llm_drafter *dr = NULL;
    char err[256], hp[512] = "";
    if (kind >= 0) {
        llm_drafter_params dp2 = LLM_DRAFTER_PARAMS_INIT;
        dp2.kind = kind;
        dp2.draft = kind == LLM_DRAFTER_NGRAM || over_head ? NULL : d;
        if (kind == LLM_DRAFTER_BLOCK || over_head) {
            sc_path(hp, sizeof hp, "sampling_head");
            bf_write_for(hp, tm, 8, 11);
            dp2.head_path = hp;
            dp2.target = t;
        }
        REQUIRE(llm_drafter_create(&dp2, &dr, err, sizeof err) == 0);
        p.drafter = dr;
    }
    REQUIRE(llm_spec_create(t, d, &p, &sd, err, sizeof err) == 0);
    llm_generate_params gp = LLM_GENERATE_PARAMS_INIT;
    gp.max_tokens = 4;
    for (long i = 0; i < N_SAMPLES; i++) {
        sc_run r;
        REQUIRE(sc_run_spec(sd, t, sp, prompt, np, &gp, &r) == 0);
        REQUIRE(r.n == 4);
        count[(r.ids[0] * V + r.ids[1]) * V + r.ids[2]]++;
    }
    llm_spec_stats st;
    llm_spec_get_stats(sd, &st);
    int dof = 0, dof_d = 0;
    double chi = chi_square(count, want, N_SAMPLES, &dof);
    double chi_d = chi_square(count, draft_law, N_SAMPLES, &dof_d);
    double bound = dof + 5.0 * sqrt(2.0 * dof);
    fprintf(stderr, "acceptance %.3f over %llu drafts; chi2 %.1f (dof %d, bound %.1f); "
                    "against the draft's law %.1f (dof %d)\n",
            st.acceptance, (unsigned long long)st.drafted, chi, dof, bound, chi_d, dof_d);
    CHECK(chi < bound);
    CHECK(chi_d > dof_d + 5.0 * sqrt(2.0 * dof_d));
    /* Both paths ran: some proposals accepted, some rejected. */
    CHECK(st.accepted > 0 && st.accepted < st.drafted);
    if (lookup) {
        fprintf(stderr, "ngram rounds %llu (drafted %llu, accepted %llu), model rounds %llu\n",
                (unsigned long long)st.by[LLM_DRAFTER_NGRAM].rounds,
                (unsigned long long)st.by[LLM_DRAFTER_NGRAM].drafted,
                (unsigned long long)st.by[LLM_DRAFTER_NGRAM].accepted,
                (unsigned long long)st.by[LLM_DRAFTER_MODEL].rounds);
        CHECK(st.by[LLM_DRAFTER_NGRAM].accepted > 0);
        CHECK(st.by[LLM_DRAFTER_NGRAM].accepted < st.by[LLM_DRAFTER_NGRAM].drafted);
    }
    if (kind == LLM_DRAFTER_HYBRID && !over_head)
        CHECK(st.by[LLM_DRAFTER_MODEL].rounds > 0);
    if (over_head) {
        CHECK(st.by[LLM_DRAFTER_BLOCK].rounds > 0);
        CHECK(st.by[LLM_DRAFTER_MODEL].rounds == 0);
    }
    if (kind == LLM_DRAFTER_BLOCK)
        CHECK(st.by[LLM_DRAFTER_BLOCK].rounds == st.rounds);
    if (hp[0])
        unlink(hp);
    llm_spec_free(sd);
    llm_drafter_free(dr);
    llm_sampler_free(sp);
    llm_session_free(d);
    llm_session_free(t);
    llm_model_free(dm);
    llm_model_free(tm);
    unlink(tp);
    unlink(dp);
    return 0;
}

static int parse_f(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "probs") == 0) {
        case_probs();
        return pm_check_result();
    }
    double t, k, p;
    int over_head = argc == 6 && strcmp(argv[5], "hybrid_head") == 0;
    int kind = over_head ? LLM_DRAFTER_HYBRID : argc == 6 ? llm_drafter_kind_parse(argv[5]) : -1;
    if (argc < 5 || argc > 6 || strcmp(argv[1], "joint") != 0 || parse_f(argv[2], 0.01, 10, &t) ||
        parse_f(argv[3], 0, V, &k) || parse_f(argv[4], 0, 1, &p) || (argc == 6 && kind < 0)) {
        fprintf(stderr, "usage: test_spec_sampling probs | joint T TOP_K TOP_P [DRAFTER|hybrid_head]\n");
        return 2;
    }
    law lw = {(float)t, (int)k, (float)p};
    case_joint(&lw, kind, over_head);
    return pm_check_result();
}
