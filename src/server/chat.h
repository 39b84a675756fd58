/* chat.h — turning chat messages into one prompt.
 *
 * A GGUF file carries its chat template as Jinja text
 * (tokenizer.chat_template). We do not run Jinja: we recognize the
 * published templates of the common families by a fingerprint (pms_chat_
 * detect) and render each with fixed code that gives, byte for byte, what
 * Jinja gives for that template with add_generation_prompt set — the text
 * Hugging Face's apply_chat_template would produce (tests/server/chat/
 * holds the template texts and checks this against Jinja itself when
 * python3-jinja2 is installed).
 *
 * A template that is present but not recognized is refused at start-up
 * (the server names it and asks for --chat-template NAME) rather than
 * guessed at; a model without a template gets the documented plain
 * default (docs/server.md):
 *
 *     {system}\n\n            (only when a system message exists)
 *     User: {content}\n
 *     Assistant: {content}\n
 *     ...
 *     Assistant:
 *
 * Each format names the special tokens it writes as text (BOS and the end
 * of a turn), which the server checks against the vocabulary and uses as
 * stop tokens. Pure functions; thread-safe.
 */
#ifndef PM_SERVER_CHAT_H
#define PM_SERVER_CHAT_H

#include <stddef.h>

#include "text.h"

typedef enum pms_chat_format {
    PMS_CHAT_UNKNOWN = -1, /* a template we do not render */
    PMS_CHAT_PLAIN = 0,    /* the default above */
    PMS_CHAT_CHATML,       /* <|im_start|>role\n...<|im_end|>\n (OpenHermes) */
    PMS_CHAT_QWEN25,       /* ChatML with Qwen 2.5's default system message */
    PMS_CHAT_LLAMA3,       /* Llama 3 Instruct: headers, trimmed content, <|eot_id|> */
    PMS_CHAT_LLAMA31,      /* Llama 3.1/3.3: a system header with a fixed date */
    PMS_CHAT_LLAMA32,      /* Llama 3.2: the same with today's date */
    PMS_CHAT_MISTRAL_V0,   /* Mistral 7B Instruct v0.1/v0.2 without a system role */
    PMS_CHAT_MISTRAL_V1,   /* v0.1/v0.2 " [INST] ...": system in the first user turn */
    PMS_CHAT_MISTRAL_V3,   /* v0.3 "[INST] ...[/INST]": system in the last user turn */
    PMS_CHAT_PHI3,         /* Phi-3 mini: <|system|>/<|user|>/<|assistant|> ... <|end|> */
    PMS_CHAT_PHI35,        /* Phi-3.5 mini: the same, an empty system message dropped */
    PMS_CHAT_PHI3_V0,      /* the first Phi-3 mini release: BOS, no system role */
    PMS_CHAT_GEMMA,        /* Gemma 1: <start_of_turn>user ... <end_of_turn>, model role */
    PMS_CHAT_GEMMA2        /* Gemma 2: the same after a written BOS */
} pms_chat_format;

#define PMS_CHAT_N_FORMATS (PMS_CHAT_GEMMA2 + 1)

typedef enum pms_chat_role { PMS_ROLE_SYSTEM, PMS_ROLE_USER, PMS_ROLE_ASSISTANT } pms_chat_role;

typedef struct pms_chat_msg {
    pms_chat_role role;
    const char *content; /* UTF-8, len bytes, need not be NUL-terminated */
    size_t len;
} pms_chat_msg;

/* The format a Jinja template text is recognized as (len bytes): NULL is
 * PMS_CHAT_PLAIN (no template); a text matching no fingerprint is
 * PMS_CHAT_UNKNOWN, and then *family (when not NULL) names the family it
 * resembles ("Llama 3", "ChatML", ...) or is NULL. */
pms_chat_format pms_chat_detect(const char *tmpl, size_t len, const char **family);

/* The --chat-template name of f ("llama3.1", "gemma2", ...; "unknown"
 * for PMS_CHAT_UNKNOWN), and the format a name means (PMS_CHAT_UNKNOWN
 * when none). */
const char *pms_chat_format_name(pms_chat_format f);
pms_chat_format pms_chat_format_parse(const char *name);

/* Every format name, comma-separated, for usage text and error lines. */
const char *pms_chat_format_names(void);

/* The special tokens f writes as text: its BOS ("" when the template
 * writes none), the token that ends an assistant turn, used as a stop
 * token ("" when the model's EOS does that job), and an implicit stop
 * string for text-only formats ("" when none). */
const char *pms_chat_bos_text(pms_chat_format f);
const char *pms_chat_end_of_turn(pms_chat_format f);
const char *pms_chat_stop_text(pms_chat_format f);

/* Whether f writes today's date (pms_chat_render's date). */
int pms_chat_needs_date(pms_chat_format f);

/* The text to tokenize for a prompt rendered in format f, when it is not
 * the prompt itself: Phi-3's vocabulary marks its role and end tokens
 * rstrip (Hugging Face's tokenizer, and llama.cpp for Phi-3 models, drop
 * the whitespace after them), so for the Phi-3 formats the ASCII
 * whitespace after <|system|>, <|user|>, <|assistant|>, <|end|> and </s>
 * is left out. Returns 1 with the text appended to out, 0 when the prompt
 * is used as it is (out untouched), -1 when out's limit is reached. */
int pms_chat_tokenizer_text(pms_chat_format f, const char *text, size_t len, pms_buf *out);

/* Renders n messages followed by the opening of the assistant's turn into
 * out (appended). date is "DD Mon YYYY" for formats that need one (NULL:
 * the templates' own fallback, "26 Jul 2024"). Returns 0; -1 when out's
 * limit is reached; -2 when the conversation is one the template refuses
 * (roles that do not alternate, a system role it lacks), with the
 * template's reason in err. */
int pms_chat_render(pms_chat_format f, const char *date, const pms_chat_msg *msgs, size_t n, pms_buf *out,
                    char *err, size_t errlen);

#endif
