/* c_pedantic.c — mark.h included as a plain -I header by strict C11. */
#include <phasemark/mark.h>

int main(void)
{
    pm_range r = pm_decode_push(1, 2);
    pm_layer_attr a = PM_LAYER_ATTR_INIT;
    pm_range l = pm_layer_range_push(&a);
    pm_range_pop(&l);
    pm_range_pop(&r);
    return 0;
}
