/* test_engine_kernelsets — which CPU kernel set a backend runs, and the
 * PHASEMARK_ENGINE_KERNELS switch that forces one.
 *
 * The expected set is worked out here from the sets' own constructors (the
 * longest prefix of scalar, avx2, avx2+vnni, avx512 this CPU accepts), so
 * the test holds on any x86-64 host: a set the CPU lacks must fail the
 * backend's creation with its one line, never fall back silently.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kernels.h"
#include "phasemark/engine.h"
#include "pm_check.h"

static const char *const ladder[] = {"scalar", "avx2", "avx2+vnni", "avx512"};

/* How many sets of the ladder this CPU runs (1..4). */
static int sets_supported(void)
{
    llm_kernels k;
    llm_kernels_scalar(&k);
    if (llm_kernels_avx2(&k) != 0)
        return 1;
    if (llm_kernels_vnni(&k) != 0)
        return 2;
    if (llm_kernels_avx512(&k) != 0)
        return 3;
    return 4;
}

/* Creates a backend under PHASEMARK_ENGINE_KERNELS=value (NULL: unset);
 * returns its status, with the set's name or the error line in out. */
static int create_under(const char *value, int simd, char *out, size_t cap)
{
    if (value)
        setenv("PHASEMARK_ENGINE_KERNELS", value, 1);
    else
        unsetenv("PHASEMARK_ENGINE_KERNELS");
    llm_backend *be = (llm_backend *)(void *)&be; /* must be reset to NULL on failure */
    char err[256] = "";
    int rc = llm_cpu_backend_create(1, simd, &be, err, sizeof err);
    if (rc == 0) {
        snprintf(out, cap, "%s", llm_cpu_backend_kernels(be));
        be->ops->destroy(be);
    } else {
        CHECK(be == NULL);
        snprintf(out, cap, "%s", err);
    }
    return rc;
}

int main(void)
{
    int have = sets_supported();
    char got[256], want[256];

    /* Unset, empty and "auto": the best set. */
    CHECK_INT_EQ(create_under(NULL, 1, got, sizeof got), 0);
    CHECK_STR_EQ(got, ladder[have - 1]);
    CHECK_INT_EQ(create_under("", 1, got, sizeof got), 0);
    CHECK_STR_EQ(got, ladder[have - 1]);
    CHECK_INT_EQ(create_under("auto", 1, got, sizeof got), 0);
    CHECK_STR_EQ(got, ladder[have - 1]);

    /* Every set by name: that set, or the line naming the missing one. */
    for (int i = 0; i < 4; i++) {
        int rc = create_under(ladder[i], 1, got, sizeof got);
        if (i < have) {
            CHECK_INT_EQ(rc, 0);
            CHECK_STR_EQ(got, ladder[i]);
        } else {
            CHECK_INT_EQ(rc, LLM_EUNSUP);
            snprintf(want, sizeof want,
                     "cpu backend: PHASEMARK_ENGINE_KERNELS=%s: this CPU cannot run the %s kernels",
                     ladder[i], ladder[have]);
            CHECK_STR_EQ(got, want);
        }
    }

    /* simd 0 is the scalar set whatever the switch says. */
    CHECK_INT_EQ(create_under("avx512", 0, got, sizeof got), 0);
    CHECK_STR_EQ(got, "scalar");

    /* A name that is no set, and near misses of real ones. */
    CHECK_INT_EQ(create_under("avx513", 1, got, sizeof got), LLM_EINVAL);
    CHECK_STR_EQ(got, "cpu backend: PHASEMARK_ENGINE_KERNELS='avx513' names no kernel set "
                      "(auto, scalar, avx2, avx2+vnni, avx512)");
    CHECK_INT_EQ(create_under("AVX2", 1, got, sizeof got), LLM_EINVAL);
    CHECK_INT_EQ(create_under("vnni", 1, got, sizeof got), LLM_EINVAL);
    CHECK_INT_EQ(create_under("avx2 ", 1, got, sizeof got), LLM_EINVAL);

    unsetenv("PHASEMARK_ENGINE_KERNELS");
    return pm_check_result();
}
