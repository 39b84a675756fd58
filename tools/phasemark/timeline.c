/* timeline.c — placeholder until the HTML timeline lands. */
#include "pmt.h"

int pmt_html(const pmt_trace *t, const pmt_gpu *g, FILE *out)
{
    return pmt_svg(t, g, out);
}
