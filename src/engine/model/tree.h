/* tree.h — the shape of a tree verify: one target forward whose rows are
 * the nodes of a token tree rather than a chain.
 *
 * Node 0 is the root: the last committed token, at the forward's pos0.
 * Every other node's parent comes before it (0 <= parent[i] < i), so a
 * node at depth d stands at position pos0 + d and its ancestors are the
 * tokens before it. Row i of the forward is computed exactly as the decode
 * step at pos0 + depth[i] would be after the committed context and then
 * node i's ancestors in depth order: RoPE at that position, attention over
 * the cache rows 0..pos0-1 and then the ancestors' rows, in that order
 * (forward.h). The forward writes row i's keys and values into cache slot
 * pos0 + i; once a path is accepted the caller moves its rows to the
 * positions they were computed for (llm_session_keep_rows), which are
 * then bit for bit the decode step's.
 *
 * Only the CPU backend reads a tree; the session refuses one where a local
 * shard is on another backend (a daemon refuses it itself). Every span of
 * a split reads it alike, a daemon's from the wire (docs/wire.md, tag 31),
 * so the boundary activations between spans are the nodes' rows.
 */
#ifndef LLM_TREE_H
#define LLM_TREE_H

#include <stddef.h>
#include <stdint.h>

/* Rows of one tree: the root and up to 32 proposed nodes (the CPU
 * backend's exact row loop goes to 64). */
#define LLM_TREE_MAX 33

typedef struct llm_tree {
    int32_t n;                    /* nodes = forward rows, 1..LLM_TREE_MAX */
    int32_t parent[LLM_TREE_MAX]; /* parent[0] = -1; else 0..i-1 */
    int32_t depth[LLM_TREE_MAX];  /* depth[0] = 0; depth[parent[i]] + 1 */
} llm_tree;

/* 0 when t is a tree as above (n in range, parents before children,
 * depths consistent), else -1. Pure. */
static inline int llm_tree_valid(const llm_tree *t)
{
    if (!t || t->n < 1 || t->n > LLM_TREE_MAX || t->parent[0] != -1 || t->depth[0] != 0)
        return -1;
    for (int32_t i = 1; i < t->n; i++)
        if (t->parent[i] < 0 || t->parent[i] >= i || t->depth[i] != t->depth[t->parent[i]] + 1)
            return -1;
    return 0;
}

/* The nodes on the path from the root to node i, root first: path[0..d]
 * with d = depth[i]. Returns d. */
static inline int32_t llm_tree_path(const llm_tree *t, int32_t i, int32_t *path)
{
    int32_t d = t->depth[i];
    for (int32_t j = d; j >= 0; j--, i = t->parent[i])
        path[j] = i;
    return d;
}

#endif
