/* errtext.h — the engine's one way of reporting a failure: a status from
 * the one LLM_E* space (phasemark/engine.h, named by llm_strerror, defined
 * in errtext.c) and a detail line written into a caller's buffer:
 * "PREFIX: detail", cut to fit, always NUL-terminated.
 *
 * It lives with the model-file sources (files.cmake) because the readers
 * there (GGUF, llama2.c, tokenizer) are also built alone, into fuzz_gguf
 * and their tests, and return the same codes as the rest of the engine.
 */
#ifndef LLM_ERRTEXT_H
#define LLM_ERRTEXT_H

#include <stdarg.h>
#include <stddef.h>

#include "phasemark/engine.h"

/* Writes prefix then fmt/ap into err[errlen]; nothing when err is NULL or
 * errlen is 0. prefix may be "" (never NULL). */
void llm__verrf(char *err, size_t errlen, const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
