/* svg.c — an SVG timeline: one lane per process and thread, nested ranges
 * stacked by depth and coloured by kind (layer ranges by mode), a GPU lane
 * when activities are given. Every shape carries a <title>, which browsers
 * show as a tooltip. Time runs left to right over the trace's span.
 */
#include <stdlib.h>
#include <string.h>

#include "pmt.h"

#define SVG_LEFT 190.0   /* px for lane labels */
#define SVG_WIDTH 1400.0 /* px for time */
#define SVG_ROW 16.0     /* px per nesting level */
#define SVG_DEPTH 32     /* deeper ranges are drawn at this depth */

typedef struct lane {
    uint32_t pid, tid;
    int depth; /* deepest level used */
    double y;
} lane;

static const char *color_of(const pmt_range *r)
{
    pmt_name nm;
    if (pmt_name_parse(r->name, &nm, NULL, 0) < 0)
        return "#ff00ff";
    switch (nm.kind) {
    case PMT_K_PREFILL: return "#4e79a7";
    case PMT_K_DECODE: return "#59a14f";
    case PMT_K_SPEC_DECODE: return "#f28e2b";
    case PMT_K_DRAFT: return "#edc948";
    case PMT_K_LAYER_RANGE:
        return strcmp(nm.mode, "exact") == 0 ? "#76b7b2" : strcmp(nm.mode, "verify") == 0 ? "#e15759"
                                                                                           : "#8cd17d";
    default: return "#bab0ac";
    }
}

static void rect(FILE *f, double x, double y, double w, const char *fill, const char *title,
                 uint64_t dur)
{
    fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
               "stroke=\"#333\" stroke-width=\"0.3\"><title>",
            x, y, w < 0.5 ? 0.5 : w, SVG_ROW - 2, fill);
    pmt_xml_put(f, title);
    fprintf(f, " (%.3f us)</title></rect>\n", dur / 1e3);
}

/* Depth of each range within its thread (nesting by containment). */
static void depths(const pmt_trace *t, const size_t *ord, size_t n, int *depth)
{
    size_t stack[SVG_DEPTH];
    int d = 0;
    for (size_t i = 0; i < n; i++) {
        const pmt_range *r = &t->r[ord[i]];
        if (i && (t->r[ord[i - 1]].pid != r->pid || t->r[ord[i - 1]].tid != r->tid))
            d = 0;
        while (d && t->r[stack[d - 1]].end <= r->start)
            d--;
        depth[i] = d;
        if (d < SVG_DEPTH - 1)
            stack[d++] = ord[i];
    }
}

int pmt_svg(const pmt_trace *t, const pmt_gpu *g, FILE *f)
{
    size_t *ord = malloc((t->n ? t->n : 1) * sizeof *ord);
    int *depth = malloc((t->n ? t->n : 1) * sizeof *depth);
    lane *lanes = malloc((t->n ? t->n : 1) * sizeof *lanes);
    size_t n = 0, nl = 0;
    uint64_t t0 = UINT64_MAX, t1 = 0;
    if (!ord || !depth || !lanes) {
        free(ord), free(depth), free(lanes);
        return -1;
    }
    for (size_t i = 0; i < t->n; i++) {
        const pmt_range *r = &t->r[i];
        if ((r->flags & (PMT_F_OPEN | PMT_F_ORPHAN)) || r->start > r->end)
            continue;
        ord[n++] = i;
        t0 = r->start < t0 ? r->start : t0;
        t1 = r->end > t1 ? r->end : t1;
    }
    for (size_t i = 0; g && i < g->nact; i++) {
        t0 = g->act[i].start < t0 ? g->act[i].start : t0;
        t1 = g->act[i].end > t1 ? g->act[i].end : t1;
    }
    pmt_trace_sort_nested(t, ord, n);
    depths(t, ord, n, depth);
    double y = 30;
    for (size_t i = 0; i < n; i++) {
        const pmt_range *r = &t->r[ord[i]];
        if (!nl || lanes[nl - 1].pid != r->pid || lanes[nl - 1].tid != r->tid)
            lanes[nl++] = (lane){r->pid, r->tid, 0, 0};
        if (depth[i] > lanes[nl - 1].depth)
            lanes[nl - 1].depth = depth[i];
    }
    for (size_t i = 0; i < nl; i++) {
        lanes[i].y = y;
        y += (lanes[i].depth + 1) * SVG_ROW + 10;
    }
    double gpu_y = y;
    if (g && g->nact)
        y += SVG_ROW + 10;
    double span = t1 > t0 ? (double)(t1 - t0) : 1;
    double scale = SVG_WIDTH / span;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n"
               "<text x=\"4\" y=\"16\">phasemark timeline: %.3f ms</text>\n",
            SVG_LEFT + SVG_WIDTH + 10, y + 10, span / 1e6);
    for (size_t i = 0; i < nl; i++) {
        const char *pn = pmt_trace_label_of(t, lanes[i].pid, 0);
        const char *tn = pmt_trace_label_of(t, lanes[i].pid, lanes[i].tid);
        fprintf(f, "<text x=\"4\" y=\"%.1f\">", lanes[i].y + 11);
        pmt_xml_put(f, pn ? pn : "pid");
        fprintf(f, " %u / ", lanes[i].pid);
        pmt_xml_put(f, tn ? tn : "tid");
        fprintf(f, " %u</text>\n", lanes[i].tid);
    }
    size_t li = 0;
    for (size_t i = 0; i < n; i++) {
        const pmt_range *r = &t->r[ord[i]];
        while (lanes[li].pid != r->pid || lanes[li].tid != r->tid)
            li++;
        rect(f, SVG_LEFT + (double)(r->start - t0) * scale, lanes[li].y + depth[i] * SVG_ROW,
             (double)(r->end - r->start) * scale, color_of(r), r->name, r->end - r->start);
    }
    if (g && g->nact)
        fprintf(f, "<text x=\"4\" y=\"%.1f\">GPU activity</text>\n", gpu_y + 11);
    for (size_t i = 0; g && i < g->nact; i++) {
        const pmt_activity *a = &g->act[i];
        uint64_t d = a->end > a->start ? a->end - a->start : 0;
        rect(f, SVG_LEFT + (double)(a->start - t0) * scale, gpu_y, (double)d * scale,
             a->kind == PMT_ACT_KERNEL ? "#9c755f" : "#ff9da7", a->name, d);
    }
    fputs("</svg>\n", f);
    free(ord), free(depth), free(lanes);
    return ferror(f) ? -1 : 0;
}
