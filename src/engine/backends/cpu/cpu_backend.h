/* cpu_backend.h — the CPU backend's entry points beyond backend.h.
 *
 * A CPU backend computes with the types its kernel set has entries for
 * (kernels.h, llm_type_kernels): the five built-in types, plus whatever a
 * caller adds at creation. Adding a type to the engine is one entry in a
 * type table (quant.h, llm_type_traits) and, for the CPU, one entry here
 * with its kernels; a test does exactly that with a toy type
 * (tests/engine/test_engine_types.c), handing both to
 * llm_model_open_hooked (model.h).
 */
#ifndef LLM_CPU_BACKEND_H
#define LLM_CPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

struct llm_backend;

/* llm_cpu_backend_create (backend.h) whose kernel table also holds the
 * n_extra entries at extra (copied), for types that have no built-in
 * kernels. LLM_EINVAL (err says which) when an entry lacks its matvec or
 * dequant, names a type that already has kernels, or the table would hold
 * more than LLM_KERNEL_TYPES_MAX types. Same ownership as
 * llm_cpu_backend_create. */
int llm_cpu_backend_create_with(int32_t n_threads, int simd, const llm_type_kernels *extra,
                                size_t n_extra, struct llm_backend **out, char *err,
                                size_t errlen);

#endif
