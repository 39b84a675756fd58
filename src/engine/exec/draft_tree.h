/* draft_tree.h — the shape of a block drafter's token tree (issue 17).
 *
 * The block head scores every position of a block in one forward, row r
 * proposing the token at depth r + 1 (the root, depth 0, being the last
 * committed token). Its rows do not condition on one another, so a node's
 * children at depth d + 1 are always drawn from row d's candidates,
 * whoever the parent is. The tree is grown best first: a node's score is
 * the product of the head's probabilities along its path (the chance,
 * were the rows independent and the head calibrated, that the target
 * accepts the whole path), and each step adds the highest-scoring child
 * not yet in the tree (a node's children are its row's candidates taken in
 * rank order, so each node's next child is its next-ranked one). The sum
 * of the scores, the expected accepted length under that model, is then
 * the largest any tree of that many nodes reaches (a child never scores
 * above its parent, so the best nodes always form a tree), and a node's
 * first child is always its row's argmax: the chain's first proposal is
 * always in it. Ties go to the node added first, so the shape is a pure
 * function of the logits.
 */
#ifndef LLM_DRAFT_TREE_H
#define LLM_DRAFT_TREE_H

#include <stdint.h>

#include "tree.h"

/* Most candidates kept per row: a wider tree than 8 children per node
 * would spend the budget on tails the head gives next to nothing. */
#define PM_TREE_WIDTH_MAX 8

/* Builds a tree of 1 + min(budget, LLM_TREE_MAX - 1) nodes from `rows`
 * rows of head logits ([rows][n_vocab]; rows 1..16): node 0 the root (its
 * token is the caller's; tok[0] is left alone), node i's token tok[i] for
 * i >= 1, no node deeper than rows. Candidates per row: the width best
 * (1..PM_TREE_WIDTH_MAX), the first maximum first as argmax ties go.
 * *score_sum: the sum of the non-root nodes' scores (may be NULL). Pure,
 * allocation-free. */
void pm__tree_build(const float *logits, int32_t rows, int32_t n_vocab, int32_t budget,
                    int32_t width, llm_tree *t, int32_t *tok, double *score_sum);

/* Greedy acceptance over a verified tree: from the root, follow the child
 * whose token is the target's argmax of the current node (vgreedy[i], one
 * per node) while one exists. path[0..a] receives the accepted nodes, root
 * first; *last the target's token after path[a]. Returns a. Pure. */
int32_t pm__tree_accept(const llm_tree *t, const int32_t *tok, const int32_t *vgreedy,
                        int32_t *path, int32_t *last);

#endif
