/* gguf_copy.h — a test model with a chat template (see gguf_copy.c). */
#ifndef PM_SERVER_TEST_GGUF_COPY_H
#define PM_SERVER_TEST_GGUF_COPY_H

/* Writes dst: the f32 GGUF model src plus tokenizer.chat_template = tmpl.
 * 0, or -1 with a line on stderr. */
int gguf_copy_with_template(const char *src, const char *dst, const char *tmpl);

#endif
