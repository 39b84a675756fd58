/* fuzz_trace.c — libFuzzer target over the tools' text decoders: the first
 * byte picks marker CSV, GPU CSV or Chrome JSON; whatever loads is then
 * checked, reported and drawn, so the consumers see odd traces too. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void consume(const pmt_trace *t, const pmt_gpu *g)
{
    FILE *null = fopen("/dev/null", "w");
    if (!null)
        return;
    pmt_projection p;
    pmt_report_opts o = {0};
    pmt_check(t, NULL, 0, null, null);
    if (pmt_project(t, g, &p) == 0) {
        pmt_report(t, &p, &o, null);
        pmt_projection_free(&p);
    }
    pmt_svg(t, g, null);
    pmt_html(t, g, null);
    pmt_trace_write_csv(t, null);
    pmt_trace_write_json(t, null);
    pmt_clock_write_csv(t, null);
    pmt_clock_print(t, null, "");
    pmt_clock_warn(t, null, "");
    fclose(null);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char err[256];
    pmt_trace t;
    pmt_gpu g;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    int rc;
    switch (data[0] % 4) {
    case 0: rc = pmt_trace_load_csv_text(&t, "f", text, len, err, sizeof err); break;
    case 1: rc = pmt_trace_load_json_text(&t, "f", text, len, err, sizeof err); break;
    case 2: rc = pmt_gpu_load_text(&g, "f", text, len, err, sizeof err); break;
    default: rc = pmt_raw_load_mem(&t, "f", text, len, err, sizeof err); break;
    }
    if (rc >= 0)
        consume(&t, &g);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return 0;
}
