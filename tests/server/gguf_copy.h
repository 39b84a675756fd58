/* gguf_copy.h — a test model with a chat template (see gguf_copy.c). */
#ifndef PM_SERVER_TEST_GGUF_COPY_H
#define PM_SERVER_TEST_GGUF_COPY_H

#include <stdint.h>

/* Writes dst: the f32 GGUF model src plus tokenizer.chat_template = tmpl.
 * 0, or -1 with a line on stderr. */
int gguf_copy_with_template(const char *src, const char *dst, const char *tmpl);

/* The same with vocabulary entry id renamed to piece and made a control
 * token. */
int gguf_copy_with_control(const char *src, const char *dst, const char *tmpl, int32_t id, const char *piece);

#endif
