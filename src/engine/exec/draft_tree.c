/* draft_tree.c — growing a block drafter's token tree and walking its
 * greedy verdict (draft_tree.h). */
#include "draft_tree.h"

#include <math.h>

/* Row r's best `width` candidates, best first, ties to the lower id (as
 * the greedy argmax takes the first maximum), and their softmax
 * probabilities over the whole row. */
static void row_candidates(const float *row, int32_t n_vocab, int32_t width, int32_t *id,
                           double *prob)
{
    int32_t have = 0;
    for (int32_t v = 0; v < n_vocab; v++) {
        float x = row[v];
        if (have == width && !(x > row[id[have - 1]]))
            continue;
        int32_t j = have < width ? have++ : have - 1;
        while (j > 0 && x > row[id[j - 1]]) {
            id[j] = id[j - 1];
            j--;
        }
        id[j] = v;
    }
    double mx = row[id[0]], sum = 0.0;
    for (int32_t v = 0; v < n_vocab; v++)
        sum += exp((double)row[v] - mx);
    for (int32_t j = 0; j < width; j++)
        prob[j] = exp((double)row[id[j]] - mx) / sum;
}

void pm__tree_build(const float *logits, int32_t rows, int32_t n_vocab, int32_t budget,
                    int32_t width, llm_tree *t, int32_t *tok, double *score_sum)
{
    int32_t cand[16][PM_TREE_WIDTH_MAX];
    double prob[16][PM_TREE_WIDTH_MAX];
    double score[LLM_TREE_MAX];
    int32_t next[LLM_TREE_MAX]; /* each node's next child's rank */
    if (rows > 16)
        rows = 16;
    if (width > n_vocab)
        width = n_vocab;
    if (width > PM_TREE_WIDTH_MAX)
        width = PM_TREE_WIDTH_MAX;
    if (width < 1)
        width = 1;
    if (budget > LLM_TREE_MAX - 1)
        budget = LLM_TREE_MAX - 1;
    for (int32_t r = 0; r < rows; r++)
        row_candidates(logits + (size_t)r * (size_t)n_vocab, n_vocab, width, cand[r], prob[r]);
    t->n = 1;
    t->parent[0] = -1;
    t->depth[0] = 0;
    score[0] = 1.0;
    next[0] = 0;
    double total = 0.0;
    while (t->n <= budget) {
        int32_t best = -1;
        double best_s = -1.0;
        for (int32_t i = 0; i < t->n; i++) {
            int32_t d = t->depth[i];
            if (d >= rows || next[i] >= width)
                continue;
            double s = score[i] * prob[d][next[i]];
            if (s > best_s) {
                best_s = s;
                best = i;
            }
        }
        if (best < 0)
            break; /* every node at full depth and width */
        int32_t i = t->n++, d = t->depth[best];
        t->parent[i] = best;
        t->depth[i] = d + 1;
        tok[i] = cand[d][next[best]++];
        score[i] = best_s;
        next[i] = 0;
        total += best_s;
    }
    if (score_sum)
        *score_sum = total;
}

int32_t pm__tree_accept(const llm_tree *t, const int32_t *tok, const int32_t *vgreedy,
                        int32_t *path, int32_t *last)
{
    int32_t node = 0, a = 0;
    path[0] = 0;
    for (;;) {
        int32_t want = vgreedy[node], child = -1;
        /* Children come after their parent; siblings carry distinct tokens. */
        for (int32_t i = node + 1; i < t->n && child < 0; i++)
            if (t->parent[i] == node && tok[i] == want)
                child = i;
        if (child < 0) {
            *last = want;
            return a;
        }
        path[++a] = node = child;
    }
}
