/* nvtx.c — the NVTX backend, through the header-only nvtx3 API.
 *
 * NVTX needs no library: the nvtx3 inline functions call through a table
 * that an NVTX tool fills in at NVTX's own one-time initialization (the tool
 * is named by NVTX_INJECTION64_PATH, or is already in the process and
 * exports InitializeInjectionNvtx2, or is linked statically). With no tool
 * the table stays empty and every NVTX call is a no-op.
 *
 * So "NVTX resolves" means exactly: after nvtxInitialize(), a tool has
 * installed both domain range push and domain range pop. Without that,
 * choosing NVTX would send every range into a no-op, which is the silent
 * failure the one-line diagnostic exists to prevent. The same rule applies
 * under PHASEMARK=1/auto (tried after ROCTX) and PHASEMARK=nvtx.
 *
 * Ranges go into one domain, "phasemark" unless the embedder named another
 * (pm_configure, or the build's PHASEMARK_NVTX_DOMAIN), with ASCII messages.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <stdlib.h>

#ifdef PHASEMARK_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

static nvtxDomainHandle_t domain;

static int nvtx_push(const char *text)
{
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = text;
    return nvtxDomainRangePushEx(domain, &a);
}

static int nvtx_pop(void)
{
    return nvtxDomainRangePop(domain);
}

int pm__nvtx_resolve(pm__backend *out, pm__text *why, const char *domain_name)
{
    nvtxInitialize(NULL);
    /* The table lives in nvtx3's versioned globals; NULL after init means
     * no tool took that entry point. */
    if (!NVTX_VERSIONED_IDENTIFIER(nvtxGlobals).nvtxDomainRangePushEx_impl_fnptr ||
        !NVTX_VERSIONED_IDENTIFIER(nvtxGlobals).nvtxDomainRangePop_impl_fnptr) {
        const char *path = getenv("NVTX_INJECTION64_PATH");
        pm__text_raw(why, "nvtx: ");
        pm__text_raw(why, path && *path ? "injection did not hook domain ranges"
                                        : "no tool attached (NVTX_INJECTION64_PATH unset)");
        return -1;
    }
    domain = nvtxDomainCreateA(domain_name);
    out->push = nvtx_push;
    out->pop = nvtx_pop;
    out->name = "nvtx";
    return 0;
}

#else

int pm__nvtx_resolve(pm__backend *out, pm__text *why, const char *domain_name)
{
    (void)out;
    (void)domain_name;
    pm__text_raw(why, "nvtx: not built (no nvtx3 headers)");
    return -1;
}

#endif
