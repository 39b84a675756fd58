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

/* An error line without a prefix (snprintf semantics, never overflows):
 * the form every engine module, backends included, writes its detail in,
 * so none of them depends on the model code for it. */
void llm_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A printable rendering of untrusted bytes (names and strings from a file)
 * for an error line: the first max bytes of s[0..len), then "..." when
 * there were more, every byte outside printable ASCII and the quote ' as
 * '?', so the message stays one line whatever the file holds. buf holds at
 * least max + 4 bytes; returns buf. */
const char *llm__show(const void *s, size_t len, size_t max, char *buf);

#endif
