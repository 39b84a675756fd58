/* fuzz_readers.c — libFuzzer target over the readers of other profilers'
 * files: an input that starts with SQLite's header is opened as a
 * database image (rocpd or Nsight Systems export), anything else is read
 * as a torch.profiler trace; whatever loads is checked, projected and
 * reported. Seeds: tests/fuzz/corpus/readers (the test fixtures). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pmt_trace t;
    pmt_gpu g;
    char err[256];
    int has_gpu = 0, rc;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    if (size >= 16 && memcmp(data, "SQLite format 3", 16) == 0)
        rc = pmt_sqlite_load_mem(&t, &g, &has_gpu, "fuzz", data, size, err, sizeof err);
    else
        rc = pmt_torch_load_text(&t, &g, &has_gpu, "fuzz", (const char *)data, size, err, sizeof err);
    if (rc == 0) {
        FILE *null = fopen("/dev/null", "w");
        pmt_projection p;
        pmt_report_opts o = {0};
        if (null) {
            pmt_check(&t, NULL, 0, null, null);
            if (pmt_project(&t, &g, &p) == 0) {
                pmt_report(&t, &p, &o, null);
                pmt_projection_free(&p);
            }
            fclose(null);
        }
    }
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    return 0;
}
