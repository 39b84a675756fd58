/* test_cupti.c — `phasemark capture --kernels` of cuda_prog on a GPU:
 * two kernels named pm_fill and two copies, each with a launch call found
 * by correlation, projected onto the ranges cuda_prog opened around them
 * (expected totals are the durations in the kernel and copy CSVs, summed
 * by which range cuda_prog launched each in). Exits 77 without a GPU.
 * usage: test_cupti TOOL PROG
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pm_check.h"
#include "pm_child.h"
#include "pmt.h"

static uint64_t dur(const pmt_activity *a)
{
    return a->end - a->start;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    char dir[] = "/tmp/pm-cupti-test.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    static pm_child_result r;
    char *cap[] = {argv[1], "capture", "--kernels", "-o", dir, "--", argv[2], NULL};
    REQUIRE(pm_child_exec(cap, NULL, 120000, &r) == 0);
    if (r.exited && r.exit_code == 1 && strstr(r.err, "exited with status 77")) {
        pmt_remove_tree(dir);
        PM_SKIP("no CUDA driver or GPU here");
    }
    if (!pm_child_ok(&r))
        fprintf(stderr, "%s\n", r.err);
    REQUIRE(pm_child_ok(&r));
    char path[512], err[300];
    pmt_trace t;
    pmt_gpu g;
    pmt_trace_init(&t);
    pmt_gpu_init(&g);
    snprintf(path, sizeof path, "%s/marker_api_trace.csv", dir);
    REQUIRE(pmt_trace_load(&t, path, err, sizeof err) == 0);
    const char *files[] = {"kernel_trace.csv", "memory_copy_trace.csv", "cuda_api_trace.csv"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (pmt_gpu_load(&g, path, err, sizeof err) < 0)
            fprintf(stderr, "%s\n", err);
    }
    REQUIRE(t.n == 2);
    REQUIRE(g.nact == 4);
    const pmt_activity *k[2] = {NULL, NULL}, *c[2] = {NULL, NULL};
    for (size_t i = 0, nk = 0, nc = 0; i < g.nact; i++) {
        if (g.act[i].kind == PMT_ACT_KERNEL && nk < 2)
            k[nk++] = &g.act[i];
        else if (nc < 2)
            c[nc++] = &g.act[i];
    }
    REQUIRE(k[1] && c[1]);
    CHECK_STR_EQ(k[0]->name, "pm_fill");
    CHECK_STR_EQ(c[0]->name, "MEMORY_COPY_HOST_TO_DEVICE");
    CHECK_STR_EQ(c[1]->name, "MEMORY_COPY_DEVICE_TO_HOST");
    if (k[0]->start > k[1]->start) {
        const pmt_activity *tmp = k[0];
        k[0] = k[1], k[1] = tmp;
    }
    /* Same clock: the kernels ran after their ranges began. */
    CHECK(k[0]->start >= t.r[0].start);
    CHECK(k[1]->start >= t.r[1].start);
    pmt_projection p;
    REQUIRE(pmt_project(&t, &g, &p) == 0);
    CHECK_INT_EQ(p.nmatched, 4);
    CHECK_INT_EQ(p.ncovered, 3);
    CHECK_U64_EQ(p.total_ns, dur(k[0]) + dur(k[1]) + dur(c[0]) + dur(c[1]));
    CHECK_U64_EQ(p.range_gpu_ns[0], dur(c[0]) + dur(k[0])); /* prefill */
    CHECK_U64_EQ(p.range_gpu_ns[1], dur(k[1]));             /* decode */
    CHECK_U64_EQ(p.uncovered_ns, dur(c[1]));
    pmt_projection_free(&p);
    pmt_gpu_free(&g);
    pmt_trace_free(&t);
    pmt_remove_tree(dir);
    return pm_check_result();
}
