/* chat_render.c — pm_chat_render, the chat renderer on the command line,
 * for tests/server/chat_jinja.py, which compares it with Jinja.
 *
 *   pm_chat_render detect FILE
 *       prints the format FILE's template text is recognized as
 *       ("unknown" when none)
 *   pm_chat_render render FORMAT DATE ROLE CONTENT [ROLE CONTENT ...]
 *       writes the prompt to stdout (DATE "-": the format's fallback);
 *       a conversation the template refuses: its reason on stdout, exit 3
 *
 * Exit 0 ok, 1 failure, 2 usage, 3 refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "text.h"

static int detect(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "pm_chat_render: cannot open %s\n", path);
        return 1;
    }
    pms_buf b;
    pms_buf_init(&b, 0);
    char chunk[4096];
    size_t got;
    int rc = 0;
    while (rc == 0 && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc = pms_buf_append(&b, chunk, got);
    fclose(f);
    if (rc) {
        pms_buf_free(&b);
        return 1;
    }
    printf("%s\n", pms_chat_format_name(pms_chat_detect(b.p ? b.p : "", b.n, NULL)));
    pms_buf_free(&b);
    return 0;
}

static int render(int argc, char **argv)
{
    pms_chat_format f = pms_chat_format_parse(argv[0]);
    if (f == PMS_CHAT_UNKNOWN || (argc - 2) % 2) {
        fprintf(stderr, "pm_chat_render: bad format or an odd role/content list\n");
        return 2;
    }
    const char *date = strcmp(argv[1], "-") ? argv[1] : NULL;
    size_t n = (size_t)(argc - 2) / 2;
    pms_chat_msg *msgs = calloc(n ? n : 1, sizeof *msgs);
    if (!msgs)
        return 1;
    for (size_t i = 0; i < n; i++) {
        const char *role = argv[2 + 2 * i], *content = argv[3 + 2 * i];
        if (!strcmp(role, "system"))
            msgs[i].role = PMS_ROLE_SYSTEM;
        else if (!strcmp(role, "user"))
            msgs[i].role = PMS_ROLE_USER;
        else if (!strcmp(role, "assistant"))
            msgs[i].role = PMS_ROLE_ASSISTANT;
        else {
            fprintf(stderr, "pm_chat_render: unknown role %s\n", role);
            free(msgs);
            return 2;
        }
        msgs[i].content = content;
        msgs[i].len = strlen(content);
    }
    pms_buf out;
    pms_buf_init(&out, 0);
    char why[256];
    int rc = pms_chat_render(f, date, msgs, n, &out, why, sizeof why);
    if (rc == 0)
        fwrite(out.p ? out.p : "", 1, out.n, stdout);
    else if (rc == -2)
        fputs(why, stdout);
    pms_buf_free(&out);
    free(msgs);
    return rc == 0 ? 0 : rc == -2 ? 3 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "detect"))
        return detect(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "render"))
        return render(argc - 2, argv + 2);
    fprintf(stderr, "usage: pm_chat_render detect FILE | render FORMAT DATE [ROLE CONTENT]...\n");
    return 2;
}
