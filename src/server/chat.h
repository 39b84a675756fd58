/* chat.h — turning chat messages into one prompt.
 *
 * A GGUF file may carry its chat template as Jinja text
 * (tokenizer.chat_template). We do not run Jinja; we recognize the handful
 * of simple, widespread formats by their marker strings and render them
 * with fixed code. Anything else (or no template) gets the documented
 * plain default (docs/server.md):
 *
 *     {system}\n\n            (only when a system message exists)
 *     User: {content}\n
 *     Assistant: {content}\n
 *     ...
 *     Assistant:
 *
 * Each format also names the text that ends an assistant turn, used as an
 * implicit stop string so a reply does not run on into the next turn.
 * Pure functions; thread-safe.
 */
#ifndef PM_SERVER_CHAT_H
#define PM_SERVER_CHAT_H

#include <stddef.h>

#include "text.h"

typedef enum pms_chat_format {
    PMS_CHAT_PLAIN = 0, /* the default above */
    PMS_CHAT_CHATML,    /* <|im_start|>role\n...<|im_end|>\n */
    PMS_CHAT_LLAMA2,    /* [INST] <<SYS>>...<</SYS>> ... [/INST] */
    PMS_CHAT_LLAMA3,    /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    PMS_CHAT_ZEPHYR     /* <|user|>\n...</s>\n */
} pms_chat_format;

typedef enum pms_chat_role { PMS_ROLE_SYSTEM, PMS_ROLE_USER, PMS_ROLE_ASSISTANT } pms_chat_role;

typedef struct pms_chat_msg {
    pms_chat_role role;
    const char *content; /* UTF-8, len bytes, need not be NUL-terminated */
    size_t len;
} pms_chat_msg;

/* The format a Jinja template text is recognized as (len bytes; NULL or
 * unrecognized: PMS_CHAT_PLAIN). */
pms_chat_format pms_chat_detect(const char *tmpl, size_t len);

/* "plain", "chatml", "llama2", "llama3", "zephyr". */
const char *pms_chat_format_name(pms_chat_format f);

/* Renders n messages followed by the opening of the assistant's turn into
 * out (appended). 0, or -1 when out's limit is reached. */
int pms_chat_render(pms_chat_format f, const pms_chat_msg *msgs, size_t n, pms_buf *out);

/* The text that ends an assistant turn in format f (an implicit stop
 * string); "" when the model's end-of-sequence token does that job. */
const char *pms_chat_end_of_turn(pms_chat_format f);

#endif
