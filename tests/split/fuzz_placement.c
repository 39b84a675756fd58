/* fuzz_placement — libFuzzer target for the placement parser
 * (src/engine/split_spec.c). The first byte picks the layer count (1..64),
 * the rest is the placement text. Every input must either be refused with
 * one line starting "placement: " or give shards that tile the layers in
 * order with NUL-terminated fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "split.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const llm_placement *pl, int32_t n_layers)
{
    int32_t next = 0;
    if (pl->n < 1 || pl->n > LLM_SPLIT_MAX_SHARDS)
        abort();
    for (int i = 0; i < pl->n; i++) {
        const llm_shard_spec *sh = &pl->shard[i];
        if (sh->first != next || sh->last < sh->first || sh->last >= n_layers)
            abort();
        if (!memchr(sh->backend, 0, sizeof sh->backend) || !memchr(sh->address, 0, sizeof sh->address) ||
            !memchr(sh->token, 0, sizeof sh->token) || !memchr(sh->exe, 0, sizeof sh->exe))
            abort();
        if (sh->kind != LLM_SHARD_LOCAL && sh->timeout_ms < 1)
            abort();
        next = sh->last + 1;
    }
    if (next != n_layers)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    int32_t n_layers = 1 + data[0] % 64;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    llm_placement pl;
    char err[256];
    if (llm_placement_parse(text, n_layers, &pl, err, sizeof err) == 0)
        check(&pl, n_layers);
    else if (strncmp(err, "placement: ", 11) != 0 || strchr(err, '\n'))
        abort();
    free(text);
    return 0;
}
