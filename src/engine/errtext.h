/* errtext.h — the engine's one way of writing a failure's detail line into
 * a caller's buffer: "PREFIX: detail", cut to fit, always NUL-terminated.
 *
 * It lives with the model-file sources (files.cmake) because the readers
 * there (GGUF, llama2.c, tokenizer) are also built alone, into fuzz_gguf.
 */
#ifndef LLM_ERRTEXT_H
#define LLM_ERRTEXT_H

#include <stdarg.h>
#include <stddef.h>

/* Writes prefix then fmt/ap into err[errlen]; nothing when err is NULL or
 * errlen is 0. prefix may be "" (never NULL). */
void llm__verrf(char *err, size_t errlen, const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
